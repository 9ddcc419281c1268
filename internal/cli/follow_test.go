package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/control"
)

// fakeRun is a run that never ends while followed: follow must leave it
// on its own (Ctrl-C twice, a dead control service).
type fakeRun struct{ id string }

func (r fakeRun) GetID() string    { return r.id }
func (r fakeRun) GetRunID() string { return "run-1" }
func (r fakeRun) Get(ctx context.Context, _ any) error {
	<-ctx.Done()
	return ctx.Err()
}
func (r fakeRun) GetFirstExecutionRunID() string { return "run-1" }
func (r fakeRun) GetWithOptions(ctx context.Context, v any, _ client.WorkflowRunGetOptions) error {
	return r.Get(ctx, v)
}

// fakeClient records cancels; queries and describes fail (nothing drawn).
type fakeClient struct {
	client.Client
	mu       sync.Mutex
	canceled []string
}

func (c *fakeClient) CancelWorkflow(_ context.Context, id, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.canceled = append(c.canceled, id)
	return nil
}
func (c *fakeClient) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	return nil, errors.New("no query here")
}
func (c *fakeClient) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, errors.New("no describe here")
}

// followApp is an App following with fc, its clock and tickers driven
// by the test: ticks[d] ticks the ticker of period d.
func followApp(fc *fakeClient, errw *lineWriter) (*App, chan os.Signal, map[time.Duration]chan time.Time, *time.Time) {
	ints := make(chan os.Signal, 2)
	ticks := map[time.Duration]chan time.Time{drawEvery: make(chan time.Time), serviceCheckEvery: make(chan time.Time)}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &App{Out: &bytes.Buffer{}, Err: errw, Interrupts: ints, JSON: true, env: &control.Conn{Client: fc},
		now: func() time.Time { return now },
		newTicker: func(d time.Duration) (<-chan time.Time, func()) {
			return ticks[d], func() {}
		}}
	return a, ints, ticks, &now
}

// A second Ctrl-C within 5 s cancels the run in the control service and
// ends the starter at once (exit 130), saying the cleanup goes on there
// and how to follow it — it does not wait for the cleanup.
func TestSecondCtrlCEndsTheStarterAtOnce(t *testing.T) {
	fc := &fakeClient{}
	w := &lineWriter{lines: make(chan string, 16)}
	a, ints, _, now := followApp(fc, w)
	done := make(chan error, 1)
	go func() { done <- a.follow(context.Background(), fakeRun{id: "stage/x"}, nil) }()
	ints <- os.Interrupt
	for l := w.next(t); !strings.Contains(l, "Ctrl-C again within 5s to cancel stage/x"); l = w.next(t) {
	}
	*now = now.Add(2 * time.Second) // read by follow only after the next signal
	ints <- os.Interrupt
	waitExit(t, done, 130, "a second Ctrl-C")
	if len(fc.canceled) != 1 || fc.canceled[0] != "stage/x" {
		t.Errorf("cancels %v, want stage/x once", fc.canceled)
	}
	said := w.next(t)
	for !strings.Contains(said, "cancel requested") {
		said = w.next(t)
	}
	if !strings.Contains(said, "cancel requested for stage/x: its cleanup and rollback run in the control service") || !strings.Contains(said, "starter attach stage/x") {
		t.Errorf("second Ctrl-C said %q", said)
	}
}

// TestHelperControlService is not a test: run with
// SPARKLANE_TEST_CONTROL_STATE set, it stands in for a control service
// (holds the state_dir's lock, publishes a frontend, logs) until killed.
func TestHelperControlService(t *testing.T) {
	state := os.Getenv("SPARKLANE_TEST_CONTROL_STATE")
	if state == "" {
		return
	}
	lock, err := control.Acquire(state, control.Owner{})
	if err != nil {
		fmt.Println("helper:", err)
		os.Exit(2)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(2)
	}
	o := lock.Owner()
	o.Frontend = l.Addr().String()
	if err := lock.Publish(o); err != nil {
		os.Exit(2)
	}
	fmt.Println("helper: serving runs")
	for {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
	}
}

// A starter following a run notices its control service died on the
// next check (every second): it ends with exit 1 naming the pid, how it
// ended (this process started it), the last lines of control.log and the
// attach command that resumes — not a context deadline 46 s later.
func TestFollowNoticesTheControlServiceDied(t *testing.T) {
	state := t.TempDir()
	ctx := context.Background()
	owner, started, err := control.Start(ctx, control.StartOptions{Exe: os.Args[0], Args: []string{"-test.run=^TestHelperControlService$"},
		Env: append(os.Environ(), "SPARKLANE_TEST_CONTROL_STATE="+state), StateDir: state, Wait: time.Minute})
	if err != nil || !started {
		t.Fatalf("start the stand-in control service: started %v, %v", started, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(owner.PID, syscall.SIGKILL) })
	fc := &fakeClient{}
	w := &lineWriter{lines: make(chan string, 64)}
	a, _, ticks, _ := followApp(fc, w)
	a.cfg, a.service, a.ConfigPath = &config.Config{StateDir: state}, owner, "/etc/sparklane.toml"
	done := make(chan error, 1)
	go func() { done <- a.follow(ctx, fakeRun{id: "stage/x"}, nil) }()
	if serviceCheckEvery > 5*time.Second {
		t.Errorf("the control service is checked every %s, want within 5s", serviceCheckEvery)
	}
	ticks[serviceCheckEvery] <- time.Now() // alive: follow goes on
	ticks[serviceCheckEvery] <- time.Now() // (received only after the first check)
	select {
	case err := <-done:
		t.Fatalf("follow ended while the service ran: %v", err)
	default:
	}
	if err := syscall.Kill(owner.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, ok := control.ExitStatus(owner.PID, time.Minute); !ok {
		t.Fatal("the stand-in was not reaped")
	}
	select {
	case ticks[serviceCheckEvery] <- time.Now():
	case err := <-done:
		// The second tick's check ran after the kill and found it dead.
		done <- err
	}
	err2 := waitExit(t, done, 1, "the dead control service")
	msg := err2.Error()
	for _, want := range []string{fmt.Sprintf("the control service (pid %d) of state_dir %s stopped while this starter followed stage/x", owner.PID, state),
		"it ended with signal: killed", control.LogPath(state) + " ends with:", "helper: serving runs",
		"resume following it with: starter --config /etc/sparklane.toml attach stage/x"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}

// Ctrl-C at the demo's last wait ends the demo with exit 0 and says the
// last lane keeps serving and how to stop it; the signal reaches the wait
// itself (the command's context is not cancelled under it).
func TestDemoCtrlCAtTheLastWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 1)
	follow := make(chan os.Signal, 4)
	w := &lineWriter{lines: make(chan string, 16)}
	a := &App{Out: &bytes.Buffer{}, Err: w, Interrupts: follow}
	go a.dispatchSignals(ctx, cancel, signals, follow)
	stopped := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.demoWait(ctx, "demo-2x", "/d/sparklane.toml", true, func() { close(stopped) })
	}()
	for !a.following.Load() {
		runtime.Gosched() // until the wait takes Ctrl-C
	}
	signals <- os.Interrupt
	if err := <-done; err != nil {
		t.Fatalf("Ctrl-C at the demo's wait: %v, want exit 0", err)
	}
	<-stopped
	if ctx.Err() != nil {
		t.Error("Ctrl-C cancelled the command instead of ending the wait")
	}
	var said []string
	for len(w.lines) > 0 {
		said = append(said, <-w.lines)
	}
	text := strings.Join(said, "\n")
	for _, want := range []string{"demo ended: lane demo-2x keeps serving", "go run ./starter --config /d/sparklane.toml stop --lane demo-2x", "stopping the demo's control service"} {
		if !strings.Contains(text, want) {
			t.Errorf("demo's end lacks %q:\n%s", want, text)
		}
	}
}

// waitExit waits up to a minute for follow's error on done, which must be
// an exit with code (after what, in failures), and returns it.
func waitExit(t *testing.T, done <-chan error, code int, what string) error {
	t.Helper()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("follow did not end after %s", what)
	}
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != code {
		t.Fatalf("after %s: %v, want exit %d", what, err, code)
	}
	return err
}
