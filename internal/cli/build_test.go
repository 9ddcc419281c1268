package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lineWriter hands each line written to it to a channel, so a test waits
// for the line it expects instead of sleeping.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		s := w.buf.String()
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.buf.Next(i + 1)
		w.lines <- s[:i]
	}
}

// next is the next line written, failing after a minute.
func (w *lineWriter) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-w.lines:
		return l
	case <-time.After(time.Minute):
		t.Fatal("no line written within a minute")
		return ""
	}
}

// Building the control service's program says what it builds, that the
// first build takes minutes on a cold cache, and while it runs — off a
// terminal too — its elapsed time and packages on every tick of a clock
// that ticks at most every 10 s. The go command is a stand-in that
// compiles two "packages" and then waits on a FIFO the test opens.
func TestWorkerBuildTalksWhileItRuns(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "release")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "go")
	script := "#!/bin/sh\necho example.com/first >&2\necho example.com/second >&2\nread x < " + fifo + "\n" +
		"while [ $# -gt 1 ] && [ \"$1\" != -o ]; do shift; done\nmkdir -p \"$(dirname \"$2\")\" && touch \"$2\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	old := goTool
	goTool = fake
	t.Cleanup(func() { goTool = old })

	w := &lineWriter{lines: make(chan string, 16)}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	ticks := make(chan time.Time)
	var every time.Duration
	a := &App{Err: w,
		now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		newTicker: func(d time.Duration) (<-chan time.Time, func()) {
			every = d
			return ticks, func() {}
		}}
	out := filepath.Join(dir, "bin", "worker")
	done := make(chan error, 1)
	go func() {
		done <- a.goBuildWorker(context.Background(), dir, out, nil, "the control service (worker dev)")
	}()

	if l := w.next(t); !strings.HasPrefix(l, "building the control service (worker dev): go build -v") {
		t.Fatalf("first line %q", l)
	}
	if l := w.next(t); !strings.Contains(l, "first build of "+out) || !strings.Contains(l, "takes minutes on a cold Go build cache") {
		t.Fatalf("no first-build warning: %q", l)
	}
	for _, elapsed := range []string{"10s", "20s"} {
		mu.Lock()
		now = now.Add(10 * time.Second)
		mu.Unlock()
		ticks <- now
		l := w.next(t)
		if !strings.Contains(l, "still building the control service (worker dev): "+elapsed+" elapsed") {
			t.Fatalf("progress line %q, want %s elapsed", l, elapsed)
		}
	}
	if every <= 0 || every > 10*time.Second {
		t.Errorf("progress every %s, want at most 10s", every)
	}
	// The build ends when the stand-in may; Wait copies all its output
	// first, so both packages are counted.
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("go\n")
	f.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l := w.next(t); !strings.Contains(l, "built "+out+" in 20s (2 packages compiled)") {
		t.Fatalf("last line %q", l)
	}
}
