package hubmirror

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/testkit/fakeclock"
)

// A pass with a pacer (beside a serving lane) asks it before every write,
// large files chunk by chunk and small files whole: at R bytes/s the
// bytes it copied take at least their time at R on the pacer's clock; a
// memory floor pauses it first (the reason reported), and it ends with
// the same mirror as a pass without one.
func TestStageWaitsForItsPacer(t *testing.T) {
	defer SetChunkSize(256 << 10)()
	f := newFixture(t, false)
	big := testData(77, 3<<20+5)
	f.repo.link(rev1, "model-00003.safetensors", f.repo.blob(big, false))
	f.blobs["model-00003.safetensors"] = big
	c := fakeclock.New()
	var high atomic.Bool // MemAvailable over the floor after 2 re-checks
	c.OnSleep = func(n int) {
		if n >= 2 {
			high.Store(true)
		}
	}
	var reasons []string
	const rate = 1 << 20
	p := staging.NewPacer(staging.PacerConfig{Rate: rate, MinAvailable: 8 << 30, Now: c.Now, Sleep: c.Sleep,
		MemAvailable: func() (int64, error) {
			if !high.Load() {
				return 6 << 30, nil
			}
			return 10 << 30, nil
		},
		OnWait: func(r string) { reasons = append(reasons, r) }})
	res, err := Stage(context.Background(), f.spec(), staging.Options{Parallel: 1, Pacer: p})
	must(t, err)
	for rel, b := range f.blobs {
		fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, rel), b)
	}
	if len(reasons) < 2 || reasons[0] != "paused: MemAvailable 6.0 GiB under min_available 8.0 GiB" || reasons[len(reasons)-1] != "" {
		t.Fatalf("reasons %q: want the floor's, then \"\" once resumed", reasons)
	}
	// Less a quarter second's burst, and the two re-checks under the floor.
	least := time.Duration(float64(res.CopiedBytes)/rate*float64(time.Second)) - time.Second/4 + 2*staging.FloorRecheck
	if res.CopiedBytes < int64(len(big)) || c.Slept() < least {
		t.Fatalf("copied %d bytes in %s on the pacer's clock, want at least %s at %d B/s", res.CopiedBytes, c.Slept(), least, rate)
	}
}
