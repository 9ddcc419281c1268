package sim_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// engramCheckpoint writes a checkpoint with engram tables for layers 3 and
// 14 (1001 and 1003 rows) and returns its dir.
func engramCheckpoint(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	wm := map[string]string{}
	for i, layer := range []int{3, 14} {
		name := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]
		tn := "model.layers." + []string{"3", "14"}[i] + ".engram.table"
		ts := []safetensors.Tensor{{Name: tn, DType: "BF16", Shape: []int64{int64(1001 + 2*i), 16}}, {Name: "other" + name, DType: "F32", Shape: []int64{8, 8}}}
		hdr, laid, err := safetensors.Encode(ts, nil)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, laid[len(laid)-1].End)
		for k := range data {
			data[k] = byte(k*3 + layer)
		}
		if err := os.WriteFile(filepath.Join(src, name), append(hdr, data...), 0o644); err != nil {
			t.Fatal(err)
		}
		wm[tn] = name
		wm[ts[1].Name] = name
	}
	ix, _ := json.Marshal(map[string]any{"weight_map": wm})
	os.WriteFile(filepath.Join(src, "model.safetensors.index.json"), ix, 0o644)
	return src
}

// runRank runs rank `rank` of a tp-2 world as a worker (no rank 0) until
// it logs that its engram files were checked or it fails.
func runRank(t *testing.T, model, engram string, rank int, rows []int64) (string, error) {
	t.Helper()
	return runRankOf(t, model, engram, rank, 2, rows)
}

// runRankOf is runRank in a world of tp ranks.
func runRankOf(t *testing.T, model, engram string, rank, tp int, rows []int64) (string, error) {
	t.Helper()
	return runEngramCheck(t, sim.Config{ModelPath: model, NNodes: tp, TP: tp, NodeRank: rank, EngramDir: engram, EngramRows: rows})
}

// runEngramCheck runs engine-sim with cfg (its own dist address and log)
// until it logs that its engram files were checked or it fails; it returns
// the log.
func runEngramCheck(t *testing.T, cfg sim.Config) (string, error) {
	t.Helper()
	log := &syncbuf.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg.DistInitAddr, cfg.Log = distAddr(t), log
	errc := make(chan error, 1)
	go func() { errc <- sim.Run(ctx, cfg) }()
	for {
		select {
		case err := <-errc:
			return log.String(), err
		case <-time.After(20 * time.Millisecond):
			if strings.Contains(log.String(), "engram files checked") {
				cancel()
				return log.String(), <-errc
			}
		}
	}
}

// TestEngramStagedTreesAccepted stages real packed and sparse-copy trees
// with internal/engine/sparserows and has engine-sim check them.
func TestEngramStagedTreesAccepted(t *testing.T) {
	src := engramCheckpoint(t)
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{Shards: 1})
	for _, format := range []string{sparserows.FormatPacked, sparserows.FormatSparseCopy} {
		root := t.TempDir()
		dst := filepath.Join(root, "engram")
		spec := sparserows.Spec{Src: src, Dst: dst, Format: format, Tensors: []string{"model.layers.{L}.engram.table"}, Layers: []int{3, 14}, Rank: 1, TP: 2, Roots: []string{root}}
		if _, err := sparserows.Stage(context.Background(), spec, staging.Options{}); err != nil {
			t.Fatalf("%s: stage: %v", format, err)
		}
		if out, err := runRank(t, model, dst, 1, []int64{1001, 1003}); err != nil || !strings.Contains(out, "engram files checked") {
			t.Fatalf("%s tree of rank 1 refused: %v\n%s", format, err, out)
		}
		if _, err := runRank(t, model, dst, 1, []int64{1001, 999}); err == nil || !strings.Contains(err.Error(), "SPARK_ENGRAM_ROWS") && !strings.Contains(err.Error(), "owns") {
			t.Errorf("%s: wrong SPARK_ENGRAM_ROWS accepted: %v", format, err)
		}
		// Rank 0 has nothing staged in this dir.
		if _, err := runRankZeroCheck(t, model, dst); err == nil {
			t.Errorf("%s: rank 0 accepted rank 1's engram tree", format)
		}
		if format == sparserows.FormatSparseCopy {
			// A sparse copy whose header was lost is broken.
			p := filepath.Join(dst, "model-00002-of-00002.safetensors")
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(make([]byte, 64), 0)
			f.Close()
			if _, err := runRank(t, model, dst, 1, nil); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("sparse copy without a header: %v, want an error naming %s", err, p)
			}
		}
	}
}

// runRankZeroCheck loads as rank 0 of 2 (it waits for rank 1 after the
// load, so a clean load shows as the log line).
func runRankZeroCheck(t *testing.T, model, engram string) (string, error) {
	return runRank(t, model, engram, 0, nil)
}

// TestEngramReadsPackedRecords: engine-sim reads the packer's output with
// its own reader of FORMAT.md's layout, reads every record and compares
// rows with the checkpoint it loads; a flipped record byte, a header of
// another record size and a record size the runtime does not read are
// refused naming the file.
func TestEngramReadsPackedRecords(t *testing.T) {
	src := engramCheckpoint(t) // the model tree holds the engram tables
	root := t.TempDir()
	dst := filepath.Join(root, "engram")
	spec := sparserows.Spec{Src: src, Dst: dst, Format: sparserows.FormatPacked, Tensors: []string{"model.layers.{L}.engram.table"}, Layers: []int{3, 14}, Rank: 1, TP: 2, Roots: []string{root}, RecordBytes: 32}
	if _, err := sparserows.Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	run := func(recordBytes int64) (string, error) {
		t.Helper()
		return runEngramCheck(t, sim.Config{ModelPath: src, NNodes: 2, TP: 2, NodeRank: 1, EngramDir: dst, EngramRows: []int64{1001, 1003}, EngramRecordBytes: recordBytes})
	}
	out, err := run(32)
	if err != nil || !strings.Contains(out, "engram-l3-r1of2.bin: 500 records of 32 bytes read, 64 compared with rows of model.layers.3.engram.table") ||
		!strings.Contains(out, "engram-l14-r1of2.bin: 501 records of 32 bytes read, 64 compared") {
		t.Fatalf("packed files refused or not read: %v\n%s", err, out)
	}
	if _, err := run(264); err == nil || !strings.Contains(err.Error(), "32-byte records, this runtime reads 264-byte records") {
		t.Fatalf("a runtime reading 264-byte records accepted 32-byte ones: %v", err)
	}
	// A flipped byte in the last record (the header stays valid).
	p := filepath.Join(dst, "engram-l14-r1of2.bin")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(32); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "record 500") || !strings.Contains(err.Error(), "row 1002") {
		t.Fatalf("a corrupt record was accepted or not named: %v", err)
	}
	// A header byte changed: the CRC catches it.
	b[len(b)-1] ^= 0xff
	b[40]++ // record_size
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(0); err == nil || !strings.Contains(err.Error(), "header CRC-32") {
		t.Fatalf("a header with a changed record size was accepted: %v", err)
	}
}
