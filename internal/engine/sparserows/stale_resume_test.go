package sparserows

import (
	"context"
	"errors"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
)

// TestResumeFromStaleHeartbeatLosesAtMostOneBlock: the progress a retried
// activity resumes from is the last heartbeat that reached the server,
// which may be several blocks behind the temp file (heartbeats are
// throttled). The blocks the temp file already holds are re-checked, not
// rewritten: only the block holding the last written byte is.
func TestResumeFromStaleHeartbeatLosesAtMostOneBlock(t *testing.T) {
	src, fx := resumeCheckpoint(t)
	spec := baseSpec(t, src, FormatPacked, 1, 2)
	spec.Tensors, spec.Layers, spec.BlockRows = []string{"t.{L}.rows"}, []int{1, 2}, 40
	ctx, cancel := context.WithCancel(context.Background())
	var stale, last staging.Progress
	_, err := Stage(ctx, spec, staging.Options{OnProgress: func(p staging.Progress) {
		last = p
		if p.Layer == 2 && p.NextRow == 500+3*40 {
			stale = p // the last heartbeat the server got
		}
		if p.Layer == 2 && p.NextRow >= 500+8*40 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted pass returned %v, want context.Canceled", err)
	}
	if stale.NextRow != 620 || last.NextRow != 820 {
		t.Fatalf("progress: stale %+v last %+v; want next rows 620 and 820", stale, last)
	}
	res, err := Stage(context.Background(), spec, staging.Options{Resume: &stale})
	if err != nil {
		t.Fatal(err)
	}
	// Rows 820..999 were never written; one block (780..819) before them is
	// rewritten because it holds the last written byte.
	if want := int64(1000 - 820 + 40); res.Rows != want {
		t.Fatalf("resume from a heartbeat 5 blocks stale wrote %d rows, want %d (one block more than the unwritten rows)", res.Rows, want)
	}
	checkPacked(t, fx, spec)
	if vr, err := Verify(context.Background(), spec, true); err != nil || !vr.Clean() {
		t.Fatalf("verify after resume %+v %v", vr, err)
	}
}
