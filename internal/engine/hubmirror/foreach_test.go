package hubmirror

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// forEach (errgroup + SetLimit, issue 16) keeps at most workers calls in
// flight, runs every index once, and returns the first error (which
// cancels the others' ctx) or the parent's cancellation.
func TestForEachBoundsAndPropagates(t *testing.T) {
	var inflight, peak, calls atomic.Int32
	gate := make(chan struct{})
	full := make(chan struct{})
	done := make(chan error, 1)
	seen := make([]atomic.Int32, 20)
	go func() {
		done <- forEach(context.Background(), 20, 3, func(_ context.Context, i int) error {
			calls.Add(1)
			seen[i].Add(1)
			n := inflight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			if n == 3 && i < 3 {
				close(full) // the first three are all in flight
			}
			if i < 3 {
				<-gate
			}
			inflight.Add(-1)
			return nil
		})
	}()
	<-full
	if got := calls.Load(); got != 3 {
		t.Fatalf("%d calls started while 3 were blocked; the limit is 3", got)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if peak.Load() > 3 {
		t.Fatalf("%d calls in flight at once, limit 3", peak.Load())
	}
	for i := range seen {
		if seen[i].Load() != 1 {
			t.Fatalf("index %d ran %d times", i, seen[i].Load())
		}
	}

	boom := errors.New("boom")
	var cancelled atomic.Bool
	err := forEach(context.Background(), 50, 2, func(ctx context.Context, i int) error {
		if i == 1 {
			return boom
		}
		if i == 0 {
			<-ctx.Done() // index 0 is only released by index 1's failure
			cancelled.Store(true)
			return ctx.Err()
		}
		return nil
	})
	if !errors.Is(err, boom) || !cancelled.Load() {
		t.Fatalf("forEach returned %v (other call cancelled: %v); want the first error, boom", err, cancelled.Load())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var ran atomic.Int32
	if err := forEach(ctx, 10, 4, func(context.Context, int) error { ran.Add(1); return nil }); !errors.Is(err, context.Canceled) || ran.Load() != 0 {
		t.Fatalf("cancelled parent: err %v, %d calls ran; want context.Canceled and none", err, ran.Load())
	}
}
