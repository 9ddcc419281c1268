package config

import (
	"strings"
	"testing"
)

// registryDir is a clone of spark-arena/recipe-registry (testdata/registry/README.md).
const registryDir = "testdata/registry"

// @REGISTRY/NAME loads a recipe from the registry clone; unknown
// registries and names are errors saying what to do.
func TestRecipeRef(t *testing.T) {
	cfg := &Config{File: "sparklane.toml", Registries: map[string]string{"arena": registryDir}}
	r, err := ResolveRecipeRef(cfg, "@arena/minimax-m2.7-awq4-vllm")
	if err != nil || r.Model != "cyankiwi/MiniMax-M2.7-AWQ-4bit" {
		t.Fatalf("@arena ref: %v %v", r, err)
	}
	for ref, want := range map[string]string{
		"@nope/x":     `registry "nope" is not in [registries] of sparklane.toml (known: arena): add nope = "PATH TO ITS CLONE"`,
		"@arena/nope": "no recipe nope.yaml under registry arena",
		"@arena/../x": "write a registry recipe as @REGISTRY/NAME",
	} {
		if _, err := ResolveRecipeRef(cfg, ref); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", ref, err, want)
		}
	}
}
