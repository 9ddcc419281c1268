package lane

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// Every registry recipe loads unmodified from the clone (recipes_dirs,
// searched recursively, mods resolved from the clone's *-mods/) and
// renders with a cluster on the four-node fleet; every warning of every
// recipe is asserted by the golden file, and each names its key.
func TestRegistryRecipesRenderWithCluster(t *testing.T) {
	cfg := sparkFleet()
	set, err := config.LoadRecipeSet(cfg)
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
		w := Wire(r)
		tp, pp, dp := 1, 1, 1
		if v, ok := worldInt(&w, nil, "tensor_parallel"); ok {
			tp = v
		}
		if v, ok := worldInt(&w, nil, "pipeline_parallel"); ok {
			pp = v
		}
		if v, ok := worldInt(&w, nil, "data_parallel"); ok {
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
			if np.Mounts[0] != (contract.Mount{Src: "/mnt/nas/huggingface/hub", Dst: "/cache/huggingface/hub", ReadOnly: true}) {
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

// build_args / builder are recorded as the recipe gives them and quoted
// when a node lacks the image.
func TestBuildHint(t *testing.T) {
	r := mustRecipe(t, registryDir+"/experimental-recipes/qwen3.5/vllm-mesh/qwen3.5-397b-a17b-int4-autoround-3x-vllm.yaml")
	if got := Wire(r).BuildHint(); got != `build_args ["--tf5"]` {
		t.Errorf("BuildHint = %q", got)
	}
	if got := (contract.Recipe{}).BuildHint(); got != "" {
		t.Errorf("no build keys: %q", got)
	}
}
