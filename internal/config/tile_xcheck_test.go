package config_test

import (
	"strconv"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/sparserows"
)

// The rendered SPARK_ENGRAM_ROWS must be the row count the staging engine
// packs for the rank (sparserows.Tile), or the runtime's cross-check fails.
func TestRowsEnvMatchesSparserowsTile(t *testing.T) {
	cfg := &config.Config{File: "fleet.toml",
		Nodes:    []config.Node{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		Clusters: []config.Cluster{{Name: "three", Nodes: []string{"a", "b", "c"}}},
	}
	for _, rows := range []int64{3, 10, 1000003} {
		r := &config.Recipe{File: "lane.toml", Name: "rows", Cluster: "three", Runtime: "sim", Image: "i", Command: "serve",
			Staging: []config.Staging{{Kind: "sparse-rows", Src: "/nas/x", Dst: "/nvme/x", Format: "packed",
				Tensors: []string{"t"}, Layers: []int{0}, Mount: "/engram", EnvVar: "SPARK_ENGRAM_DIR",
				RowsEnv: "SPARK_ENGRAM_ROWS", Rows: rows}}}
		plan, err := config.Render(cfg, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		for rank, np := range plan.Nodes {
			_, count, err := sparserows.Tile(rows, 3, rank)
			if err != nil {
				t.Fatal(err)
			}
			if np.Env["SPARK_ENGRAM_ROWS"] != strconv.FormatInt(count, 10) || np.Env["SPARK_ENGRAM_DIR"] != "/engram" {
				t.Errorf("rows %d rank %d: env %v, Tile says %d", rows, rank, np.Env, count)
			}
		}
		if len(plan.Warnings) != 0 {
			t.Errorf("rows given, yet warnings: %v", plan.Warnings)
		}
	}
}
