package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/report"
)

// BenchBeat is how often a running bench heartbeats and renews its lock,
// whatever the sweep is doing: one request may take minutes, and a bench
// that heartbeats only between points would be timed out and run twice.
// A variable so tests can shorten it.
var BenchBeat = 10 * time.Second

// benchLease is how old a bench lock may grow before another attempt takes
// it over: its holder is gone (a killed process renews nothing).
func benchLease() time.Duration { return 3 * BenchBeat }

// benchRunKey names one bench activity of one workflow run: every attempt
// of it has the same key, another run or activity a different one.
func benchRunKey(ctx context.Context, in contract.BenchInput) string {
	wf, run, act := in.WorkflowID, in.RunID, ""
	if activity.IsActivity(ctx) {
		info := activity.GetInfo(ctx)
		wf, run, act = info.WorkflowExecution.ID, info.WorkflowExecution.RunID, info.ActivityID
	}
	sum := sha256.Sum256([]byte(wf + "\x00" + run + "\x00" + act))
	return hex.EncodeToString(sum[:12])
}

// bundleOfRun finds the bundle an earlier attempt of this run wrote but
// did not record: the lane's latest report, when it names this workflow run
// (a run benches once).
func bundleOfRun(dir string, in contract.BenchInput) (contract.BenchResult, bool) {
	if in.RunID == "" {
		return contract.BenchResult{}, false
	}
	rep, err := report.Latest(dir)
	if err != nil || rep.Evidence.Temporal.RunID != in.RunID || rep.Evidence.Temporal.WorkflowID != in.WorkflowID {
		return contract.BenchResult{}, false
	}
	res := contract.BenchResult{ReportID: rep.ID, JSON: filepath.Join(dir, rep.ID+".json"), MD: filepath.Join(dir, rep.ID+".md")}
	if rep.Verdict != nil {
		res.Verdict = rep.Verdict.Overall
	}
	if rep.Perf != nil {
		res.Summary = summarize(*rep.Perf, rep.Harness, res.Verdict)
	}
	return res, true
}

// doneBench returns the result an earlier attempt recorded, when its report
// files are still there.
func doneBench(path string) (contract.BenchResult, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return contract.BenchResult{}, false
	}
	var res contract.BenchResult
	if json.Unmarshal(b, &res) != nil || res.JSON == "" {
		return contract.BenchResult{}, false
	}
	for _, p := range []string{res.JSON, res.MD} {
		if _, err := os.Stat(p); err != nil {
			return contract.BenchResult{}, false
		}
	}
	return res, true
}

func writeJSONAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o644)
}

// benchBeat heartbeats the bench's last progress lines on a timer and
// renews its lock's lease while it holds it.
type benchBeat struct {
	ctx   context.Context
	lock  string
	mu    sync.Mutex
	lines []string
	held  bool
	done  chan struct{}
	once  sync.Once
}

func newBenchBeat(ctx context.Context, lock string) *benchBeat {
	h := &benchBeat{ctx: ctx, lock: lock, done: make(chan struct{})}
	go func() {
		t := time.NewTicker(BenchBeat)
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				h.beat()
			}
		}
	}()
	return h
}

// progress records a progress line and heartbeats it.
func (h *benchBeat) progress(l string) {
	h.mu.Lock()
	h.lines = append(h.lines, l)
	if len(h.lines) > 20 {
		h.lines = h.lines[len(h.lines)-20:]
	}
	h.mu.Unlock()
	h.beat()
}

func (h *benchBeat) beat() {
	h.mu.Lock()
	details, held := strings.Join(h.lines, "\n"), h.held
	h.mu.Unlock()
	heartbeat(h.ctx, details)
	if held {
		now := time.Now()
		_ = os.Chtimes(h.lock, now, now)
	}
}

func (h *benchBeat) stop() { h.once.Do(func() { close(h.done) }) }

// acquire takes the lock, waiting (and heartbeating) while a live older
// attempt holds it, and taking it over once its lease ran out.
func (h *benchBeat) acquire(ctx context.Context) error {
	for {
		f, err := os.OpenFile(h.lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			fmt.Fprintf(f, "pid %d\n", os.Getpid())
			f.Close()
			h.mu.Lock()
			h.held = true
			h.mu.Unlock()
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return classify(fmt.Errorf("bench lock %s: %w", h.lock, err))
		}
		if st, err := os.Stat(h.lock); err == nil && time.Since(st.ModTime()) > benchLease() {
			// The holder renews nothing: it is gone. Remove its lock and
			// race for it again (O_EXCL decides).
			_ = os.Remove(h.lock)
			continue
		}
		h.beat()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(BenchBeat / 5):
		}
	}
}

// release drops the lock if this attempt holds it.
func (h *benchBeat) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		_ = os.Remove(h.lock)
		h.held = false
	}
}
