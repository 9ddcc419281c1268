package relay

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/testkit/fakeclock"
	"github.com/sparklane/sparklane/internal/testkit/pagecache"
)

// Each receiver asks its node's pacer before the bytes of every write,
// whether they come from the NAS or a peer: at R bytes/s a node's
// written bytes take at least their time at R on its pacer's clock. A
// node paused by its memory floor holds its peers' streams meanwhile
// (they wait on it, then go on) and every node ends with every file.
func TestReceiverWaitsForItsPacer(t *testing.T) {
	f := newFleet(t, 3, 3<<20+7, 2<<20, 1<<20+13)
	const rate = 1 << 20
	clocks := map[string]*fakeclock.Clock{}
	var mu sync.Mutex
	var reasons []string
	for _, nd := range f.nodes {
		clocks[nd.name] = fakeclock.New()
	}
	var high atomic.Bool
	clocks["n2"].OnSleep = func(n int) {
		if n >= 3 {
			high.Store(true)
		}
	}
	res := f.runAll(context.Background(), func(nd *tnode, j *Job) {
		c := clocks[nd.name]
		pc := staging.PacerConfig{Rate: rate, Now: c.Now, Sleep: c.Sleep}
		if nd.name == "n2" {
			pc.MinAvailable = 8 << 30
			pc.MemAvailable = func() (int64, error) {
				if !high.Load() {
					return 2 << 30, nil
				}
				return 12 << 30, nil
			}
			pc.OnWait = func(r string) {
				mu.Lock()
				reasons = append(reasons, r)
				mu.Unlock()
			}
		}
		j.Pacer = staging.NewPacer(pc)
	})
	f.checkMirrors()
	for _, nd := range f.nodes {
		r := res[nd.name]
		least := time.Duration(float64(r.Written)/rate*float64(time.Second)) - time.Second/4
		if r.Written == 0 || clocks[nd.name].Slept() < least {
			t.Errorf("node %s wrote %d bytes in %s on its pacer's clock, want at least %s at %d B/s", nd.name, r.Written, clocks[nd.name].Slept(), least, rate)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reasons) < 2 || reasons[0] != "paused: MemAvailable 2.0 GiB under min_available 8.0 GiB" || reasons[len(reasons)-1] != "" {
		t.Fatalf("n2's reasons %q: want the floor's, then \"\" once resumed", reasons)
	}
}

// Beside a serving lane (a pacer set) the receiver drops each chunk it
// wrote from the page cache, with the NAS file's same range; serving
// nothing, it keeps them cached for its peers as before. What stays is
// what the checks read back: the sampled regions. Read off the kernel's
// page-cache residency (mincore), on real files.
func TestReceiverDropsBehindBesideAServingLane(t *testing.T) {
	const size = 32<<20 + 11 // the samples a fraction of it
	page := int64(os.Getpagesize())
	samples := ledger.SampledBytes(size)
	bound := samples + (2+ledger.SpreadSamples)*2*page
	for _, beside := range []bool{true, false} {
		t.Run(map[bool]string{true: "beside", false: "alone"}[beside], func(t *testing.T) {
			f := newFleet(t, 1, size)
			pagecache.RequireDiskBacked(t, f.dir)
			fl := f.files[0]
			sf, err := os.Open(fl.Src)
			must(t, err)
			// The fixture just wrote the NAS file: start with none of it cached.
			must(t, unix.Fdatasync(int(sf.Fd())))
			must(t, unix.Fadvise(int(sf.Fd()), 0, 0, unix.FADV_DONTNEED))
			sf.Close()
			f.runAll(context.Background(), func(_ *tnode, j *Job) {
				if beside {
					j.Pacer = staging.NewPacer(staging.PacerConfig{MinAvailable: 1, MemAvailable: func() (int64, error) { return 1 << 40, nil }})
				}
			})
			nd := f.nodes[0]
			rs, rd := pagecache.Resident(t, fl.Src), pagecache.Resident(t, filepath.Join(nd.mirror, fl.Rel))
			t.Logf("cached: NAS %d, copy %d of %d (bound %d)", rs, rd, fl.Size, bound)
			f.checkMirrors()
			if beside && (rs > bound || rd > bound) {
				t.Fatalf("beside a serving lane: %d bytes of the NAS file and %d of the copy left in the page cache, want at most the samples' %d", rs, rd, bound)
			}
			if !beside && rd < fl.Size-bound {
				t.Fatalf("serving nothing: %d bytes of the copy in the page cache, want nearly all %d (else the beside case shows nothing)", rd, fl.Size)
			}
		})
	}
}
