package sparserows

import (
	"context"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
)

// Issue 13.6: a restaged block resumes from the fsynced bytes on disk,
// whichever run finds them. A pass interrupted 8 blocks into layer 2 is
// followed by a fresh Stage call with no heartbeat details (a new workflow
// run after a cancel): it rewrites the unwritten rows and at most one block
// more, for both formats, and the result verifies byte for byte.
func TestFreshRunResumesFromTempFiles(t *testing.T) {
	for _, format := range []string{FormatPacked, FormatSparseCopy} {
		t.Run(format, func(t *testing.T) {
			fx, spec := resumeSpec(t, format)
			interruptInLayer2(t, spec, 8)
			res, err := Stage(context.Background(), spec, staging.Options{})
			if err != nil {
				t.Fatal(err)
			}
			unwritten := int64(1000 - 820)
			if res.Rows < unwritten || res.Rows > unwritten+40 {
				t.Fatalf("fresh run wrote %d rows; want the %d unwritten rows plus at most one block of 40", res.Rows, unwritten)
			}
			checkResumed(t, fx, spec, "the fresh run")
		})
	}
}
