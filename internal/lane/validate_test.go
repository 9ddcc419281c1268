package lane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

func TestValidateReportsEveryFaultAtOnce(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "sparklane.toml", `
[[nodes]]
name = "a"
roots = ["/nvme"]

[[nodes]]
name = "b"
roots = ["/nvme", "/data"]

[[clusters]]
name = "pair"
nodes = ["a", "b"]

[[clusters]]
name = "broken"
nodes = ["a", "ghost"]

[[clusters]]
name = "one"
nodes = ["a"]
`)
	r1 := writeFile(t, dir, "r1.toml", `
aliases = ["x"]
cluster = "nope"
runtime = "sim"
image = "img"
command = "serve"
`)
	r2 := writeFile(t, dir, "r2.toml", `
aliases = ["x"]
cluster = "pair"
runtime = "sim"
image = "img"
command = "serve"
[defaults]
tensor_parallel = 4
[[staging]]
kind = "hub-mirror"
src = "/nas/hub"
dst = "/data/w"
repos = ["org/m"]
`)
	r3 := writeFile(t, dir, "r3.toml", `
cluster = "one"
runtime = "sim"
image = "img"
command = "serve"
[[staging]]
kind = "hub-mirror"
src = "/nas/hub"
dst = "/nvme/../etc/w"
repos = ["org/m"]
`)
	cfg := mustConfig(t, cfgPath)
	var recipes []*config.Recipe
	for _, p := range []string{r1, r2, r3} {
		r := mustRecipe(t, p)
		recipes = append(recipes, r)
	}
	err := Validate(cfg, recipes)
	if err == nil {
		t.Fatal("six faults, no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		cfgPath + `: clusters[1].nodes[1]: unknown node "ghost" in cluster broken — known nodes: a, b`,
		r2 + `: aliases[0]: alias "x" is also claimed by lane r1 (` + r1 + `): each alias names one lane`,
		r1 + `: cluster: unknown cluster "nope" — known clusters: pair, broken, one`,
		r2 + `: defaults.tensor_parallel: 4 is larger than cluster pair (2 nodes, one GPU each): lower it or pick a bigger cluster`,
		r2 + `: staging[0].dst: /data/w is outside node a's roots [/nvme]: add a root to the node or change the path`,
		r3 + `: staging[0].dst: /nvme/../etc/w escapes node a's roots [/nvme] via ".." (it cleans to /etc/w): remove the ".."`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), err)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d\n got: %s\nwant: %s", i, lines[i], want[i])
		}
	}
}

func TestValidateRecipeAndNodeFaults(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "sparklane.toml", `
[[nodes]]
name = "a"
ssh = "dgx1"
roots = ["/nvme"]
[[nodes]]
name = "a"
ssh = "op@dgx1:ssh"
[[clusters]]
name = "c"
nodes = ["a"]
`)
	rp := writeFile(t, dir, "bad.toml", `
name = "bad"
aliases = ["bad2"]
cluster = "c"
runtime = "tgi"
command = "serve"
[defaults]
node_rank = 1
[[staging]]
kind = "rsync"
src = "/nas"
dst = "/nvme/x"
[[staging]]
kind = "hub-mirror"
verify = "md5"
[[staging]]
kind = "sparse-rows"
src = "/nas"
dst = "/nvme/y"
format = "dense"
`)
	other := writeFile(t, dir, "bad2.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\ncluster = \"c\"\n")
	cfg := mustConfig(t, cfgPath)
	r := mustRecipe(t, rp)
	r2 := mustRecipe(t, other)
	err := Validate(cfg, []*config.Recipe{r, r2})
	if err == nil {
		t.Fatal("faults accepted")
	}
	for _, w := range []string{
		cfgPath + `: nodes[0].ssh: "dgx1" is not user@host:port`,
		cfgPath + `: nodes[1].name: node a is defined twice (also nodes[0])`,
		cfgPath + `: nodes[1].ssh: "op@dgx1:ssh": port "ssh" is not a number`,
		rp + `: aliases[0]: alias "bad2" is the name of lane bad2`,
		rp + `: runtime: unknown runtime "tgi": use one of sglang, vllm, exllamav3, sim`,
		rp + `: image: missing`,
		rp + `: defaults.node_rank: node_rank is set per node by sparklane`,
		rp + `: staging[0].kind: unknown staging kind "rsync"`,
		rp + `: staging[1].src: missing`,
		rp + `: staging[1].dst: missing`,
		rp + `: staging[1].repos: missing`,
		rp + `: staging[1].verify: unknown verify mode "md5"`,
		rp + `: staging[2].tensors: missing`,
		rp + `: staging[2].layers: missing`,
		rp + `: staging[2].format: "dense": use packed or sparse-copy`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%s", w, err)
		}
	}
}

func TestShippedRecipesValidateAgainstExample(t *testing.T) {
	dir := shippedRecipesDir(t)
	// The example is written for the repo root (recipes_dir = "recipes");
	// loaded where it lies, the environment points it at recipes/.
	t.Setenv("SPARKLANE_RECIPES_DIR", dir)
	cfg := mustConfig(t, filepath.Join(dir, "sparklane.example.toml"))
	if cfg.HFCacheDir == "" || len(cfg.Nodes) != 5 || cfg.Cluster("2nodes-dac") == nil || cfg.Cluster("4nodes-switch") == nil {
		t.Fatalf("example config: hf_cache_dir %q, %d nodes, clusters %v", cfg.HFCacheDir, len(cfg.Nodes), cfg.ClusterNames())
	}
	rs, err := config.LoadRecipes(cfg.RecipesDir)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range rs {
		names[r.Name] = true
	}
	for _, want := range []string{"dsv41-flash-4x-mia", "dsv41-flash-exl3-2x", "aiden16", "mimo26-flash-mopd-4x", "mimo26-flash-mopd-2x", "sim-demo"} {
		if !names[want] {
			t.Errorf("shipped lane %s missing from %s", want, dir)
		}
	}
	if err := Validate(cfg, rs); err != nil {
		t.Fatal(err)
	}
	for alias, lane := range map[string]string{"mia": "dsv41-flash-4x-mia", "exl3": "dsv41-flash-exl3-2x", "mopd": "mimo26-flash-mopd-4x"} {
		r, err := config.Resolve(rs, alias)
		if err != nil || r.Name != lane {
			t.Errorf("alias %s: %v %v", alias, r, err)
		}
	}
	// What `starter recipe check recipes/*` runs: the shipped lanes pin
	// what the operator's log gives, and recipe check says "complete this"
	// for every pin the log gives only in part (never zeros that pass),
	// and nothing else.
	paths, _ := filepath.Glob(filepath.Join(dir, "*.toml"))
	errs := checkFiles(paths)
	text := errText(errs)
	for _, e := range errs {
		if !strings.Contains(e.Error(), "complete this") {
			t.Errorf("recipe check of the shipped lanes: %v (only incomplete pins may be reported)", e)
		}
	}
	for _, want := range []string{
		"dsv41-flash-4x-mia.toml: image: digest sha256:3dbc3130 has 8 of 64 hex digits: complete this digest",
		"dsv41-flash-4x-mia.toml: defaults.revision: revision fb2764a5 has 8 of 40 hex digits: complete this digest",
		"dsv41-flash-4x-mia.toml: staging[0].src: revision fb2764a5",
		"dsv41-flash-exl3-2x.toml: staging[0].repos[1]: repo id \"…/DSpark-drafter\"",
		"mimo26-flash-mopd-2x.toml: image: digest sha256:0000000000000000000000000000000000000000000000000000000000000000 is a zero placeholder: complete this digest",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("recipe check does not say %q:\n%s", want, text)
		}
	}
}

func TestCheckFilesNamesEveryFault(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve {nope}\"\ncluster = \"pair\"\n")
	b := writeFile(t, dir, "b.toml", "runtime = \"sim\"\ncomand = \"x\"\n")
	c := writeFile(t, dir, "c.toml", "runtime = \"gpt\"\nimage = \"i\"\ncommand = \"x\"\n")
	errs := checkFiles([]string{a, b, c})
	got := ""
	for _, e := range errs {
		got += e.Error() + "\n"
	}
	for _, w := range []string{
		b + ": unknown key comand — did you mean command?",
		c + `: runtime: unknown runtime "gpt"`,
	} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
	// With a fleet config among the files, recipes are rendered too, so an
	// unknown placeholder is caught by the check.
	cfgPath := writeFile(t, dir, "sparklane.toml", goodConfig)
	errs = checkFiles([]string{cfgPath, a})
	if len(errs) != 1 || errs[0].Error() != a+": command: unknown placeholder {nope}: add nope under [defaults] or pass -o nope=VALUE" {
		t.Fatalf("check with config: %v", errs)
	}
}

// The README's path: the example copied to the repository root as
// sparklane.toml lists the shipped lanes, and nothing else at the root (the
// compose file, the config itself) is read as a recipe.
func TestExampleCopiedToRepoRootListsShippedLanes(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	// A stand-in repository root: the example copied in, recipes/ and the
	// compose file beside it as in the clone.
	if err := os.Symlink(filepath.Join(root, "recipes"), filepath.Join(dir, "recipes")); err != nil {
		t.Fatal(err)
	}
	for _, f := range [][2]string{{"recipes/sparklane.example.toml", "sparklane.toml"}, {"docker-compose.temporal.yml", "docker-compose.temporal.yml"}} {
		b, err := os.ReadFile(filepath.Join(root, f[0]))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, f[1], string(b))
	}
	t.Chdir(dir)
	t.Setenv("SPARKLANE_CONFIG", "")
	cfg := mustConfig(t, "")
	if cfg.RecipesDir != filepath.Join(dir, "recipes") {
		t.Fatalf("recipes_dir %s, want %s", cfg.RecipesDir, filepath.Join(dir, "recipes"))
	}
	rs, warnings, err := config.LoadRecipeDir(cfg.RecipesDir, cfg.File)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("load: %v, warnings %v", err, warnings)
	}
	if len(rs) != 6 {
		t.Fatalf("%d lanes, want the 6 shipped ones", len(rs))
	}
	if err := Validate(cfg, rs); err != nil {
		t.Fatal(err)
	}
	// The set every command reads follows the symlinked recipes_dir too
	// (a link below it would not be followed).
	set, err := config.LoadRecipeSet(cfg, cfg.File)
	if err != nil || len(set.Recipes) != 6 || len(set.Broken) != 0 || set.Find("mia") == nil || set.Find("sim") == nil {
		t.Fatalf("recipe set through the symlinked recipes_dir: %v, %d recipes, broken %v", err, len(set.Recipes), set.Broken)
	}
	// Pointed at the root itself, the compose file and the config are
	// skipped with a warning, never an error.
	_, warnings, err = config.LoadRecipeDir(dir, cfg.File)
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "docker-compose.temporal.yml: not a lane recipe") {
		t.Fatalf("repo root as recipes_dir: %v, warnings %q", err, warnings)
	}
}
