package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as a control service: with SPARKLANE_CONTROL_CHILD
// set it takes the lock, listens on a loopback port, publishes it as its
// frontend and serves until SIGTERM — the same life as `starter control
// run`, without a Temporal server, so this package's tests stay fast.
func TestMain(m *testing.M) {
	switch os.Getenv("SPARKLANE_CONTROL_CHILD") {
	case "serve":
		os.Exit(childServe(os.Getenv("SPARKLANE_CONTROL_STATE")))
	case "crash":
		fmt.Println("child: config broken: nodes[0].ssh is not user@host:port")
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func childServe(state string) int {
	lock, err := Acquire(state, Owner{Config: "test.toml"})
	if err != nil {
		fmt.Println("child:", err)
		return 1
	}
	defer lock.Release()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("child:", err)
		return 1
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	o := lock.Owner()
	o.Frontend = l.Addr().String()
	if err := lock.Publish(o); err != nil {
		fmt.Println("child:", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	return 0
}

func startOpts(t *testing.T, state, mode string) StartOptions {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return StartOptions{Exe: exe, StateDir: state, Wait: time.Minute,
		Env: append(os.Environ(), "SPARKLANE_CONTROL_CHILD="+mode, "SPARKLANE_CONTROL_STATE="+state)}
}

func TestAcquireRefusalNamesTheOwner(t *testing.T) {
	state := t.TempDir()
	l, err := Acquire(state, Owner{Command: "starter control run --config /etc/sparklane.toml", Frontend: "127.0.0.1:7233"})
	if err != nil {
		t.Fatal(err)
	}
	owner, ok := Find(state)
	if !ok || owner.PID != os.Getpid() || owner.Frontend != "127.0.0.1:7233" {
		t.Fatalf("Find = %+v, %v; want this process and its frontend", owner, ok)
	}
	_, err = Acquire(state, Owner{})
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire: %v, want a HeldError", err)
	}
	for _, want := range []string{fmt.Sprintf("pid %d", os.Getpid()), "starter control run --config /etc/sparklane.toml", "127.0.0.1:7233", "starter control stop", LockPath(state)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	// Still starting: the refusal says so instead of inventing an address.
	o := l.Owner()
	o.Frontend = ""
	if err := l.Publish(o); err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(state, Owner{})
	if err == nil || !strings.Contains(err.Error(), "still starting") || strings.Contains(err.Error(), "unknown address") {
		t.Fatalf("refusal while starting: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, ok := Find(state); ok {
		t.Fatal("Find reports a service after Release")
	}
}

// Two starters racing to start the service of one state_dir end up with
// one service between them; Stop ends it and frees the lock.
func TestStartRaceGivesOneServiceAndStopEndsIt(t *testing.T) {
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	owners := make([]Owner, 4)
	errs := make([]error, 4)
	for i := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owners[i], _, errs[i] = Start(ctx, startOpts(t, state, "serve"))
		}()
	}
	wg.Wait()
	t.Cleanup(func() { _, _, _ = Stop(context.Background(), state, 10*time.Second) })
	for i := range owners {
		if errs[i] != nil {
			t.Fatalf("Start #%d: %v", i, errs[i])
		}
		if owners[i].PID != owners[0].PID || owners[i].Frontend != owners[0].Frontend {
			t.Fatalf("racing starts gave different services: %+v vs %+v", owners[i], owners[0])
		}
	}
	// The service is detached into its own session.
	sid, err := unix.Getsid(owners[0].PID)
	if err != nil || sid != owners[0].PID {
		t.Errorf("service session id %d (%v), want its own session %d", sid, err, owners[0].PID)
	}
	// A further Start finds it and starts nothing.
	o, started, err := Start(ctx, startOpts(t, state, "serve"))
	if err != nil || started || o.PID != owners[0].PID {
		t.Fatalf("Start with a service running: %+v started=%v err=%v", o, started, err)
	}
	stopped, ran, err := Stop(ctx, state, 10*time.Second)
	if err != nil || !ran || stopped.PID != owners[0].PID {
		t.Fatalf("Stop: %+v ran=%v err=%v", stopped, ran, err)
	}
	if _, ok := Find(state); ok {
		t.Fatal("the lock is still held after Stop")
	}
	if err := syscall.Kill(owners[0].PID, 0); err == nil {
		// Reaped by its parent (this process) or gone: either way not running.
		var st syscall.WaitStatus
		if _, werr := syscall.Wait4(owners[0].PID, &st, syscall.WNOHANG, nil); werr != nil {
			t.Fatalf("service pid %d still exists after Stop", owners[0].PID)
		}
	}
	if _, ran, err := Stop(ctx, state, time.Second); ran || err != nil {
		t.Fatalf("Stop with nothing running: ran=%v err=%v", ran, err)
	}
}

// A service that dies while starting is reported with the tail of its log.
func TestStartReportsAServiceThatDies(t *testing.T) {
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, err := Start(ctx, startOpts(t, state, "crash"))
	if err == nil {
		t.Fatal("Start of a crashing service succeeded")
	}
	for _, want := range []string{"exited while starting", "nodes[0].ssh is not user@host:port", filepath.Join(state, LogFile)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}
