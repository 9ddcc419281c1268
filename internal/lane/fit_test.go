package lane

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/fittest"
)

// The fit reads the model where the lane's hub-mirror block stages it,
// at the block's pinned revision (before hf_cache_dir); a model on no
// NAS yet is not estimated, saying where it looked, and never refused.
func TestFitFindsTheStagedSnapshot(t *testing.T) {
	cfg := sparkFleet()
	nas := t.TempDir()
	snap := fittest.Snapshot(t, nas, "org/big", fittest.Config, 50e9, 50e9)
	r := &contract.Recipe{Name: "big", Model: "org/big", Runtime: "vllm",
		Staging: []contract.Staging{{Kind: "hub-mirror", Src: nas, Repos: []string{"org/big"}, Revision: fittest.Rev}}}
	plan := &contract.LanePlan{Runtime: "vllm", TP: 2, Nodes: []contract.NodePlan{{Node: "dgx1", Argv: []string{"vllm", "serve", "org/big"}}, {Node: "dgx2"}}}
	est, note := Fit(cfg, r, plan, map[string]int64{"dgx2": 256e9})
	if est == nil || note != "" || est.Weights.Dir != snap || est.Engine.TP != 2 {
		t.Fatalf("%v %q", est, note)
	}
	// dgx1 a DGX Spark by default: 100 GB + 2 GB of KV ≤ 115.2 GB; dgx2's reported memory is used.
	if est.Err() != nil || est.Nodes[0].Source != "DGX Spark default" || est.Nodes[1].Memory != 256e9 || est.Nodes[1].Source != "MemTotal its worker reported" {
		t.Errorf("%+v", est.Nodes)
	}
	r.Staging[0].Revision = "v2" // a ref the NAS does not have
	r.Model, r.Staging[0].Repos = "org/absent", []string{"org/absent"}
	est, note = Fit(cfg, r, plan, nil)
	if est != nil || !strings.Contains(note, "memory fit of lane big not estimated: model org/absent is not on the NAS yet (looked at "+filepath.Join(nas, "models--org--absent", "refs", "v2")) {
		t.Errorf("%v %q", est, note)
	}
}

// recipe check's fit (CheckRecipes, behind CheckFiles and CheckSet alike)
// says why a lane is not estimated when its input will not read — here a
// --max-model-len vLLM refuses — and leaves a lane whose model is only
// not on the NAS yet to cutover --dry-run.
func TestCheckFitNotices(t *testing.T) {
	nas := t.TempDir()
	fittest.Snapshot(t, nas, "org/small", fittest.Config, 1e9)
	cfg := sparkFleet()
	cfg.HFCacheDir, cfg.RecipesDirs, cfg.Registries = nas, nil, nil
	dir := t.TempDir()
	var recipes []*config.Recipe
	for name, body := range map[string]string{
		"bad":    "model = \"org/small\"\ncommand = \"vllm serve {model} --max-model-len 1.5M\"\n",
		"absent": "model = \"org/absent\"\ncommand = \"vllm serve {model}\"\n",
		"good":   "model = \"org/small\"\ncommand = \"vllm serve {model} --max-model-len 25.6k\"\n",
	} {
		p := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(p, []byte("runtime = \"vllm\"\nimage = \"i\"\ncluster = \"solo\"\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
		recipes = append(recipes, mustRecipe(t, p))
	}
	errs, notices := CheckRecipes(cfg, recipes)
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	slices.Sort(notices)
	want := []string{
		filepath.Join(dir, "bad.toml") + ": memory fit of lane bad not estimated: command: --max-model-len 1.5M: \"1.5M\": decimals are not allowed with the binary unit M",
		"lane good fits in memory: ",
	}
	if len(notices) != len(want) {
		t.Fatalf("notices %q, want %d", notices, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(notices[i], w) {
			t.Errorf("notice %q, want it to start %q", notices[i], w)
		}
	}
	if !strings.Contains(notices[1], "25600 tokens (--max-model-len 25.6k)") {
		t.Errorf("good: %s", notices[1])
	}
}
