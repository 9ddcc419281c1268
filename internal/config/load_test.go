package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// validate is what config checks of the files on their own: the fleet
// config, recipe names against each other, each recipe alone. With no
// recipes, or no config, it is exactly lane.Validate (which adds the
// checks that need both).
func validate(cfg *Config, recipes []*Recipe) error {
	var errs []error
	if cfg != nil {
		errs = append(errs, ConfigErrors(cfg)...)
	}
	errs = append(errs, NameErrors(recipes)...)
	for _, r := range recipes {
		errs = append(errs, RecipeErrors(r)...)
	}
	return errors.Join(errs...)
}

func TestLoadDefaultsAndPaths(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "sparklane.toml", conftest.GoodConfig)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Temporal.Namespace != "default" || cfg.Temporal.Port != 7233 || cfg.Temporal.UIPort != 9233 {
		t.Fatalf("temporal defaults: %+v", cfg.Temporal)
	}
	if cfg.ProbeGrace != 5*time.Second {
		t.Fatalf("probe_grace default = %v", cfg.ProbeGrace)
	}
	if cfg.StateDir != filepath.Join(dir, "state") || cfg.RecipesDir != filepath.Join(dir, "recipes") {
		t.Fatalf("state_dir %s recipes_dir %s not relative to %s", cfg.StateDir, cfg.RecipesDir, dir)
	}
	if cfg.Nodes[0].FSRoot != "/" || cfg.Nodes[1].FSRoot != "/tmp/b" || cfg.Nodes[0].Docker != DefaultDocker {
		t.Fatalf("node defaults: %+v", cfg.Nodes)
	}
	if err := validate(cfg, nil); err != nil {
		t.Fatal(err)
	}
}

func TestLoadSearchOrder(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "fleet.toml", conftest.GoodConfig)
	t.Setenv("SPARKLANE_CONFIG", p)
	cfg, err := Load("")
	if err != nil || cfg.File != p {
		t.Fatalf("$SPARKLANE_CONFIG not used: %v %v", cfg, err)
	}
	t.Setenv("SPARKLANE_CONFIG", "")
	t.Chdir(dir)
	if _, err := Load(""); err == nil || !strings.Contains(err.Error(), "sparklane.toml") {
		t.Fatalf("missing config error should name ./sparklane.toml: %v", err)
	}
	conftest.WriteFile(t, dir, "sparklane.toml", conftest.GoodConfig)
	cfg, err = Load("")
	if err != nil || cfg.File != "sparklane.toml" {
		t.Fatalf("./sparklane.toml not used: %v %v", cfg, err)
	}
	home, _ := os.UserHomeDir()
	if cfg.StateDir != filepath.Join(dir, "state") {
		t.Fatalf("state_dir %s", cfg.StateDir)
	}
	conftest.WriteFile(t, dir, "sparklane.toml", "[[nodes]]\nname = \"x\"\n")
	cfg, err = Load("")
	if err != nil || cfg.StateDir != filepath.Join(home, ".local/state/sparklane") {
		t.Fatalf("default state_dir not expanded: %v %v", cfg, err)
	}
}

// The real incident: hf_cache_dir written after a [[clusters]] header was
// parsed into the cluster table and silently ignored.
func TestLoadRootKeyAfterClustersHeader(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "sparklane.toml", `
[[nodes]]
name = "dgx1"
roots = ["/nvme"]

[[clusters]]
name = "solo"
nodes = ["dgx1"]

[[clusters]]
name = "solo2"
nodes = ["dgx1"]
hf_cache_dir = "/mnt/nas/huggingface/hub"
`)
	_, err := Load(p)
	if err == nil {
		t.Fatal("hf_cache_dir under [[clusters]] was accepted")
	}
	want := p + ": unknown key clusters[1].hf_cache_dir — did you mean the root key hf_cache_dir? Root keys must come before the first [[table]] header"
	if err.Error() != want {
		t.Fatalf("error\n got: %s\nwant: %s", err, want)
	}
	if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec {
		t.Fatalf("error type %q, want InvalidSpec", typ)
	}
}

func TestLoadWrongTypesAndTypos(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "sparklane.toml", `
probe_grace = 5
[temporal]
ui_port = "x"
namspace = "prod"
[[nodes]]
name = "a"
roots = "/nvme"
`)
	_, err := Load(p)
	if err == nil {
		t.Fatal("wrong types accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		p + ": probe_grace: expected a duration string like \"5s\", got int64 5",
		p + ": temporal.ui_port: expected an integer, got string \"x\"",
		p + ": unknown key temporal.namspace — did you mean temporal.namespace?",
		p + ": nodes[0].roots: expected an array, got string \"/nvme\"",
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || l == w
		}
		if !found {
			t.Errorf("missing error line %q in:\n%s", w, err)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("got %d lines, want %d:\n%s", len(lines), len(want), err)
	}
}

func TestLoadSyntaxErrorHasPosition(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "sparklane.toml", "state_dir = \"x\"\nnodes = [\n")
	_, err := Load(p)
	if err == nil || !strings.HasPrefix(err.Error(), p+":2:") && !strings.HasPrefix(err.Error(), p+":3:") {
		t.Fatalf("syntax error should carry file:line: %v", err)
	}
}

func TestRecipeMinFreeWrongType(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "lane.toml", `
runtime = "sim"
image = "x"
command = "run"
[[staging]]
kind = "hub-mirror"
min_free = "lots"
[[staging]]
kind = "hub-mirror"
min_free = "100G"
veriffy = "sha256"
`)
	_, err := LoadRecipe(p)
	if err == nil {
		t.Fatal("min_free = \"lots\" accepted")
	}
	for _, w := range []string{
		p + `: staging[0].min_free: "lots" is not a size`,
		p + `: unknown key staging[1].veriffy — did you mean staging[1].verify?`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%s", w, err)
		}
	}
	p2 := conftest.WriteFile(t, dir, "lane2.toml", "runtime = \"sim\"\n[[staging]]\nkind = \"hub-mirror\"\nmin_free = \"1.5T\"\n")
	r, err := LoadRecipe(p2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Staging[0].MinFree != 3<<39 || r.Name != "lane2" || r.Format != "toml" || r.Staging[0].Verify != "sampled" || r.Probe.Path != "/v1/models" || r.Hooks.Timeout != 2*time.Minute {
		t.Fatalf("recipe: %+v", r)
	}
}

func TestEveryFixtureLoads(t *testing.T) {
	dir := conftest.SparkrunFixtures(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		n++
		t.Run(e.Name(), func(t *testing.T) {
			p := filepath.Join(dir, e.Name())
			r, err := LoadRecipe(p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Format != "sparkrun" || r.Name != strings.TrimSuffix(e.Name(), ".yaml") || r.Runtime != "vllm" {
				t.Fatalf("recipe header: %+v", r)
			}
			if !strings.HasPrefix(r.Image, "ghcr.io/spark-arena/") || r.Model == "" || !strings.Contains(r.Command, "vllm serve {model}") {
				t.Fatalf("image/model/command not carried: %q %q %q", r.Image, r.Model, r.Command)
			}
			if r.RecipeVersion != "2" || r.Defaults["port"] != int64(8000) {
				t.Fatalf("recipe_version %q, defaults.port %#v", r.RecipeVersion, r.Defaults["port"])
			}
			if err := validate(nil, []*Recipe{r}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if n < 9 {
		t.Fatalf("found %d fixtures in %s, want at least 9", n, dir)
	}
	all, err := LoadRecipes(dir)
	if err != nil || len(all) != n {
		t.Fatalf("LoadRecipes(%s) = %d recipes, %v", dir, len(all), err)
	}
}

func TestSparkrunUnknownKey(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(conftest.SparkrunFixtures(t), "minimax-m2.7-awq4-vllm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := conftest.WriteFile(t, dir, "typo.yaml", strings.Replace(string(src), "min_nodes: 2", "min_node: 2", 1))
	_, err = LoadRecipe(p)
	if err == nil || !strings.Contains(err.Error(), p+": unknown key min_node — did you mean min_nodes?") {
		t.Fatalf("sparkrun typo: %v", err)
	}
	p = conftest.WriteFile(t, dir, "v1.yaml", strings.Replace(string(src), `recipe_version: "2"`, `recipe_version: "1"`, 1))
	if _, err := LoadRecipe(p); err == nil || !strings.Contains(err.Error(), p+": recipe_version") {
		t.Fatalf("recipe_version 1: %v", err)
	}
}

func TestLoadRecipesSkipsFleetConfigAndReportsAll(t *testing.T) {
	dir := t.TempDir()
	conftest.WriteFile(t, dir, "sparklane.example.toml", conftest.GoodConfig)
	conftest.WriteFile(t, dir, "ok.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\n")
	conftest.WriteFile(t, dir, "bad1.toml", "runtime = \"sim\"\nimgae = \"i\"\n")
	conftest.WriteFile(t, dir, "bad2.yaml", "model: m\nfoo: 1\n")
	conftest.WriteFile(t, dir, "notes.txt", "ignored")
	rs, err := LoadRecipes(dir)
	if len(rs) != 1 || rs[0].Name != "ok" {
		t.Fatalf("loaded %v", rs)
	}
	var fe *fault.Error
	if !errors.As(err, &fe) || len(strings.Split(err.Error(), "\n")) != 2 {
		t.Fatalf("want two errors (bad1, bad2), got:\n%v", err)
	}
}

// A node's ssh without a port (what `starter init` wrote before it wrote
// the port) is read as ssh reads it, port 22, by every command alike, with
// a note saying how to write it; a target that is not user@host stays an
// error of the check.
func TestLoadSSHWithoutPortIsPort22WithANote(t *testing.T) {
	dir := t.TempDir()
	body := strings.Replace(conftest.GoodConfig, `ssh = "op@10.0.0.1:22"`, `ssh = "op@10.0.0.1"`, 1) +
		"\n[[nodes]]\nname = \"c\"\nssh = \"op@[fd00::3]\"\nroots = [\"/nvme\"]\n\n[[nodes]]\nname = \"d\"\nssh = \"op@10.0.0.4:2222\"\nroots = [\"/nvme\"]\n"
	p := conftest.WriteFile(t, dir, "sparklane.toml", body)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{cfg.Nodes[0].SSH, cfg.Nodes[2].SSH, cfg.Nodes[3].SSH}; got[0] != "op@10.0.0.1:22" || got[1] != "op@[fd00::3]:22" || got[2] != "op@10.0.0.4:2222" {
		t.Fatalf("ssh read as %q", got)
	}
	if len(cfg.Notes) != 2 || !strings.Contains(cfg.Notes[0], p+`: nodes[0].ssh: "op@10.0.0.1" has no port: read as "op@10.0.0.1:22"`) || !strings.Contains(cfg.Notes[1], "nodes[2].ssh") {
		t.Fatalf("notes %q", cfg.Notes)
	}
	if err := validate(cfg, nil); err != nil {
		t.Fatalf("the check rejects what the load read: %v", err)
	}
	for _, bad := range []string{"op@", "@10.0.0.1", "op@a:b:c", "op@h:x"} {
		if s, ok := sshWithPort(bad); ok {
			t.Errorf("sshWithPort(%q) = %q: want it left to the check", bad, s)
		}
	}
}
