package sparserows

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/testkit/fakeclock"
	"github.com/sparklane/sparklane/internal/testkit/pagecache"
)

// A pass with a pacer (beside a serving lane) asks it before every chunk
// of rows it writes: at R bytes/s the bytes it wrote take at least their
// time at R on the pacer's clock, a memory floor pauses it first (the
// reason reported), and the output is what a pass without one writes.
func TestStageWaitsForItsPacer(t *testing.T) {
	fx := standardCheckpoint(t, t.TempDir())
	spec := baseSpec(t, fx.dir, FormatSparseCopy, 0, 2)
	c := fakeclock.New()
	var high atomic.Bool // MemAvailable over the floor after 3 re-checks
	c.OnSleep = func(n int) {
		if n >= 3 {
			high.Store(true)
		}
	}
	var reasons []string
	const rate = 8 << 10
	p := staging.NewPacer(staging.PacerConfig{Rate: rate, MinAvailable: 8 << 30, Now: c.Now, Sleep: c.Sleep,
		MemAvailable: func() (int64, error) {
			if !high.Load() {
				return 1 << 30, nil
			}
			return 9 << 30, nil
		},
		OnWait: func(r string) { reasons = append(reasons, r) }})
	res, err := Stage(context.Background(), spec, staging.Options{Pacer: p})
	if err != nil {
		t.Fatal(err)
	}
	checkSparse(t, spec)
	if len(reasons) < 2 || reasons[0] != "paused: MemAvailable 1.0 GiB under min_available 8.0 GiB" || reasons[len(reasons)-1] != "" {
		t.Fatalf("reasons %q: want the floor's, then \"\" once resumed", reasons)
	}
	least := time.Duration(float64(res.CopiedBytes)/rate*float64(time.Second)) - time.Second/4 + 3*staging.FloorRecheck
	if res.CopiedBytes == 0 || c.Slept() < least {
		t.Fatalf("wrote %d bytes in %s on the pacer's clock, want at least %s at %d B/s", res.CopiedBytes, c.Slept(), least, rate)
	}
}

// Beside a serving lane (a pacer set) the pass drops each block it wrote
// and checked from the page cache, on both sides; serving nothing, it
// leaves its output cached as before. Read off the kernel's page-cache
// residency (mincore), on real files.
func TestStageDropsBehindBesideAServingLane(t *testing.T) {
	for _, beside := range []bool{true, false} {
		t.Run(map[bool]string{true: "beside", false: "alone"}[beside], func(t *testing.T) {
			dir := t.TempDir()
			pagecache.RequireDiskBacked(t, dir)
			fx := writeCheckpoint(t, filepath.Join(dir, "ckpt"), []shardSpec{{"model-00001-of-00001.safetensors", []safetensors.Tensor{
				tn("model.layers.3.engram.table", "BF16", 8192, 128),
				tn("model.layers.14.engram.table", "BF16", 8192, 128),
			}}}, true)
			src := filepath.Join(fx.dir, "model-00001-of-00001.safetensors")
			sf, err := os.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			// The fixture just wrote the source: start with none of it cached.
			_ = unix.Fdatasync(int(sf.Fd()))
			_ = unix.Fadvise(int(sf.Fd()), 0, 0, unix.FADV_DONTNEED)
			sf.Close()
			spec := baseSpec(t, fx.dir, FormatPacked, 0, 2)
			opts := staging.Options{}
			if beside {
				opts.Pacer = staging.NewPacer(staging.PacerConfig{MinAvailable: 1, MemAvailable: func() (int64, error) { return 1 << 40, nil }})
			}
			res, err := Stage(context.Background(), spec, opts)
			if err != nil {
				t.Fatal(err)
			}
			var out int64
			ents, err := os.ReadDir(spec.Dst)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".bin") {
					out += pagecache.Resident(t, filepath.Join(spec.Dst, e.Name()))
				}
			}
			// What a pass keeps in any case: each packed file's header
			// page (two files), and a page or two of slack.
			bound := 4 * int64(os.Getpagesize())
			rs := pagecache.Resident(t, src)
			t.Logf("wrote %d bytes; cached: output %d, source %d", res.CopiedBytes, out, rs)
			if beside && (out > bound || rs > bound) {
				t.Fatalf("beside a serving lane: %d bytes of the output and %d of the source left in the page cache, want at most about %d", out, rs, bound)
			}
			if !beside && out < res.CopiedBytes/2 {
				t.Fatalf("serving nothing: %d of the %d bytes written in the page cache, want most (else the beside case shows nothing)", out, res.CopiedBytes)
			}
		})
	}
}
