package hubmirror

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// Item 7 of issue 14: min_free is checked against the bytes a pass must
// write. On a real (tmpfs) disk the mirror and a filler leave less free
// than min_free: the verify-only pass passes and copies nothing; a pass
// that must re-copy one file is refused naming what it must write.
func TestMinFreeCountsOnlyBytesToWrite(t *testing.T) {
	node, hub, r := smallNode(t)
	for i := 0; i < 3; i++ {
		r.link(rev1, fmt.Sprintf("model-%d.safetensors", i), r.blob(testData(uint64(900+i), 1<<20), false))
	}
	r.ref("main", rev1)
	// min_free: the 3 MiB block plus 1 MiB of headroom.
	sp := Spec{Src: hub, Dst: filepath.Join(node, "hf"), Repos: []string{"org/model"}, Roots: []string{node}, MinFree: 4 << 20}
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 4 {
		t.Fatalf("first stage %+v: want 3 blobs and refs/main copied", res)
	}
	// Fill the disk: less than 1 MiB stays free, far below min_free.
	free, err := staging.FreeBytes(node)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(node, "filler"), make([]byte, free-(512<<10)), 0o644))
	if free, _ = staging.FreeBytes(node); free >= sp.MinFree {
		t.Fatalf("filler left %d bytes free, want less than min_free %d", free, sp.MinFree)
	}
	res, err = Stage(context.Background(), sp, staging.Options{})
	if err != nil {
		t.Fatalf("verify-only pass on a full disk failed: %v", err)
	}
	if res.CopiedFiles != 0 || res.VerifiedFiles != 4 {
		t.Fatalf("verify-only pass %+v: want 4 verified, 0 copied", res)
	}
	// One blob lost: 1 MiB to write plus 1 MiB headroom does not fit.
	lost := filepath.Join(sp.Dst, "hub", "models--org--model", "blobs", shaHex(testData(901, 1<<20)))
	must(t, os.Remove(lost))
	_, err = Stage(context.Background(), sp, staging.Options{})
	wantType(t, err, fault.NoSpace, sp.Dst, "need 2.0 MiB", "1.0 MiB to write", "have")
	must(t, os.Remove(filepath.Join(node, "filler")))
	res, err = Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 1 || res.CopiedBytes != 1<<20 {
		t.Fatalf("pass after freeing space %+v: want the lost blob copied", res)
	}
}
