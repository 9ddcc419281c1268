package lane

import (
	"path/filepath"
	"strings"
	"testing"

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
