package lane

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// [env_from] names where a secret lives; the recipe loads it, and every
// fault is named by file and key without echoing a pasted value.
func TestEnvFromIsLoadedAndValidated(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "sparklane.toml", "[[nodes]]\nname = \"a\"\nroots = [\"/nvme\"]\n[[clusters]]\nname = \"c\"\nnodes = [\"a\"]\n")
	good := writeFile(t, dir, "good.toml", `
name = "good"
cluster = "c"
runtime = "sim"
image = "i"
command = "serve"
[env]
SIM_LANE = "good"
[env_from]
HF_TOKEN = "file:/etc/sparklane/hf_token"
API_KEY = "env:SPARKLANE_API_KEY"
`)
	bad := writeFile(t, dir, "bad.toml", `
name = "bad"
cluster = "c"
runtime = "sim"
image = "i"
command = "serve"
[env]
API_KEY = "plain"
[env_from]
API_KEY = "env:X"
TOKEN = "hf_pastedSecretValue"
REL = "file:etc/token"
`)
	cfg := mustConfig(t, cfgPath)
	g := mustRecipe(t, good)
	if g.EnvFrom["HF_TOKEN"] != "file:/etc/sparklane/hf_token" || g.EnvFrom["API_KEY"] != "env:SPARKLANE_API_KEY" {
		t.Errorf("env_from loaded as %v", g.EnvFrom)
	}
	b := mustRecipe(t, bad)
	if err := Validate(cfg, []*config.Recipe{g}); err != nil {
		t.Errorf("good recipe: %v", err)
	}
	err := Validate(cfg, []*config.Recipe{b})
	if err == nil {
		t.Fatal("bad env_from accepted")
	}
	for _, w := range []string{
		bad + ": env_from.API_KEY: API_KEY is also set in [env]",
		bad + ": env_from.TOKEN: not a source",
		bad + `: env_from.REL: "file:etc/token": the file must be an absolute, clean path`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%s", w, err)
		}
	}
	if strings.Contains(err.Error(), "hf_pastedSecretValue") {
		t.Errorf("a value pasted into env_from is echoed: %s", err)
	}
}

// Render carries env_from's sources (never values) into every node's plan,
// and warns when [env] holds a secret-looking literal value, naming the
// file and key and the fix.
func TestRenderCarriesEnvFromAndWarnsOfSecretsInEnv(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "sparklane.toml", "[[nodes]]\nname = \"a\"\nroots = [\"/nvme\"]\n[[nodes]]\nname = \"b\"\nroots = [\"/nvme\"]\n[[clusters]]\nname = \"c\"\nnodes = [\"a\", \"b\"]\n")
	path := writeFile(t, dir, "lane.toml", `
name = "lane"
cluster = "c"
runtime = "sim"
image = "i"
command = "serve"
[env]
MAX_NUM_BATCHED_TOKENS = "8192"
WANDB_API_KEY = "literal-value-1234"
[env_from]
HF_TOKEN = "env:HF_TOKEN"
`)
	cfg := mustConfig(t, cfgPath)
	r := mustRecipe(t, path)
	plan, err := Render(cfg, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range plan.Nodes {
		if n.EnvFrom["HF_TOKEN"] != "env:HF_TOKEN" || len(n.EnvFrom) != 1 {
			t.Errorf("node %s env_from %v", n.Node, n.EnvFrom)
		}
		if _, ok := n.Env["HF_TOKEN"]; ok {
			t.Errorf("node %s: env_from variable in the plan's env", n.Node)
		}
	}
	r.EnvFrom["OTHER"] = "env:X" // the plan does not alias the recipe
	if _, ok := plan.Nodes[0].EnvFrom["OTHER"]; ok {
		t.Error("the plan's env_from aliases the recipe's map")
	}
	var warned []string
	for _, w := range plan.Warnings {
		if strings.Contains(w, "looks like a secret") {
			warned = append(warned, w)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], path+": env.WANDB_API_KEY looks like a secret") || !strings.Contains(warned[0], "[env_from]") || strings.Contains(warned[0], "literal-value-1234") {
		t.Errorf("secret warnings %q; want one naming %s env.WANDB_API_KEY and [env_from], without the value", warned, path)
	}
}
