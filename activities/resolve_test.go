package activities

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
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
		r, err := a.ResolveLane(ctx, ResolveLaneInput{Lane: c.lane, Cluster: c.cluster})
		if err != nil {
			t.Fatalf("%s on %q: %v", c.lane, c.cluster, err)
		}
		if r.Plan.Cluster != c.want || r.Recipe.Cluster != c.want || r.Plan.Nodes[0].Node != c.head {
			t.Errorf("%s on %q: plan on %s (head %s), recipe %s; want %s (head %s)", c.lane, c.cluster, r.Plan.Cluster, r.Plan.Nodes[0].Node, r.Recipe.Cluster, c.want, c.head)
		}
	}
}
