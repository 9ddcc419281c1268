package staging

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/fakeclock"
)

// N bytes written through a pacer of R bytes/s take at least N/R less
// the bucket's burst, on the pacer's own clock, however the writes are
// cut; and not much more (the pacer does not over-throttle).
func TestPacerRateBoundsBytesPerSecond(t *testing.T) {
	const rate = 10 << 20 // 10 MiB/s
	for _, write := range []int64{4 << 20, 1 << 20, 300 << 10, 7 << 20} {
		c := fakeclock.New()
		p := NewPacer(PacerConfig{Rate: rate, Now: c.Now, Sleep: c.Sleep})
		const total = 100 << 20
		for done := int64(0); done < total; {
			n := min(write, total-done)
			if err := p.Wait(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			done += n
		}
		burst := p.burst
		least := time.Duration(float64(total-burst) / rate * float64(time.Second))
		most := time.Duration(float64(total)/rate*float64(time.Second)) + time.Second
		if got := c.Slept(); got < least || got > most {
			t.Errorf("writes of %d bytes: 100 MiB at 10 MiB/s took %s on the pacer's clock, want between %s and %s", write, got, least, most)
		}
	}
}

// A cancelled context ends a rate wait with its error.
func TestPacerRateWaitEndsWithContext(t *testing.T) {
	p := NewPacer(PacerConfig{Rate: 1 << 20})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// More than the burst: the pacer must sleep, and the sleep sees ctx.
	if err := p.Wait(ctx, 8<<20); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled context: %v, want context.Canceled", err)
	}
}

// Under the floor, writes wait and say why at every re-check; once
// MemAvailable is back over it they go on, saying so ("").
func TestPacerFloorPausesAndResumes(t *testing.T) {
	c := fakeclock.New()
	var avail atomic.Int64
	avail.Store(5 << 30)
	reads := 0
	var reasons []string
	c.OnSleep = func(n int) {
		if n == 3 {
			avail.Store(9 << 30) // the engine gave memory back
		}
	}
	p := NewPacer(PacerConfig{MinAvailable: 8 << 30, Now: c.Now, Sleep: c.Sleep,
		MemAvailable: func() (int64, error) { reads++; return avail.Load(), nil },
		OnWait:       func(r string) { reasons = append(reasons, r) }})
	if err := p.Wait(context.Background(), 4<<20); err != nil {
		t.Fatal(err)
	}
	want := "paused: MemAvailable 5.0 GiB under min_available 8.0 GiB"
	if len(reasons) != 4 || reasons[0] != want || reasons[2] != want || reasons[3] != "" {
		t.Fatalf("reasons reported: %q, want %q three times (once per re-check) then \"\"", reasons, want)
	}
	if got := c.Slept(); got != 3*FloorRecheck {
		t.Fatalf("paused for %s on the pacer's clock, want 3 re-checks of %s", got, FloorRecheck)
	}
	// A reading over the floor holds for a moment: the next write does
	// not read /proc/meminfo again.
	before := reads
	if err := p.Wait(context.Background(), 4<<20); err != nil || reads != before {
		t.Fatalf("a write right after: %v, %d more reads, want none", err, reads-before)
	}
}

// The floor blocks a writer in real time until MemAvailable rises, with
// the reason reported while it blocks; the writer cannot return before,
// whatever the machine's speed, since the memory stays low until the test
// raises it.
func TestPacerFloorBlocksUntilMemoryRises(t *testing.T) {
	var avail atomic.Int64
	avail.Store(1 << 30)
	var mu sync.Mutex
	var reasons []string
	first := make(chan struct{})
	var once sync.Once
	p := NewPacer(PacerConfig{MinAvailable: 2 << 30,
		MemAvailable: func() (int64, error) { return avail.Load(), nil },
		OnWait: func(r string) {
			mu.Lock()
			reasons = append(reasons, r)
			mu.Unlock()
			once.Do(func() { close(first) })
		}})
	done := make(chan error, 1)
	go func() { done <- p.Wait(context.Background(), 1) }()
	<-first
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) while MemAvailable is under the floor", err)
	default:
	}
	avail.Store(3 << 30)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait still blocked 30 s after MemAvailable rose over the floor")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reasons) < 2 || reasons[0] != "paused: MemAvailable 1.0 GiB under min_available 2.0 GiB" || reasons[len(reasons)-1] != "" {
		t.Fatalf("reasons reported: %q, want the floor's reason, then \"\" once resumed", reasons)
	}
}

// A paused writer ends with its context; several writers wait on one
// reading; an unreadable MemAvailable lets writes go.
func TestPacerFloorContextAndErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := fakeclock.New()
	c.OnSleep = func(n int) {
		if n == 2 {
			cancel()
		}
	}
	p := NewPacer(PacerConfig{MinAvailable: 8 << 30, Now: c.Now, Sleep: c.Sleep,
		MemAvailable: func() (int64, error) { return 1 << 30, nil }})
	if err := p.Wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("paused writer whose context ends: %v, want context.Canceled", err)
	}
	p = NewPacer(PacerConfig{MinAvailable: 8 << 30, MemAvailable: func() (int64, error) { return 0, errors.New("no /proc") }})
	if err := p.Wait(context.Background(), 1); err != nil {
		t.Fatalf("unreadable MemAvailable: %v, want the write to go", err)
	}
	var reads atomic.Int32
	p = NewPacer(PacerConfig{MinAvailable: 1, MemAvailable: func() (int64, error) { reads.Add(1); return 2, nil }})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := p.Wait(context.Background(), 1); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := reads.Load(); n < 1 || n > 8 {
		t.Fatalf("%d reads for 8 writers", n)
	}
}

// No rate and no floor is no pacer; a nil pacer lets every write go.
func TestNilPacer(t *testing.T) {
	if p := NewPacer(PacerConfig{}); p != nil {
		t.Fatalf("NewPacer of nothing: %+v, want nil", p)
	}
	var p *Pacer
	if err := p.Wait(context.Background(), 1<<40); err != nil {
		t.Fatal(err)
	}
}
