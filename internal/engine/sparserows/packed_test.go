package sparserows

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// checkPacked reads every packed file of spec and compares each record with
// the source row byte for byte.
func checkPacked(t *testing.T, fx *fixture, spec Spec) {
	t.Helper()
	pi, err := Plan(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, lp := range pi.Layers {
		p := filepath.Join(spec.Dst, PackedFileName(lp.Layer, spec.Rank, spec.TP))
		h, err := ReadPackedHeader(p)
		if err != nil {
			t.Fatal(err)
		}
		if h.Layer != lp.Layer || h.Rank != spec.Rank || h.TP != spec.TP || h.FirstRow != lp.First || h.RowCount != lp.Count || h.Tensor != lp.Tensor || h.Checkpoint != pi.Checkpoint {
			t.Fatalf("%s: header %+v does not match plan %+v", p, h, lp)
		}
		body := readFile(t, p)[PackedHeaderSize:]
		src := fx.table(lp.Tensor)
		rb := h.RecordSize
		if int64(len(src)) != lp.RowsTotal*rb {
			t.Fatalf("table %s: %d source bytes for %d rows of %d", lp.Tensor, len(src), lp.RowsTotal, rb)
		}
		for k := int64(0); k < h.RowCount; k++ {
			rec := body[k*rb : (k+1)*rb]
			row := src[(h.FirstRow+k)*rb : (h.FirstRow+k+1)*rb]
			if !bytes.Equal(rec, row) {
				t.Fatalf("%s: record %d differs from source row %d", p, k, h.FirstRow+k)
			}
		}
	}
}

func TestPackedRoundTripEveryRankAndSecondPassWritesNothing(t *testing.T) {
	src := t.TempDir()
	fx := standardCheckpoint(t, src)
	for _, tp := range []int{1, 3, 4} {
		for rank := 0; rank < tp; rank++ {
			spec := baseSpec(t, src, FormatPacked, rank, tp)
			res, err := Stage(context.Background(), spec, staging.Options{})
			if err != nil {
				t.Fatalf("tp=%d rank=%d: %v", tp, rank, err)
			}
			pi, _ := Plan(spec)
			if res.CopiedBytes != pi.Bytes || res.Rows != pi.Rows || res.CopiedFiles != 2 {
				t.Fatalf("tp=%d rank=%d: first pass %+v, plan %d rows %d bytes", tp, rank, res, pi.Rows, pi.Bytes)
			}
			checkPacked(t, fx, spec)
			ledgerBefore := readFile(t, filepath.Join(spec.Dst, LedgerName))
			res, err = Stage(context.Background(), spec, staging.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.CopiedBytes != 0 || res.CopiedFiles != 0 || res.VerifiedFiles != 2 {
				t.Fatalf("tp=%d rank=%d: second pass wrote: %+v", tp, rank, res)
			}
			if !bytes.Equal(readFile(t, filepath.Join(spec.Dst, LedgerName)), ledgerBefore) {
				t.Fatalf("tp=%d rank=%d: second pass rewrote the ledger", tp, rank)
			}
			vr, err := Verify(context.Background(), spec, true)
			if err != nil || !vr.Clean() {
				t.Fatalf("tp=%d rank=%d: verify %+v %v", tp, rank, vr, err)
			}
			l, err := ledger.Load(filepath.Join(spec.Dst, LedgerName), LedgerKind)
			if err != nil {
				t.Fatal(err)
			}
			var blocks int64
			for _, lp := range pi.Layers {
				blocks += lp.Blocks
			}
			if l.Kind != LedgerKind || int64(len(l.Entries)) != blocks {
				t.Fatalf("ledger kind %q with %d entries, want %d blocks", l.Kind, len(l.Entries), blocks)
			}
			ents, _ := os.ReadDir(spec.Dst)
			for _, e := range ents {
				if filepath.Ext(e.Name()) == ".partial" {
					t.Fatalf("temp file %s left in dst", e.Name())
				}
			}
		}
	}
}

func TestPackedBothCopyPathsProduceTheSameFile(t *testing.T) {
	src := t.TempDir()
	fx := standardCheckpoint(t, src)
	var files [][]byte
	for _, mode := range []string{CopyFileRange, CopyReadWrite} {
		spec := baseSpec(t, src, FormatPacked, 1, 4)
		spec.CopyMode = mode
		if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		checkPacked(t, fx, spec)
		files = append(files, readFile(t, filepath.Join(spec.Dst, PackedFileName(14, 1, 4))))
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("copy_file_range and pread/pwrite produced different files")
	}
}

func TestPackedCorruptRecordRewritesOnlyItsBlock(t *testing.T) {
	src := t.TempDir()
	fx := standardCheckpoint(t, src)
	spec := baseSpec(t, src, FormatPacked, 2, 4)
	spec.BlockRows = 16
	if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	pi, _ := Plan(spec)
	lp := pi.Layers[0]
	p := filepath.Join(spec.Dst, lp.Output)
	// Corrupt record 40: block 2 (rows first+32..first+47).
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("XXXX"), PackedHeaderSize+40*lp.RecordSize+3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	vr, err := Verify(context.Background(), spec, false)
	if err != nil {
		t.Fatal(err)
	}
	wantKey := "l3/r2/rows-" + itoa(int(lp.First+32)) + "-" + itoa(int(lp.First+47))
	if len(vr.Bad) != 1 || vr.Bad[0] != wantKey {
		t.Fatalf("verify found %v, want [%s]", vr.Bad, wantKey)
	}
	res, err := Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 16 || res.CopiedBytes != 16*lp.RecordSize || res.CopiedFiles != 1 {
		t.Fatalf("repair pass %+v: want exactly one block of 16 rows rewritten", res)
	}
	checkPacked(t, fx, spec)
}

func TestPackedAdoptsTreeWithoutLedgerAndRebuildsForeignOne(t *testing.T) {
	src := t.TempDir()
	fx := standardCheckpoint(t, src)
	spec := baseSpec(t, src, FormatPacked, 1, 2)
	spec.BlockRows = 32
	if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	lpath := filepath.Join(spec.Dst, LedgerName)
	os.Remove(lpath)
	res, err := Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CopiedBytes != 0 || res.AdoptedFiles != 2 {
		t.Fatalf("adoption pass %+v: want 2 files adopted, nothing copied", res)
	}
	if _, err := os.Stat(lpath); err != nil {
		t.Fatalf("adoption did not write the ledger: %v", err)
	}
	// A tree without ledger whose rows differ: only the bad block is rewritten.
	os.Remove(lpath)
	pi, _ := Plan(spec)
	lp := pi.Layers[1]
	p := filepath.Join(spec.Dst, lp.Output)
	f, _ := os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteAt(bytes.Repeat([]byte{0xEE}, int(lp.RecordSize)), PackedHeaderSize+lp.RecordSize*5)
	f.Close()
	res, err = Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CopiedBytes != 32*lp.RecordSize || res.AdoptedFiles != 1 || res.CopiedFiles != 1 {
		t.Fatalf("pass over tree with one bad block %+v: want one block of %d bytes rewritten, one file adopted", res, 32*lp.RecordSize)
	}
	checkPacked(t, fx, spec)
	// A packed file from another checkpoint (valid header, other id) is rebuilt.
	h, _ := ReadPackedHeader(p)
	h.Checkpoint = "0123456789abcdef01234567"
	hb, _ := h.Marshal()
	f, _ = os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteAt(hb, 0)
	f.Close()
	res, err = Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CopiedBytes != lp.Bytes {
		t.Fatalf("foreign packed file: copied %d bytes, want the whole layer %d", res.CopiedBytes, lp.Bytes)
	}
	checkPacked(t, fx, spec)
}

func TestPackedTornHeaderIsRepairedWithoutRewritingRows(t *testing.T) {
	src := t.TempDir()
	fx := standardCheckpoint(t, src)
	spec := baseSpec(t, src, FormatPacked, 0, 4)
	if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(spec.Dst, PackedFileName(3, 0, 4))
	f, _ := os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteAt(make([]byte, 64), 0)
	f.Close()
	if vr, _ := Verify(context.Background(), spec, false); vr.Clean() {
		t.Fatal("verify missed a zeroed packed header")
	}
	res, err := Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CopiedBytes != 0 || res.CopiedFiles != 1 {
		t.Fatalf("header repair %+v: want the file repaired with 0 row bytes written", res)
	}
	checkPacked(t, fx, spec)
}

func TestFullVerifyCatchesCorruptionBetweenSamples(t *testing.T) {
	src := t.TempDir()
	fx := writeCheckpoint(t, src, []shardSpec{{"model.safetensors", []safetensors.Tensor{tn("t.0.rows", "F32", 2048, 64)}}}, false)
	spec := baseSpec(t, src, FormatPacked, 0, 1)
	spec.Tensors, spec.Layers, spec.BlockRows = []string{"t.{L}.rows"}, []int{0}, 0
	if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	checkPacked(t, fx, spec)
	// Another block size: the tree is adopted and stale entries dropped.
	spec.BlockRows = 500
	res, err := Stage(context.Background(), spec, staging.Options{})
	if err != nil || res.CopiedBytes != 0 {
		t.Fatalf("pass with a new block size %+v %v: want nothing copied", res, err)
	}
	if l, _ := ledger.Load(filepath.Join(spec.Dst, LedgerName), LedgerKind); len(l.Entries) != 5 {
		t.Fatalf("ledger has %d entries after re-blocking 2048 rows by 500, want 5", len(l.Entries))
	}
	spec.BlockRows = 0
	if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(spec.Dst, PackedFileName(0, 0, 1))
	// 512 KiB block; sample windows are 4 KiB at multiples of ~34 KiB:
	// byte 20000 lies between the first two.
	f, _ := os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteAt([]byte{0xFF, 0xFE}, PackedHeaderSize+20000)
	f.Close()
	vr, err := Verify(context.Background(), spec, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(vr.Bad) != 1 || !vr.Full {
		t.Fatalf("full verify %+v: want the one block bad", vr)
	}
	res, err = Stage(context.Background(), spec, staging.Options{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.CopiedBytes != 2048*256 {
		t.Fatalf("forced pass copied %d bytes, want the corrupt block (%d)", res.CopiedBytes, 2048*256)
	}
	checkPacked(t, fx, spec)
}
