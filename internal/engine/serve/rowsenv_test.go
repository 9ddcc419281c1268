package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// rowsCheckpoint writes a checkpoint whose engram tables of layers 0 and 1
// have different row counts (as aiden16's 384,006,168 and 384,016,682, at
// a small scale: 3,006 and 3,017 rows).
func rowsCheckpoint(t *testing.T) (string, []int64) {
	t.Helper()
	src := t.TempDir()
	rows := []int64{3006, 3017}
	wm := map[string]string{}
	for l, n := range rows {
		shard := fmt.Sprintf("model-%05d-of-00002.safetensors", l+1)
		ts := []safetensors.Tensor{{Name: fmt.Sprintf("model.layers.%d.engram.embed.weight", l), DType: "BF16", Shape: []int64{n, 8}}}
		hdr, laid, err := safetensors.Encode(ts, nil)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, laid[0].End)
		for i := range data {
			data[i] = byte(i*5 + l)
		}
		if err := os.WriteFile(filepath.Join(src, shard), append(hdr, data...), 0o644); err != nil {
			t.Fatal(err)
		}
		wm[ts[0].Name] = shard
	}
	ix, _ := json.Marshal(map[string]any{"weight_map": wm})
	if err := os.WriteFile(filepath.Join(src, sparserows.IndexName), ix, 0o644); err != nil {
		t.Fatal(err)
	}
	return src, rows
}

// Item 6 of issue 14: SPARK_ENGRAM_ROWS is filled per layer from the staged
// manifest at serve time (two layers, different totals), and the runtime
// stand-in, given that value, accepts the staged tree; a manifest of
// another rank, a recipe rows that disagrees, and an unstaged dir are
// refused naming the node, variable and path.
func TestRowsEnvFromStagedManifest(t *testing.T) {
	src, rows := rowsCheckpoint(t)
	root := t.TempDir()
	dst := filepath.Join(root, "engram")
	const rank, tp = 1, 4
	spec := sparserows.Spec{Src: src, Dst: dst, Format: sparserows.FormatSparseCopy, Tensors: []string{"model.layers.{L}.engram.embed.weight"}, Layers: []int{0, 1}, Rank: rank, TP: tp, Roots: []string{root}}
	if _, err := sparserows.Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	rf := contract.RowsFrom{Env: "SPARK_ENGRAM_ROWS", Dst: "/nvme/aiden16/engram", Format: sparserows.FormatSparseCopy, Layers: []int{0, 1}, Rank: rank, TP: tp}
	v, err := serve.RowsEnv("dgx2", dst, rf)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d,%d", rows[0], rows[1]); v != want {
		t.Fatalf("SPARK_ENGRAM_ROWS = %q, want %q (each layer's total)", v, want)
	}

	// The runtime stand-in cross-checks the value against the staged tree.
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{Shards: 1})
	env := map[string]string{"SPARK_ENGRAM_DIR": dst, "SPARK_ENGRAM_ROWS": v}
	cfg, err := sim.ParseArgs([]string{model, "--tp", fmt.Sprint(tp), "--nnodes", fmt.Sprint(tp), "--node-rank", fmt.Sprint(rank), "--dist-init-addr", fmt.Sprintf("127.0.0.1:%d", simtest.FreePort(t))}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	log := &syncbuf.Buffer{}
	cfg.Log = log
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- sim.Run(ctx, cfg) }()
	for !strings.Contains(log.String(), "engram files checked") {
		select {
		case err := <-errc:
			t.Fatalf("engine-sim refused the staged tree with SPARK_ENGRAM_ROWS=%s: %v\n%s", v, err, log.String())
		case <-ctx.Done():
			t.Fatalf("engine-sim never checked its engram files:\n%s", log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	<-errc

	wantErr := func(err error, typ string, parts ...string) {
		t.Helper()
		if got, _ := fault.TypeOf(err); got != typ {
			t.Fatalf("%v: want %s", err, typ)
		}
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("%q does not name %q", err, p)
			}
		}
	}
	bad := rf
	bad.Rows = rows[0] // the recipe's one total is right for layer 0 only
	_, err = serve.RowsEnv("dgx2", dst, bad)
	wantErr(err, serve.RowsMismatch, "dgx2", "SPARK_ENGRAM_ROWS", "layer 1", "3017 rows staged", "3006")
	bad = rf
	bad.Rank = 2
	_, err = serve.RowsEnv("dgx2", dst, bad)
	wantErr(err, serve.RowsMismatch, "rank 1 of tp 4", "rank 2 of tp 4", "re-stage")
	_, err = serve.RowsEnv("dgx3", filepath.Join(root, "never-staged"), rf)
	wantErr(err, fault.SourceMissing, "dgx3", "never-staged", "stage the lane first")
	// A tree tiled for another table size (hand-edited manifest).
	man := filepath.Join(dst, sparserows.LocalManifestName)
	m, err := sparserows.ReadLocalManifest(man)
	if err != nil {
		t.Fatal(err)
	}
	m.Tensors[1].First++
	b, _ := json.Marshal(m)
	if err := os.WriteFile(man, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = serve.RowsEnv("dgx2", dst, rf)
	wantErr(err, serve.RowsMismatch, "layer 1", "owns", "re-stage")
}
