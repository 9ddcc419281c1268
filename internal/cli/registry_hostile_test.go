package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// registryFleetConfig writes a two-node fleet config under dir with its
// state in dir/state and extra lines first; it returns the config's path.
func registryFleetConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "lanes"), 0o755); err != nil {
		t.Fatal(err)
	}
	return writeConfigTestFile(t, dir, "sparklane.toml", extra+"state_dir = "+jsonString(filepath.Join(dir, "state"))+
		"\nrecipes_dir = "+jsonString(filepath.Join(dir, "lanes"))+"\nhf_cache_dir = \"/mnt/nas/hub\"\nshared_roots = [\"/mnt/nas\"]\n"+
		"[[nodes]]\nname = \"dgx1\"\naddress = \"10.0.0.1\"\nroots = [\"/mnt/nvme\"]\n[[nodes]]\nname = \"dgx2\"\naddress = \"10.0.0.2\"\nroots = [\"/mnt/nvme\"]\n"+
		"[[clusters]]\nname = \"pair\"\nnodes = [\"dgx1\", \"dgx2\"]\n")
}

// Issue 52: a registry is someone else's git repository, and its recipe
// files are read from inside its clone only. A recipe that is a symlink to
// a file outside the clone — a token that is not YAML (its parse error
// would quote it), a valid recipe elsewhere — is never opened: lanes,
// recipe check and render never show the secret, the recipe is no lane,
// and it is listed broken saying it links outside the clone. A symlink to
// a recipe inside the clone works.
func TestRegistrySymlinksStayInsideTheClone(t *testing.T) {
	dir := t.TempDir()
	clone := filepath.Join(dir, "state", "registries", "evil")
	cfg := registryFleetConfig(t, dir, "recipes_dirs = ["+jsonString(clone)+"]\n")
	outside := t.TempDir()
	const secret = "hf_SECRET-TOKEN-4f9a1c"
	token := writeConfigTestFile(t, outside, "token", secret+": [unclosed\n")
	elsewhere := writeConfigTestFile(t, outside, "elsewhere.yaml", regRecipeYAML)

	reg := newBareRegistry(t)
	recipes := filepath.Join(reg.work, "official-recipes")
	writeConfigTestFile(t, recipes, "alpha.yaml", regRecipeYAML)
	// Relative from where the clone will be, so the link leaves it by "..".
	relOut, err := filepath.Rel(filepath.Join(clone, "official-recipes"), elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"tok.yaml": token, "elsewhere.yaml": relOut, "alias.yaml": "alpha.yaml"} {
		if err := os.Symlink(target, filepath.Join(recipes, link)); err != nil {
			t.Fatal(err)
		}
	}
	reg.commit("links", nil)
	if code, out, errOut := runStarter(t, "--config", cfg, "registry", "add", "evil", reg.bare); code != 0 {
		t.Fatalf("registry add: exit %d\n%s%s", code, out, errOut)
	}
	if target, err := os.Readlink(filepath.Join(clone, "official-recipes", "tok.yaml")); err != nil || target != token {
		t.Fatalf("the clone does not hold the link (git checked out %q, %v)", target, err)
	}

	noSecret := func(what, text string) {
		t.Helper()
		if strings.Contains(text, secret) || strings.Contains(text, "unclosed") {
			t.Errorf("%s shows the content of a file outside the clone:\n%s", what, text)
		}
	}
	code, out, errOut := runStarter(t, "--config", cfg, "--json", "lanes")
	noSecret("lanes", out+errOut)
	var listed struct {
		Lanes  []map[string]any      `json:"lanes"`
		Broken []config.BrokenRecipe `json:"broken"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil {
		t.Fatalf("lanes --json: exit %d\n%s%s", code, out, errOut)
	}
	var names []string
	for _, l := range listed.Lanes {
		names = append(names, l["name"].(string))
	}
	if strings.Join(names, ",") != "alias,alpha" {
		t.Errorf("lanes: %v, want alias (a link inside the clone) and alpha only", names)
	}
	broken := map[string]string{}
	for _, b := range listed.Broken {
		broken[filepath.Base(b.File)] = b.Error
	}
	for file, link := range map[string]string{"tok.yaml": "is a symlink to " + jsonString(token), "elsewhere.yaml": "is a symlink to " + jsonString(relOut)} {
		p := filepath.Join(clone, "official-recipes", file)
		if e := broken[file]; !strings.HasPrefix(e, p+": "+link+", which links outside registry evil's clone "+clone) || !strings.Contains(e, "replace the link") {
			t.Errorf("lanes lists %s as broken with %q; want it to name the file and say it links outside the clone", file, e)
		}
	}

	for _, args := range [][]string{{"lanes"}, {"recipe", "check"}, {"recipe", "render", "--lane", "tok"}} {
		_, out, errOut := runStarter(t, append([]string{"--config", cfg}, args...)...)
		noSecret(strings.Join(args, " "), out+errOut)
	}
	for _, lane := range []string{"@evil/tok", "@evil/elsewhere"} {
		code, out, errOut := runStarter(t, "--config", cfg, "recipe", "render", "--lane", lane)
		noSecret("render "+lane, out+errOut)
		if code == 0 || !strings.Contains(errOut, "links outside registry evil's clone") {
			t.Errorf("render --lane %s: exit %d, want it refused as a link out of the clone\n%s%s", lane, code, out, errOut)
		}
	}
	if code, out, errOut := runStarter(t, "--config", cfg, "--json", "recipe", "render", "--lane", "@evil/alias"); code != 0 || !strings.Contains(out, `"lane": "alias"`) {
		t.Errorf("render --lane @evil/alias (a link inside the clone): exit %d\n%s%s", code, out, errOut)
	}
}

// registry add refuses a --ref or URL starting with '-' (git would read
// it as an option), a name that is no name, and git's command-running
// transports, with a clear error before git runs: no clone is begun.
func TestRegistryAddRefusesOptionLookingInput(t *testing.T) {
	dir := t.TempDir()
	cfg := registryFleetConfig(t, dir, "")
	reg := newBareRegistry(t)
	reg.commit("one recipe", map[string]string{"official-recipes/alpha.yaml": regRecipeYAML})
	mark := filepath.Join(dir, "pwned")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"registry", "add", "ok", reg.bare, "--ref=-x"}, `registry ok: --ref "-x" starts with '-', which git would read as an option: give a branch, tag or commit`},
		{[]string{"registry", "add", "ok", reg.bare, "--ref", "--upload-pack=touch " + mark}, `--ref "--upload-pack=touch ` + mark + `" starts with '-'`},
		{[]string{"registry", "add", "ok", reg.bare, "--ref", "main..x"}, `is not a valid git ref name`},
		{[]string{"registry", "add", "--", "-x", reg.bare}, `registry name "-x": "-x" is not a lane name`},
		{[]string{"registry", "add", "--", "ok", "--upload-pack=touch " + mark}, `registry ok: URL "--upload-pack=touch ` + mark + `" starts with '-', which git would read as an option`},
		{[]string{"registry", "add", "ok", "ext::sh -c touch% " + mark}, `uses git's ext:: transport, which runs a command`},
	} {
		code, out, errOut := runStarter(t, append([]string{"--config", cfg}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want an error with %q\n%s%s", c.args, code, c.want, out, errOut)
		}
	}
	// Add makes STATE_DIR/registries only once it goes on to clone.
	if _, err := os.Stat(filepath.Join(dir, "state", "registries")); !os.IsNotExist(err) {
		t.Errorf("a refused add went on to clone (STATE_DIR/registries: %v)", err)
	}
	if _, err := os.Lstat(mark); err == nil {
		t.Errorf("an option in a ref or URL ran: %s exists", mark)
	}
	// The same ref as a value is fine.
	if code, out, errOut := runStarter(t, "--config", cfg, "registry", "add", "ok", reg.bare, "--ref", "main"); code != 0 {
		t.Fatalf("registry add --ref main: exit %d\n%s%s", code, out, errOut)
	}
}
