package sparserows

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/loopfs"
)

// Item 3 of issue 42, for sparse rows: on a real ext4 (loop mounted) a
// packed stage whose min_free check passed runs out of space after a few
// blocks (the disk is filled from the progress callback, at a block
// boundary). It fails NoSpace with what it still needs and keeps its
// temp file; once space is freed (enough for the rest, less than the
// whole table) the re-stage passes min_free, resumes from the temp file
// and completes: the two passes write at most the table's bytes plus one
// block.
func TestENOSPCRecoversFromPartialFile(t *testing.T) {
	src := t.TempDir()
	const rows, width = 4096, 4096 // a 16 MiB U8 table
	fx := writeCheckpoint(t, src, []shardSpec{{"model.safetensors", []safetensors.Tensor{
		tn("model.layers.3.engram.table", "U8", rows, width),
	}}}, false)
	mnt := loopfs.Mount(t, 64)
	spec := Spec{Src: src, Dst: filepath.Join(mnt, "engram"), Format: FormatPacked,
		Tensors: []string{"model.layers.{L}.engram.table"}, Layers: []int{3},
		Rank: 0, TP: 1, Roots: []string{mnt}, BlockRows: 256, MinFree: rows * width}
	const block = 256 * width
	filler := filepath.Join(mnt, "filler")
	filled := false
	opts := staging.Options{OnProgress: func(p staging.Progress) {
		if p.RowsDone >= 4*256 && !filled {
			filled = true
			loopfs.Fill(t, filler)
		}
	}}
	res1, err := Stage(context.Background(), spec, opts)
	if !filled {
		t.Fatalf("the stage never reached row 1024 (err %v)", err)
	}
	if typ, _ := fault.TypeOf(err); typ != fault.NoSpace || !strings.Contains(err.Error(), "still needs") {
		t.Fatalf("stage on a disk filled under it: %v (type %q), want NoSpace saying what it still needs", err, typ)
	}
	var short *staging.ShortError
	if !errors.As(err, &short) {
		t.Fatalf("NoSpace without the numbers a prune needs: %v", err)
	}
	t.Logf("ENOSPC: %v", err)
	tmp := filepath.Join(spec.Dst, "."+PackedFileName(3, 0, 1)+".partial")
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("no temp file kept to resume: %v", err)
	}
	if short.Need > rows*width-4*block {
		t.Fatalf("need %d after 4 blocks were written, want at most the %d left", short.Need, rows*width-4*block)
	}
	// Free space: the rest and 2 MiB fit, the whole table does not.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	free, err := staging.FreeBytes(mnt)
	if err != nil {
		t.Fatal(err)
	}
	loopfs.WriteFile(t, filler, free-(rows*width-4*block+2<<20))
	if free, _ = staging.FreeBytes(mnt); free >= rows*width {
		t.Fatalf("%d bytes free, want less than the table's %d", free, rows*width)
	}
	res2, err := Stage(context.Background(), spec, staging.Options{})
	if err != nil {
		t.Fatalf("re-stage with %d bytes free: %v", free, err)
	}
	checkPacked(t, fx, spec)
	if all := res1.CopiedBytes + res2.CopiedBytes; all > rows*width+block {
		t.Fatalf("the two passes wrote %d+%d bytes, want at most the table's %d plus one block", res1.CopiedBytes, res2.CopiedBytes, rows*width)
	}
	t.Logf("pass 1 wrote %d bytes, pass 2 %d, table %d", res1.CopiedBytes, res2.CopiedBytes, rows*width)
}
