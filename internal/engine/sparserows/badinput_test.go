package sparserows

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

func TestBadInputFailsClearlyAndLeavesDstEmpty(t *testing.T) {
	const table = "model.layers.3.engram.table"
	const shard = "model-00001-of-00001.safetensors"
	good := func(t *testing.T, dir string) {
		writeCheckpoint(t, dir, []shardSpec{{shard, []safetensors.Tensor{tn("x", "F32", 8, 8), tn(table, "BF16", 64, 16)}}}, true)
	}
	cases := []struct {
		name    string
		make    func(t *testing.T, dir string)
		spec    func(s *Spec)
		typ     string
		mention []string
	}{
		{"truncated shard", func(t *testing.T, dir string) {
			good(t, dir)
			p := filepath.Join(dir, shard)
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-100)
		}, nil, SourceCorrupt, []string{shard, table, "truncated"}},
		{"header length beyond file", func(t *testing.T, dir string) {
			good(t, dir)
			f, _ := os.OpenFile(filepath.Join(dir, shard), os.O_WRONLY, 0)
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], 1<<40)
			f.WriteAt(b[:], 0)
			f.Close()
		}, nil, SourceCorrupt, []string{shard, table, "header length"}},
		{"header not JSON", func(t *testing.T, dir string) {
			good(t, dir)
			f, _ := os.OpenFile(filepath.Join(dir, shard), os.O_WRONLY, 0)
			f.WriteAt([]byte("<html>"), 8)
			f.Close()
		}, nil, SourceCorrupt, []string{shard, table, "not JSON"}},
		{"tensor missing from every shard", good, func(s *Spec) { s.Layers = []int{3, 4} },
			fault.SourceMissing, []string{"model.layers.4.engram.table", IndexName}},
		{"shape with no row dimension", func(t *testing.T, dir string) {
			writeCheckpoint(t, dir, []shardSpec{{shard, []safetensors.Tensor{tn(table, "F32")}}}, true)
		}, nil, fault.InvalidSpec, []string{shard, table, "no row dimension"}},
		{"index naming a missing shard", func(t *testing.T, dir string) {
			good(t, dir)
			b, _ := json.Marshal(map[string]any{"weight_map": map[string]string{table: "model-00002-of-00002.safetensors"}})
			os.WriteFile(filepath.Join(dir, IndexName), b, 0o644)
		}, nil, fault.SourceMissing, []string{"model-00002-of-00002.safetensors", table, IndexName}},
		{"tp larger than rows", func(t *testing.T, dir string) {
			writeCheckpoint(t, dir, []shardSpec{{shard, []safetensors.Tensor{tn(table, "F32", 3, 4)}}}, true)
		}, func(s *Spec) { s.TP, s.Rank = 4, 0 }, fault.InvalidSpec, []string{shard, table, "fewer than tp=4"}},
		{"dst outside roots", good, func(s *Spec) { s.Roots = []string{"/nonexistent-root"} },
			fault.InvalidSpec, []string{"outside the node's roots"}},
	}
	for _, c := range cases {
		for _, format := range []string{FormatPacked, FormatSparseCopy} {
			t.Run(c.name+"/"+format, func(t *testing.T) {
				src := t.TempDir()
				c.make(t, src)
				spec := baseSpec(t, src, format, 1, 2)
				spec.Layers = []int{3}
				if err := os.MkdirAll(spec.Dst, 0o755); err != nil {
					t.Fatal(err)
				}
				if c.spec != nil {
					c.spec(&spec)
				}
				_, err := Stage(context.Background(), spec, staging.Options{})
				if err == nil {
					t.Fatal("Stage accepted bad input")
				}
				t.Logf("error: %v", err)
				if typ, _ := fault.TypeOf(err); typ != c.typ {
					t.Fatalf("error type %q, want %q: %v", typ, c.typ, err)
				}
				for _, m := range c.mention {
					if !strings.Contains(err.Error(), m) {
						t.Fatalf("error does not mention %q: %v", m, err)
					}
				}
				ents, _ := os.ReadDir(spec.Dst)
				if len(ents) != 0 {
					t.Fatalf("dst not empty after failed stage: %v", ents)
				}
				if _, verr := Verify(context.Background(), spec, false); verr == nil {
					t.Fatal("Verify accepted bad input")
				}
				if _, perr := Plan(spec); perr == nil {
					t.Fatal("Plan accepted bad input")
				}
			})
		}
	}
}

func TestPlanSplitTableAndStableCheckpointID(t *testing.T) {
	src := t.TempDir()
	standardCheckpoint(t, src)
	spec := baseSpec(t, src, FormatPacked, 1, 2)
	pi, err := Plan(spec)
	if err != nil {
		t.Fatal(err)
	}
	lp := pi.Layers[1]
	if lp.Tensor != "model.layers.14.engram.table" || lp.RowsTotal != 1006 || lp.RecordSize != 7 || len(lp.Parts) != 2 || lp.First != 503 || lp.Count != 503 {
		t.Fatalf("layer 14 plan %+v", lp)
	}
	if p := lp.Parts[0]; p.RankFirst != 503 || p.RankCount != 97 || p.ByteEnd-p.ByteBegin != 97*7 {
		t.Fatalf("part0 %+v: want rows 503..599", p)
	}
	if p := lp.Parts[1]; p.FirstRow != 600 || p.RankFirst != 600 || p.RankCount != 406 {
		t.Fatalf("part1 %+v: want rows 600..1005", p)
	}
	if pi.Layers[0].RecordSize != 48 || pi.Layers[0].DType != "BF16" {
		t.Fatalf("layer 3 plan %+v", pi.Layers[0])
	}
	again, _ := Plan(spec)
	if again.Checkpoint != pi.Checkpoint || len(pi.Checkpoint) != 24 {
		t.Fatalf("checkpoint id %q then %q: want a stable 24-char id", pi.Checkpoint, again.Checkpoint)
	}
	other := t.TempDir()
	writeCheckpoint(t, other, []shardSpec{
		{"model-00001-of-00002.safetensors", []safetensors.Tensor{tn("model.layers.3.engram.table", "BF16", 1006, 24), tn("model.layers.14.engram.table.part0", "U8", 600, 7)}},
		{"model-00002-of-00002.safetensors", []safetensors.Tensor{tn("model.layers.14.engram.table.part1", "U8", 406, 7)}},
	}, true)
	spec.Src = other
	pj, err := Plan(spec)
	if err != nil {
		t.Fatal(err)
	}
	if pj.Checkpoint == pi.Checkpoint {
		t.Fatal("different checkpoints share an id")
	}
}

func TestNotEnoughSpaceFailsBeforeWriting(t *testing.T) {
	src := t.TempDir()
	standardCheckpoint(t, src)
	for _, format := range []string{FormatPacked, FormatSparseCopy} {
		spec := baseSpec(t, src, format, 0, 2)
		spec.MinFree = 1 << 60
		_, err := Stage(context.Background(), spec, staging.Options{})
		if typ, _ := fault.TypeOf(err); typ != fault.NoSpace || !strings.Contains(err.Error(), spec.Dst) {
			t.Fatalf("%s: %v (type %q), want a NoSpace error naming dst", format, err, typ)
		}
		if ents, _ := os.ReadDir(spec.Dst); len(ents) != 0 {
			t.Fatalf("%s: files left in dst after NoSpace: %v", format, ents)
		}
	}
}

// Issue 14 item 7: min_free counts only what a pass must write. Once the
// rank's share is staged, a verify-only pass passes however little space
// is free (min_free far beyond the disk here); a pass that must rewrite a
// block is refused naming what it must write.
func TestMinFreeVerifyOnlyPassesOnAFullDisk(t *testing.T) {
	src := t.TempDir()
	standardCheckpoint(t, src)
	for _, format := range []string{FormatPacked, FormatSparseCopy} {
		spec := baseSpec(t, src, format, 1, 2)
		if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
			t.Fatal(err)
		}
		spec.MinFree = 1 << 60
		res, err := Stage(context.Background(), spec, staging.Options{})
		if err != nil {
			t.Fatalf("%s: verify-only pass with min_free beyond the free space: %v", format, err)
		}
		if res.CopiedBytes != 0 || res.CopiedFiles != 0 {
			t.Fatalf("%s: verify-only pass %+v copied something", format, res)
		}
		// Lose the first output: now bytes must be written, and they do not fit.
		ents, _ := os.ReadDir(spec.Dst)
		var victim string
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".bin") || strings.HasSuffix(e.Name(), ".safetensors") {
				victim = e.Name()
				break
			}
		}
		if victim == "" {
			t.Fatalf("%s: no output in %s", format, spec.Dst)
		}
		if err := os.Remove(filepath.Join(spec.Dst, victim)); err != nil {
			t.Fatal(err)
		}
		_, err = Stage(context.Background(), spec, staging.Options{})
		if typ, _ := fault.TypeOf(err); typ != fault.NoSpace || !strings.Contains(err.Error(), "to write") || !strings.Contains(err.Error(), spec.Dst) {
			t.Fatalf("%s: after losing %s: %v, want NoSpace naming the bytes to write", format, victim, err)
		}
	}
}
