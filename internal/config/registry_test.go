package config

import (
	"fmt"
	"strings"
	"testing"
)

// registryDir is a clone of spark-arena/recipe-registry (testdata/registry/README.md).
const registryDir = "testdata/registry"

// sparkFleet is four DGX Sparks on a RoCE switch: dgx1/dgx2 with their
// RDMA devices configured, dgx3/dgx4 without (detection fills them in on
// real nodes). Clusters of 1 to 4 nodes, quad the default.
func sparkFleet() *Config {
	cfg := &Config{
		File:           "sparklane.toml",
		HFCacheDir:     "/mnt/nas/huggingface/hub",
		SharedRoots:    []string{"/mnt/nas"},
		DefaultCluster: "quad",
		RecipesDirs:    []string{registryDir},
		Registries:     map[string]string{"arena": registryDir},
	}
	for i := 1; i <= 4; i++ {
		n := Node{Name: fmt.Sprintf("dgx%d", i), Address: fmt.Sprintf("192.168.100.1%d", i), Roots: []string{"/mnt/nvme"}}
		if i <= 2 {
			n.HCA = "rocep1s0f1,roceP2p1s0f1"
			n.IfName = "enp1s0f1np1,enP2p1s0f1np1"
		}
		cfg.Nodes = append(cfg.Nodes, n)
	}
	cfg.Clusters = []Cluster{
		{Name: "solo", Nodes: []string{"dgx1"}},
		{Name: "pair", Nodes: []string{"dgx1", "dgx2"}},
		{Name: "trio", Nodes: []string{"dgx1", "dgx2", "dgx3"}},
		{Name: "quad", Nodes: []string{"dgx1", "dgx2", "dgx3", "dgx4"}},
	}
	return cfg
}

// @REGISTRY/NAME loads a recipe from the registry clone; unknown
// registries and names are errors saying what to do.
func TestRecipeRef(t *testing.T) {
	cfg := sparkFleet()
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
