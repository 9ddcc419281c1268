package sparserows

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// resumeCheckpoint: two layers of 1000 rows × 512 bytes.
func resumeCheckpoint(t *testing.T) (string, *fixture) {
	src := t.TempDir()
	fx := writeCheckpoint(t, src, []shardSpec{
		{"a.safetensors", []safetensors.Tensor{tn("t.1.rows", "I16", 1000, 256)}},
		{"b.safetensors", []safetensors.Tensor{tn("t.2.rows.part0", "I16", 300, 256), tn("t.2.rows.part1", "I16", 700, 256)}},
	}, true)
	return src, fx
}

func TestProgressReportsEveryBlockBoundary(t *testing.T) {
	src, _ := resumeCheckpoint(t)
	spec := baseSpec(t, src, FormatPacked, 0, 1)
	spec.Tensors, spec.Layers, spec.BlockRows = []string{"t.{L}.rows"}, []int{1, 2}, 100
	var seen []staging.Progress
	_, err := Stage(context.Background(), spec, staging.Options{OnProgress: func(p staging.Progress) { seen = append(seen, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 20 {
		t.Fatalf("%d progress reports for 20 blocks", len(seen))
	}
	last := seen[len(seen)-1]
	if last.RowsDone != 2000 || last.RowsTotal != 2000 || last.BytesDone != 2000*512 || last.Layer != 2 || last.NextRow != 1000 || last.FilesDone != 2 {
		t.Fatalf("last progress %+v", last)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].RowsDone < seen[i-1].RowsDone {
			t.Fatalf("progress went backwards: %+v then %+v", seen[i-1], seen[i])
		}
	}
}

// resumeSpec is the resume tests' checkpoint and the spec staging rank 1
// of 2 of its two layers in format, in blocks of 40 rows.
func resumeSpec(t *testing.T, format string) (*fixture, Spec) {
	t.Helper()
	src, fx := resumeCheckpoint(t)
	spec := baseSpec(t, src, format, 1, 2)
	spec.Tensors, spec.Layers, spec.BlockRows = []string{"t.{L}.rows"}, []int{1, 2}, 40
	return fx, spec
}

// interruptInLayer2 stages a resumeSpec and cancels the pass once it is
// blocks blocks into layer 2's rank rows (500..999), as a worker death
// would; it returns the last progress reported, which must be there.
func interruptInLayer2(t *testing.T, spec Spec, blocks int64) staging.Progress {
	t.Helper()
	stop := 500 + blocks*40
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var last staging.Progress
	_, err := Stage(ctx, spec, staging.Options{OnProgress: func(p staging.Progress) {
		last = p
		if p.Layer == 2 && p.NextRow >= stop {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted pass returned %v, want context.Canceled", err)
	}
	if last.Layer != 2 || last.NextRow != stop {
		t.Fatalf("last progress %+v, want layer 2 next row %d", last, stop)
	}
	return last
}

// checkResumed checks the tree staged again after an interruption row by
// row, then verifies it in full.
func checkResumed(t *testing.T, fx *fixture, spec Spec, after string) {
	t.Helper()
	if spec.Format == FormatPacked {
		checkPacked(t, fx, spec)
	} else {
		checkSparse(t, spec)
	}
	if vr, err := Verify(context.Background(), spec, true); err != nil || !vr.Clean() {
		t.Fatalf("verify after %s %+v %v", after, vr, err)
	}
}

// TestResumeAfterKillLosesAtMostOneBlock cancels a pack mid-layer (the
// activity's context on worker death), then resumes from the last reported
// progress and counts the rows rewritten.
func TestResumeAfterKillLosesAtMostOneBlock(t *testing.T) {
	for _, format := range []string{FormatPacked, FormatSparseCopy} {
		t.Run(format, func(t *testing.T) {
			fx, spec := resumeSpec(t, format)
			last := interruptInLayer2(t, spec, 3)
			// Resume: only the rows after NextRow are written.
			res, err := Stage(context.Background(), spec, staging.Options{Resume: &last})
			if err != nil {
				t.Fatal(err)
			}
			if res.Rows != 1000-620 {
				t.Fatalf("resume wrote %d rows, want %d (rows 620..999)", res.Rows, 1000-620)
			}
			checkResumed(t, fx, spec, "resume")
		})
	}
}

// TestResumeRechecksCompletedBlocks: a completed block damaged in the temp
// file before the resume is found by the re-check and rewritten.
func TestResumeRechecksCompletedBlocks(t *testing.T) {
	src, fx := resumeCheckpoint(t)
	spec := baseSpec(t, src, FormatPacked, 0, 1)
	spec.Tensors, spec.Layers, spec.BlockRows = []string{"t.{L}.rows"}, []int{1}, 100
	ctx, cancel := context.WithCancel(context.Background())
	var last staging.Progress
	_, err := Stage(ctx, spec, staging.Options{OnProgress: func(p staging.Progress) {
		last = p
		if p.NextRow >= 500 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted pass: %v", err)
	}
	tmp := filepath.Join(spec.Dst, "."+PackedFileName(1, 0, 1)+".partial")
	if _, err := os.Stat(filepath.Join(spec.Dst, PackedFileName(1, 0, 1))); err == nil {
		t.Fatal("final packed file exists after an interrupted pass")
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("temp file of the interrupted pass: %v", err)
	}
	f.WriteAt([]byte("bad"), PackedHeaderSize+450*512) // last completed block (400..499)
	// A kill mid-block leaves part of the next block written: it is past
	// the resume point and rewritten anyway.
	f.WriteAt(make([]byte, 20*512), PackedHeaderSize+500*512)
	f.Close()
	res, err := Stage(context.Background(), spec, staging.Options{Resume: &last})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 600 {
		t.Fatalf("resume wrote %d rows, want 500 remaining + the damaged block of 100", res.Rows)
	}
	checkPacked(t, fx, spec)
	if _, err := os.Stat(tmp); err == nil {
		t.Fatal("temp file left after the resumed pass")
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	src := t.TempDir()
	fx := standardCheckpoint(t, src)
	spec := baseSpec(t, src, FormatPacked, 3, 4)
	res, err := Stage(context.Background(), spec, staging.Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	pi, _ := Plan(spec)
	if !res.DryRun || res.CopiedBytes != pi.Bytes || res.Rows != pi.Rows {
		t.Fatalf("dry run %+v, plan %d rows %d bytes", res, pi.Rows, pi.Bytes)
	}
	if _, err := os.Stat(spec.Dst); err == nil {
		t.Fatal("dry run created dst")
	}
	if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	lp := pi.Layers[0]
	p := filepath.Join(spec.Dst, lp.Output)
	f, _ := os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteAt([]byte("zz"), PackedHeaderSize+lp.RecordSize*70)
	f.Close()
	before := readFile(t, p)
	res, err = Stage(context.Background(), spec, staging.Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.CopiedBytes != 64*lp.RecordSize || res.VerifiedFiles != 1 {
		t.Fatalf("dry run over one bad block %+v: want 1 block to write, 1 file verified", res)
	}
	if string(readFile(t, p)) != string(before) {
		t.Fatal("dry run changed the packed file")
	}
	if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	checkPacked(t, fx, spec)
}
