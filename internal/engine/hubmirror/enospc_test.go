package hubmirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/loopfs"
)

// Item 3 of issue 42: a full disk is recoverable. On a real ext4 (loop
// mounted), a stage whose min_free check passed runs out of space in the
// middle of a large blob (another writer fills the disk at a byte offset
// of the copy). The stage fails NoSpace with the numbers a prune needs and
// keeps its temp file. Space is then freed: enough for the rest of the
// blob, less than the whole blob. The re-stage passes the min_free check
// (the temp file's bytes are counted once, as used, not again as still to
// write), resumes from the temp file and completes: the two passes copy
// at most the blob's size plus one chunk in all.
func TestENOSPCRecoversFromTempFile(t *testing.T) {
	const chunk = 1 << 20
	defer SetChunkSize(chunk)()
	defer SetFlushChunks(4)()
	node := loopfs.Mount(t, 64)
	hub := filepath.Join(t.TempDir(), "nas", "hub")
	r := newRepo(t, hub, "org/model")
	const size = 24 << 20
	data := testData(4200, size)
	sum := r.blob(data, false)
	r.link(rev1, "model.safetensors", sum)
	r.ref("main", rev1)
	sp := Spec{Src: hub, Dst: filepath.Join(node, "hf"), Repos: []string{"org/model"}, Roots: []string{node}, MinFree: size}
	filler := filepath.Join(node, "filler")
	const at = 8 << 20
	filled := false
	old := testAfterChunk
	testAfterChunk = func(rel string, copied int64) {
		if copied == at && !filled {
			filled = true
			loopfs.Fill(t, filler)
		}
	}
	t.Cleanup(func() { testAfterChunk = old })

	res1, err := Stage(context.Background(), sp, staging.Options{Parallel: 1})
	if !filled {
		t.Fatalf("the copy never reached offset %d (err %v)", at, err)
	}
	wantType(t, err, fault.NoSpace, "disk full", sp.Dst, "still needs", "is kept")
	t.Logf("ENOSPC: %v", err)
	var short *staging.ShortError
	if !errors.As(err, &short) {
		t.Fatalf("a stage stopped by a full disk does not carry the numbers a prune needs: %v", err)
	}
	blob := filepath.Join(sp.Dst, "hub", "models--org--model", "blobs", sum)
	tmp := filepath.Join(filepath.Dir(blob), tmpBase(sum))
	fi, err := os.Stat(tmp)
	if err != nil {
		t.Fatalf("the copy the full disk stopped left no temp file to resume: %v", err)
	}
	kept := fi.Size()
	if kept < at || kept >= size {
		t.Fatalf("temp file holds %d bytes, want at least the %d copied before the disk filled", kept, at)
	}
	if short.Need > size-kept+(64<<10) {
		t.Fatalf("need %d after the disk filled, want the %d bytes the temp file does not hold yet (it is counted once)", short.Need, size-kept)
	}

	// Free space: the rest of the blob and 2 MiB fit, the whole blob
	// does not (counting the temp file twice would refuse the re-stage).
	must(t, os.Remove(filler))
	free, err := staging.FreeBytes(node)
	must(t, err)
	room := size - kept + 2<<20
	loopfs.WriteFile(t, filler, free-room)
	if free, _ = staging.FreeBytes(node); free >= size || free < size-kept {
		t.Fatalf("%d bytes free after freeing space, want between the %d left to copy and the blob's %d", free, size-kept, size)
	}
	testAfterChunk = old
	res2, err := Stage(context.Background(), sp, staging.Options{Parallel: 1})
	if err != nil {
		t.Fatalf("re-stage with %d bytes free (%d left to copy): %v", free, size-kept, err)
	}
	fileEquals(t, blob, data)
	fileEquals(t, filepath.Join(sp.Dst, "hub", "models--org--model", "snapshots", rev1, "model.safetensors"), data)
	if left := tmpLeft(t, sp.Dst); len(left) != 0 {
		t.Fatalf("temp files left after the re-stage: %v", left)
	}
	if res2.CopiedBytes > res2.TotalBytes-kept {
		t.Fatalf("re-stage copied %d bytes, want at most the %d the temp file did not hold", res2.CopiedBytes, res2.TotalBytes-kept)
	}
	if all := res1.CopiedBytes + res2.CopiedBytes; all > res1.TotalBytes+chunk {
		t.Fatalf("the two passes copied %d bytes in all, want at most the block's %d plus one chunk", all, res1.TotalBytes)
	}
	t.Logf("pass 1 copied %d bytes (kept %d), pass 2 %d, block %d", res1.CopiedBytes, kept, res2.CopiedBytes, res1.TotalBytes)
}
