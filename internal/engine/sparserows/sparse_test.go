package sparserows

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// checkSparse checks every output shard: same size as the source, header
// byte-equal, the rank's rows byte-equal, every other data byte zero.
func checkSparse(t *testing.T, spec Spec) {
	t.Helper()
	pi, err := Plan(spec)
	if err != nil {
		t.Fatal(err)
	}
	ranges := map[string][][2]int64{}
	for _, lp := range pi.Layers {
		for _, p := range lp.Parts {
			if p.RankCount > 0 {
				ranges[p.Shard] = append(ranges[p.Shard], [2]int64{p.ByteBegin, p.ByteEnd})
			}
		}
	}
	for _, s := range pi.Shards {
		want := readFile(t, filepath.Join(spec.Src, s))
		got := readFile(t, filepath.Join(spec.Dst, s))
		if len(got) != len(want) {
			t.Fatalf("%s: %d bytes, source has %d", s, len(got), len(want))
		}
		h, err := safetensors.ReadHeader(filepath.Join(spec.Src, s))
		if err != nil {
			t.Fatal(err)
		}
		owned := make([]bool, len(want))
		for i := int64(0); i < h.DataStart; i++ {
			owned[i] = true
		}
		for _, r := range ranges[s] {
			for i := r[0]; i < r[1]; i++ {
				owned[i] = true
			}
		}
		for i := range got {
			if owned[i] && got[i] != want[i] {
				t.Fatalf("%s: byte %d is %#x, source has %#x", s, i, got[i], want[i])
			}
			if !owned[i] && got[i] != 0 {
				t.Fatalf("%s: byte %d outside the rank's rows is %#x, want a hole", s, i, got[i])
			}
		}
	}
}

func TestSparseCopyHolesManifestIndexAndAllocatedBlocks(t *testing.T) {
	src := t.TempDir()
	// 4 MiB table beside 4 MiB of other weights; rank 2 of 4 owns 1 MiB.
	writeCheckpoint(t, src, []shardSpec{
		{"model-00001-of-00002.safetensors", []safetensors.Tensor{tn("model.layers.5.engram.table", "F32", 4096, 256), tn("other", "F32", 1024, 1024)}},
		{"model-00002-of-00002.safetensors", []safetensors.Tensor{tn("more", "BF16", 1024, 1024)}},
	}, true)
	spec := baseSpec(t, src, FormatSparseCopy, 2, 4)
	spec.Layers, spec.BlockRows = []int{5}, 0
	res, err := Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pi, _ := Plan(spec)
	if res.CopiedBytes != pi.Bytes || len(pi.Shards) != 1 {
		t.Fatalf("sparse pass %+v, plan %+v", res, pi)
	}
	checkSparse(t, spec)
	if _, err := os.Stat(filepath.Join(spec.Dst, "model-00002-of-00002.safetensors")); err == nil {
		t.Fatal("shard without rows of this rank was copied")
	}
	p := filepath.Join(spec.Dst, "model-00001-of-00002.safetensors")
	st, _ := os.Stat(p)
	alloc := st.Sys().(*syscall.Stat_t).Blocks * 512
	share := pi.Bytes
	if alloc < share || alloc > share+256<<10 {
		t.Fatalf("%s: %d bytes allocated of %d, want about the rank's share %d (holes elsewhere)", p, alloc, st.Size(), share)
	}
	m, err := ReadLocalManifest(filepath.Join(spec.Dst, LocalManifestName))
	if err != nil {
		t.Fatal(err)
	}
	lp := pi.Layers[0]
	if len(m.Tensors) != 1 || m.Tensors[0].First != 2048 || m.Tensors[0].Count != 1024 || len(m.Tensors[0].Parts) != 1 ||
		m.Tensors[0].Parts[0].Bytes != [2]int64{lp.Parts[0].DataOffset + 2048*1024, lp.Parts[0].DataOffset + 3072*1024} || m.Tensors[0].Parts[0].Rows != [2]int64{2048, 3072} {
		t.Fatalf("manifest %+v does not match rank 2's rows [2048,3072)", m)
	}
	if !bytes.Equal(readFile(t, filepath.Join(spec.Dst, IndexName)), readFile(t, filepath.Join(src, IndexName))) {
		t.Fatal("index copy differs from the source index")
	}
	res, err = Stage(context.Background(), spec, staging.Options{})
	if err != nil || res.CopiedBytes != 0 || res.CopiedFiles != 0 {
		t.Fatalf("second pass %+v %v: want nothing written", res, err)
	}
	if vr, err := Verify(context.Background(), spec, true); err != nil || !vr.Clean() || vr.OK != 1+2 {
		t.Fatalf("verify %+v %v", vr, err)
	}
	// Without its ledger the tree is adopted after a sampled comparison.
	os.Remove(filepath.Join(spec.Dst, LedgerName))
	res, err = Stage(context.Background(), spec, staging.Options{})
	if err != nil || res.CopiedBytes != 0 || res.AdoptedFiles != 1 {
		t.Fatalf("adoption pass %+v %v: want the shard adopted, nothing copied", res, err)
	}
}

func TestSparseCopySplitTableAcrossShardsAndHeaderRepair(t *testing.T) {
	src := t.TempDir()
	standardCheckpoint(t, src)
	spec := baseSpec(t, src, FormatSparseCopy, 1, 2) // layer 14 rank 1: rows 503..1005, in both parts
	spec.BlockRows = 50
	res, err := Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pi, _ := Plan(spec)
	if len(pi.Shards) != 2 || res.CopiedBytes != pi.Bytes {
		t.Fatalf("plan shards %v, pass %+v", pi.Shards, res)
	}
	checkSparse(t, spec)
	// Zero shard 2's header and cut shard 1 short: only headers and sizes
	// are repaired, no row bytes written.
	h2, _ := safetensors.ReadHeader(filepath.Join(src, pi.Shards[1]))
	f, _ := os.OpenFile(filepath.Join(spec.Dst, pi.Shards[1]), os.O_WRONLY, 0)
	f.WriteAt(make([]byte, h2.DataStart), 0)
	f.Close()
	f, _ = os.OpenFile(filepath.Join(spec.Dst, pi.Shards[0]), os.O_WRONLY, 0)
	f.WriteAt([]byte("{garbage"), 8)
	f.Close()
	vr, err := Verify(context.Background(), spec, false)
	if err != nil || len(vr.Bad) != 2 {
		t.Fatalf("verify after header damage %+v %v: want both shards bad", vr, err)
	}
	res, err = Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CopiedBytes != 0 || res.Rows != 0 || res.CopiedFiles != 2 {
		t.Fatalf("header repair pass %+v: want 2 files repaired and 0 row bytes", res)
	}
	checkSparse(t, spec)
	if vr, err := Verify(context.Background(), spec, true); err != nil || !vr.Clean() {
		t.Fatalf("verify after repair %+v %v", vr, err)
	}
	// A corrupted row inside the copy: only its block is rewritten.
	lp := pi.Layers[1]
	p := lp.Parts[1] // part1, shard 2, rows 600..1005
	f, _ = os.OpenFile(filepath.Join(spec.Dst, p.Shard), os.O_WRONLY, 0)
	f.WriteAt([]byte{1, 2, 3}, p.DataOffset+(700-p.FirstRow)*lp.RecordSize)
	f.Close()
	res, err = Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Blocks of layer 14 for rank 1 start at 503: row 700 is in 653..702.
	if res.Rows != 50 || res.CopiedBytes != 50*lp.RecordSize {
		t.Fatalf("pass after one bad row %+v: want one block of 50 rows", res)
	}
	checkSparse(t, spec)
}

// TestSymlinkInDstIsReplacedNotWrittenThrough: an output name that is a
// symlink (to the source on the NAS, say) is replaced by a real file and
// its target left untouched.
func TestSymlinkInDstIsReplacedNotWrittenThrough(t *testing.T) {
	src := t.TempDir()
	standardCheckpoint(t, src)
	for _, format := range []string{FormatPacked, FormatSparseCopy} {
		spec := baseSpec(t, src, format, 0, 2)
		spec.Layers = []int{3}
		pi, _ := Plan(spec)
		name := pi.Shards[0]
		if format == FormatPacked {
			name = pi.Layers[0].Output
		}
		victim := filepath.Join(t.TempDir(), "victim")
		orig := bytes.Repeat([]byte{0x5A}, int(pi.Bytes)+PackedHeaderSize+4096)
		os.WriteFile(victim, orig, 0o644)
		os.MkdirAll(spec.Dst, 0o755)
		if err := os.Symlink(victim, filepath.Join(spec.Dst, name)); err != nil {
			t.Fatal(err)
		}
		if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if !bytes.Equal(readFile(t, victim), orig) {
			t.Fatalf("%s: staging wrote through a symlink in dst", format)
		}
		if fi, err := os.Lstat(filepath.Join(spec.Dst, name)); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s: %s is still not a regular file", format, name)
		}
		if vr, err := Verify(context.Background(), spec, true); err != nil || !vr.Clean() {
			t.Fatalf("%s: verify %+v %v", format, vr, err)
		}
	}
}
