package config

import (
	"fmt"
	"path/filepath"
	"sort"
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

// Every registry recipe loads unmodified from the clone (recipes_dirs,
// searched recursively, mods resolved from the clone's *-mods/) and
// renders with a cluster on the four-node fleet; every warning of every
// recipe is asserted by the golden file, and each names its key.
func TestRegistryRecipesRenderWithCluster(t *testing.T) {
	cfg := sparkFleet()
	set, err := LoadRecipeSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range set.Broken {
		t.Errorf("broken: %s: %v", b.File, b.Err)
	}
	if len(set.Recipes) != 37 {
		t.Fatalf("loaded %d registry recipes, want 37", len(set.Recipes))
	}
	sort.Slice(set.Recipes, func(i, j int) bool { return set.Recipes[i].File < set.Recipes[j].File })
	var golden strings.Builder
	rendered := 0
	for _, r := range set.Recipes {
		plan, err := RenderOn(cfg, r, "", nil) // default_cluster = quad
		if err != nil {
			t.Errorf("%s: %v", r.File, err)
			continue
		}
		rendered++
		tp, pp, dp := 1, 1, 1
		if v, ok := worldInt(r, nil, "tensor_parallel"); ok {
			tp = v
		}
		if v, ok := worldInt(r, nil, "pipeline_parallel"); ok {
			pp = v
		}
		if v, ok := worldInt(r, nil, "data_parallel"); ok {
			dp = v
		}
		if want := tp * pp * dp; len(plan.Nodes) != want {
			t.Errorf("%s: %d nodes, want tp×pp×dp = %d", r.File, len(plan.Nodes), want)
		}
		if r.MaxNodes > 0 && len(plan.Nodes) > r.MaxNodes {
			t.Errorf("%s: %d nodes over max_nodes %d", r.File, len(plan.Nodes), r.MaxNodes)
		}
		for _, np := range plan.Nodes {
			c := np.Container
			if c.Network != "host" || c.IPC != "host" || c.GPUs != "all" || c.ShmBytes != 32<<30 || c.Privileged ||
				fmt.Sprint(c.SecurityOpt) != "[no-new-privileges]" || fmt.Sprint(c.Ulimits) != "[{memlock -1 -1} {stack 67108864 67108864}]" {
				t.Errorf("%s rank %d container: %+v", r.File, np.Rank, c)
			}
			if np.Env["HF_HUB_OFFLINE"] != "1" || np.Env["TRANSFORMERS_OFFLINE"] != "1" || np.Env["HF_HOME"] != "/cache/huggingface" {
				t.Errorf("%s rank %d offline env: %v", r.File, np.Rank, np.Env)
			}
			if np.Mounts[0] != (Mount{Src: "/mnt/nas/huggingface/hub", Dst: "/cache/huggingface/hub", ReadOnly: true}) {
				t.Errorf("%s rank %d mounts: %+v", r.File, np.Rank, np.Mounts)
			}
			if len(plan.Nodes) > 1 && np.Env["MASTER_PORT"] != "25000" {
				t.Errorf("%s rank %d rendezvous: %v", r.File, np.Rank, np.Env["MASTER_PORT"])
			}
			if np.Rank <= 1 && np.Env["NCCL_IB_HCA"] == "" && r.Env["NCCL_IB_HCA"] == "" {
				t.Errorf("%s rank %d: no NCCL_IB_HCA", r.File, np.Rank)
			}
			for i, m := range r.Mods {
				name := filepath.Base(m)
				if got := np.PreExec[len(np.PreExec)-2*len(r.Mods)+2*i]; got.Dest != "/workspace/mods/"+name || !strings.HasSuffix(got.Copy, "/test-mods/"+name) {
					t.Errorf("%s rank %d mod %s: %+v", r.File, np.Rank, m, got)
				}
			}
		}
		fmt.Fprintf(&golden, "%s: %d nodes\n", strings.TrimPrefix(r.File, registryDir+"/"), len(plan.Nodes))
		for _, w := range plan.Warnings {
			if !strings.HasPrefix(w, r.File+": ") {
				t.Errorf("warning does not name the file: %s", w)
			}
			fmt.Fprintf(&golden, "  %s\n", strings.TrimPrefix(w, r.File+": "))
		}
	}
	t.Logf("registry recipes rendered unmodified with a cluster: %d/%d", rendered, len(set.Recipes))
	checkGolden(t, "registry-warnings.txt", golden.String())
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

// build_args / builder are recorded as the recipe gives them and quoted
// when a node lacks the image.
func TestBuildHint(t *testing.T) {
	r, err := LoadRecipe(registryDir + "/experimental-recipes/qwen3.5/vllm-mesh/qwen3.5-397b-a17b-int4-autoround-3x-vllm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.BuildHint(); got != `build_args ["--tf5"]` {
		t.Errorf("BuildHint = %q", got)
	}
	if got := (Recipe{}).BuildHint(); got != "" {
		t.Errorf("no build keys: %q", got)
	}
}
