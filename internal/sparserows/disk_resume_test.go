package sparserows

import (
	"context"
	"errors"
	"testing"

	"github.com/sparklane/sparklane/internal/staging"
)

// Issue 13.6: a restaged block resumes from the fsynced bytes on disk,
// whichever run finds them. A pass interrupted 8 blocks into layer 2 is
// followed by a fresh Stage call with no heartbeat details (a new workflow
// run after a cancel): it rewrites the unwritten rows and at most one block
// more, for both formats, and the result verifies byte for byte.
func TestFreshRunResumesFromTempFiles(t *testing.T) {
	for _, format := range []string{FormatPacked, FormatSparseCopy} {
		t.Run(format, func(t *testing.T) {
			src, fx := resumeCheckpoint(t)
			spec := baseSpec(t, src, format, 1, 2)
			spec.Tensors, spec.Layers, spec.BlockRows = []string{"t.{L}.rows"}, []int{1, 2}, 40
			ctx, cancel := context.WithCancel(context.Background())
			var last staging.Progress
			_, err := Stage(ctx, spec, staging.Options{OnProgress: func(p staging.Progress) {
				last = p
				if p.Layer == 2 && p.NextRow >= 500+8*40 {
					cancel()
				}
			}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted pass returned %v, want context.Canceled", err)
			}
			if last.Layer != 2 || last.NextRow != 820 {
				t.Fatalf("last progress %+v, want layer 2 next row 820", last)
			}
			res, err := Stage(context.Background(), spec, staging.Options{})
			if err != nil {
				t.Fatal(err)
			}
			unwritten := int64(1000 - 820)
			if res.Rows < unwritten || res.Rows > unwritten+40 {
				t.Fatalf("fresh run wrote %d rows; want the %d unwritten rows plus at most one block of 40", res.Rows, unwritten)
			}
			if format == FormatPacked {
				checkPacked(t, fx, spec)
			} else {
				checkSparse(t, spec)
			}
			if vr, err := Verify(context.Background(), spec, true); err != nil || !vr.Clean() {
				t.Fatalf("verify after the fresh run %+v %v", vr, err)
			}
		})
	}
}
