package staging

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/memfit"
)

// Pacer is the one point where a staging pass asks leave to write to the
// node's disk, so a pass beside a serving lane does not take the memory
// and the I/O its engine needs. On a DGX Spark the page cache and the
// GPU's allocations share one memory: drop-behind bounds what the pass
// itself keeps cached, the rate bounds how fast it dirties pages at all
// ([staging] serving_rate), and the floor stops it while the node's
// MemAvailable is under [staging] min_available, rather than push the
// engine into the OOM killer. The engines (hubmirror, sparserows, the
// relay's receiver) call Wait before each write; a nil *Pacer lets every
// write go at once and costs nothing (a pass with no serving lane beside
// it). It is safe for concurrent use.
type Pacer struct {
	lim   *rate.Limiter // nil: no rate limit
	burst int64
	floor int64 // 0: no floor
	avail func() (int64, error)
	wait  func(reason string)
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	// gate lets one writer at a time look at MemAvailable (and wait on
	// it); the others wait for its answer.
	gate chan struct{}
	mu   sync.Mutex
	// over is when MemAvailable was last found at or over the floor.
	over time.Time
}

// PacerConfig is what a Pacer enforces and how it sees the node.
type PacerConfig struct {
	// Rate bounds the bytes written per second (0: no bound).
	Rate int64
	// MinAvailable is the MemAvailable under which writes wait (0: no
	// floor).
	MinAvailable int64
	// MemAvailable reads the node's MemAvailable in bytes (nil:
	// /proc/meminfo). A reading that fails lets the write go: a floor
	// the pass cannot see must not stop it for good.
	MemAvailable func() (int64, error)
	// OnWait is told why writes wait ("paused: MemAvailable 5.1 GiB under
	// min_available 8.0 GiB"), again at every re-check while they do (so
	// the caller can heartbeat it), and "" once they go on. It is called
	// by one writer at a time.
	OnWait func(reason string)
	// Now and Sleep are the clock (nil: the real one): tests give a fake
	// one, so no test measures the machine's speed.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// FloorRecheck is how often writes paused by the floor look at
// MemAvailable again.
const FloorRecheck = time.Second

// floorFresh is how long a reading at or over the floor lets writes go
// without reading again: /proc/meminfo costs microseconds, a chunk is
// written every few milliseconds.
const floorFresh = 250 * time.Millisecond

// NewPacer returns the pacer c asks for, or nil when it asks for
// neither a rate nor a floor.
func NewPacer(c PacerConfig) *Pacer {
	if c.Rate <= 0 && c.MinAvailable <= 0 {
		return nil
	}
	p := &Pacer{floor: max(c.MinAvailable, 0), avail: c.MemAvailable, wait: c.OnWait, now: c.Now, sleep: c.Sleep, gate: make(chan struct{}, 1)}
	if p.avail == nil {
		p.avail = func() (int64, error) { return memfit.ReadMemAvailable("") }
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.sleep == nil {
		p.sleep = sleepCtx
	}
	if c.Rate > 0 {
		// A quarter of a second's bytes at once: a write waits for what
		// it exceeds that by, so the rate holds over any stretch longer
		// than a fraction of a second.
		p.burst = max(c.Rate/4, 1)
		p.lim = rate.NewLimiter(rate.Limit(c.Rate), int(p.burst))
	}
	return p
}

// Wait returns when n bytes may be written: once MemAvailable is at or
// over the floor and the rate allows them. It returns ctx's error if ctx
// ends first. A nil Pacer returns at once.
func (p *Pacer) Wait(ctx context.Context, n int64) error {
	if p == nil {
		return nil
	}
	if err := p.floorWait(ctx); err != nil {
		return err
	}
	return p.rateWait(ctx, n)
}

// rateWait takes n bytes from the token bucket, a burst at a time,
// sleeping for each share the bucket does not hold yet.
func (p *Pacer) rateWait(ctx context.Context, n int64) error {
	if p.lim == nil {
		return nil
	}
	for n > 0 {
		k := min(n, p.burst)
		now := p.now()
		r := p.lim.ReserveN(now, int(k))
		if d := r.DelayFrom(now); d > 0 {
			if err := p.sleep(ctx, d); err != nil {
				r.CancelAt(p.now())
				return err
			}
		}
		n -= k
	}
	return nil
}

// floorWait returns once MemAvailable is at or over the floor (read at
// most every floorFresh), telling OnWait why it waits while it does.
func (p *Pacer) floorWait(ctx context.Context) error {
	if p.floor == 0 || p.fresh() {
		return nil
	}
	select {
	case p.gate <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.gate }()
	if p.fresh() {
		return nil // the writer before found it over the floor
	}
	paused := false
	for {
		avail, err := p.avail()
		if err != nil || avail >= p.floor {
			p.mu.Lock()
			p.over = p.now()
			p.mu.Unlock()
			if paused {
				p.report("")
			}
			return nil
		}
		paused = true
		p.report(FloorReason(avail, p.floor))
		if err := p.sleep(ctx, FloorRecheck); err != nil {
			return err
		}
	}
}

// FloorReason is what a pass paused by the floor reports.
func FloorReason(avail, floor int64) string {
	return fmt.Sprintf("paused: MemAvailable %s under min_available %s", contract.HumanBytes(avail), contract.HumanBytes(floor))
}

// fresh reports whether MemAvailable was found over the floor less than
// floorFresh ago.
func (p *Pacer) fresh() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.over.IsZero() && p.now().Sub(p.over) < floorFresh
}

func (p *Pacer) report(reason string) {
	if p.wait != nil {
		p.wait(reason)
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
