package lane_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/lane"
)

// The rendered SPARK_ENGRAM_ROWS is the table's total (the runtime tiles it
// itself, as engine-sim does), and every rank's tile of it is what the
// staging engine packs (sparserows.Tile); the serve step re-checks it on
// the node (RowsFrom).
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
		plan, err := lane.Render(cfg, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		for rank, np := range plan.Nodes {
			if _, _, err := sparserows.Tile(rows, 3, rank); err != nil {
				t.Fatal(err)
			}
			if np.Env["SPARK_ENGRAM_ROWS"] != strconv.FormatInt(rows, 10) || np.Env["SPARK_ENGRAM_DIR"] != "/engram" {
				t.Errorf("rows %d rank %d: env %v, want the total %d", rows, rank, np.Env, rows)
			}
			want := contract.RowsFrom{Env: "SPARK_ENGRAM_ROWS", Dst: "/nvme/x", Format: "packed", Layers: []int{0}, Rows: rows, Rank: rank, TP: 3}
			if len(np.RowsFrom) != 1 || fmt.Sprint(np.RowsFrom[0]) != fmt.Sprint(want) {
				t.Errorf("rows %d rank %d: rows_from %+v, want %+v", rows, rank, np.RowsFrom, want)
			}
		}
		if len(plan.Warnings) != 0 {
			t.Errorf("rows given, yet warnings: %v", plan.Warnings)
		}
	}
}
