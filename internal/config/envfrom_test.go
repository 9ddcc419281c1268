package config

import (
	"strings"
	"testing"
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
	cfg, err := Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	g, err := LoadRecipe(good)
	if err != nil {
		t.Fatal(err)
	}
	if g.EnvFrom["HF_TOKEN"] != "file:/etc/sparklane/hf_token" || g.EnvFrom["API_KEY"] != "env:SPARKLANE_API_KEY" {
		t.Errorf("env_from loaded as %v", g.EnvFrom)
	}
	b, err := LoadRecipe(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(cfg, []*Recipe{g}); err != nil {
		t.Errorf("good recipe: %v", err)
	}
	err = Validate(cfg, []*Recipe{b})
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
