package activities

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/fittest"
)

// Rollback resolves a previous lane from recipes_dir and recipes_dirs: a
// sparkrun recipe (no cluster of its own) is rendered on the cluster the
// cutover ran on, not on default_cluster; a recipe's own cluster wins.
func TestResolveLaneOnTheCutoverCluster(t *testing.T) {
	own := t.TempDir()
	if err := os.WriteFile(filepath.Join(own, "mine.toml"), []byte("runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve\"\ncluster = \"solo\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{File: "sparklane.toml", RecipesDir: own, RecipesDirs: []string{"../internal/config/testdata/registry"},
		DefaultCluster: "quad", HFCacheDir: "/mnt/nas/hub", SharedRoots: []string{"/mnt/nas"}}
	for _, n := range []string{"dgx1", "dgx2", "dgx3", "dgx4"} {
		cfg.Nodes = append(cfg.Nodes, config.Node{Name: n, Roots: []string{"/mnt/nvme"}})
	}
	cfg.Clusters = []config.Cluster{{Name: "solo", Nodes: []string{"dgx1"}}, {Name: "pair", Nodes: []string{"dgx3", "dgx4"}}, {Name: "quad", Nodes: []string{"dgx1", "dgx2", "dgx3", "dgx4"}}}
	a := &ControlActivities{Config: cfg, Log: zap.NewNop()}
	ctx := context.Background()
	for _, c := range []struct{ lane, cluster, want, head string }{
		{"minimax-m2.7-awq4-vllm", "pair", "pair", "dgx3"},
		{"minimax-m2.7-awq4-vllm", "", "quad", "dgx1"},
		{"mine", "pair", "solo", "dgx1"},
	} {
		r, err := a.ResolveLane(ctx, contract.ResolveLaneInput{Lane: c.lane, Cluster: c.cluster})
		if err != nil {
			t.Fatalf("%s on %q: %v", c.lane, c.cluster, err)
		}
		if r.Plan.Cluster != c.want || r.Recipe.Cluster != c.want || r.Plan.Nodes[0].Node != c.head {
			t.Errorf("%s on %q: plan on %s (head %s), recipe %s; want %s (head %s)", c.lane, c.cluster, r.Plan.Cluster, r.Plan.Nodes[0].Node, r.Recipe.Cluster, c.want, c.head)
		}
	}
}

// A lane resolved on the control side (a rollback's previous lane, a
// verify schedule's) that the estimate says cannot fit is resolved all
// the same, with the arithmetic in the result; one that fits has none.
func TestResolveLaneReportsTheMemoryFit(t *testing.T) {
	dir := t.TempDir()
	nas := filepath.Join(dir, "nas")
	fittest.Snapshot(t, nas, "org/big", fittest.Config, 50e9, 50e9)
	fittest.Snapshot(t, nas, "org/small", fittest.Config, 1e9)
	for _, m := range []string{"big", "small"} {
		body := "runtime = \"vllm\"\nimage = \"i\"\nmodel = \"org/" + m + "\"\ncluster = \"solo\"\ncommand = \"vllm serve {model} --max-model-len 8192\"\n"
		if err := os.WriteFile(filepath.Join(dir, m+".toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &config.Config{File: "sparklane.toml", RecipesDir: dir, StateDir: filepath.Join(dir, "state"), HFCacheDir: nas,
		Nodes: []config.Node{{Name: "dgx1", Roots: []string{"/mnt/nvme"}}}, Clusters: []config.Cluster{{Name: "solo", Nodes: []string{"dgx1"}}}}
	a := &ControlActivities{Config: cfg, Log: zap.NewNop()}
	big, err := a.ResolveLane(context.Background(), contract.ResolveLaneInput{Lane: "big"})
	if err != nil || !strings.Contains(big.MemoryFit, "node dgx1: need 200.0 GB + 2.0 GB = 202.0 GB > 0.9") {
		t.Errorf("big: %v, memory fit %q", err, big.MemoryFit)
	}
	small, err := a.ResolveLane(context.Background(), contract.ResolveLaneInput{Lane: "small"})
	if err != nil || small.MemoryFit != "" {
		t.Errorf("small: %v, memory fit %q", err, small.MemoryFit)
	}
}
