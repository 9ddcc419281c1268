package staging

import (
	"context"
	"os"
	"strconv"
	"time"
)

// Test-only fault point. Integration tests must stop a staging pass at a
// known place (mid-copy, with fsynced bytes on disk) to kill a worker or a
// CLI there, without racing a sleep against the copy speed. A node worker
// whose environment sets TestPauseAtEnv to a byte count holds each staging
// pass once the bytes it has done reach that count: it heartbeats its
// progress with Paused set and copies nothing more until the file named by
// TestReleaseEnv exists (or the activity is cancelled or killed). Unset —
// always, outside tests — it does nothing.
const (
	TestPauseAtEnv = "SPARKLANE_TEST_PAUSE_AT"
	TestReleaseEnv = "SPARKLANE_TEST_RELEASE"
)

// TestPause is an armed fault point of one staging pass; nil is disarmed.
type TestPause struct {
	at      int64
	release string
	done    bool
}

// TestPauseFromEnv arms a fault point from the environment, or returns nil.
func TestPauseFromEnv() *TestPause {
	at, err := strconv.ParseInt(os.Getenv(TestPauseAtEnv), 10, 64)
	if err != nil || at <= 0 {
		return nil
	}
	return &TestPause{at: at, release: os.Getenv(TestReleaseEnv)}
}

func (t *TestPause) released() bool {
	if t.release == "" {
		return false
	}
	_, err := os.Stat(t.release)
	return err == nil
}

// Hold blocks the pass reporting p while it is at or past the pause offset
// and not released, reporting p (Paused set) every half second so the run
// shows where it holds and cancellation still reaches it. It holds at most
// once per pass.
func (t *TestPause) Hold(ctx context.Context, p Progress, report func(Progress)) {
	if t == nil || t.done {
		return
	}
	if p.BytesDone < t.at {
		return
	}
	t.done = true
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	q := p
	q.Paused = true
	for !t.released() {
		report(q)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
