package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// The starter does not embed the Temporal server; the control service it
// starts is the worker's dev mode. Inside the source tree (go run
// ./starter) that worker is this tree's ./worker, really built into
// STATE_DIR/bin/worker.
func TestControlExeBuildsTheSourceTreesWorker(t *testing.T) {
	t.Setenv("SPARKLANE_CONTROL_EXE", "")
	var errw bytes.Buffer
	a := &App{Err: &errw}
	state := t.TempDir()
	exe, err := a.controlExe(context.Background(), &config.Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(state, "bin", "worker"); exe != want {
		t.Fatalf("control program %s, want %s", exe, want)
	}
	if !strings.Contains(errw.String(), "building the control service (worker dev): go build") {
		t.Errorf("the build was not announced: %q", errw.String())
	}
	out, err := exec.Command(exe, "dev", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "embedded Temporal server") {
		t.Fatalf("%s dev --help: %v\n%s", exe, err, out)
	}
	if got := serviceArgs("/etc/sparklane.toml", "debug"); strings.Join(got, " ") != "dev --config /etc/sparklane.toml --log-level debug" {
		t.Errorf("service command line %q", got)
	}
}

// Outside the source tree the worker installed beside the starter is the
// control service's program; with none there the error says what to do;
// $SPARKLANE_CONTROL_EXE overrides both.
func TestControlExeOutsideTheSourceTree(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("SPARKLANE_CONTROL_EXE", "")
	bin := t.TempDir()
	self := filepath.Join(bin, "starter")
	old := executable
	executable = func() (string, error) { return self, nil }
	t.Cleanup(func() { executable = old })
	a := &App{Err: &bytes.Buffer{}}
	cfg := &config.Config{StateDir: t.TempDir()}

	_, err := a.controlExe(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(bin, "worker")) || !strings.Contains(err.Error(), "SPARKLANE_CONTROL_EXE") {
		t.Fatalf("no worker beside the starter: %v", err)
	}
	// Not executable: not taken for the program.
	worker := filepath.Join(bin, "worker")
	if err := os.WriteFile(worker, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.controlExe(context.Background(), cfg); err == nil {
		t.Fatal("a non-executable worker beside the starter was taken")
	}
	if err := os.Chmod(worker, 0o755); err != nil {
		t.Fatal(err)
	}
	if exe, err := a.controlExe(context.Background(), cfg); err != nil || exe != worker {
		t.Fatalf("worker beside the starter: %q, %v", exe, err)
	}
	t.Setenv("SPARKLANE_CONTROL_EXE", "/opt/sparklane/worker")
	if exe, err := a.controlExe(context.Background(), cfg); err != nil || exe != "/opt/sparklane/worker" {
		t.Fatalf("SPARKLANE_CONTROL_EXE: %q, %v", exe, err)
	}
}

// The starter stays a thin client: neither it nor this package links the
// Temporal server in (its package inits alone took ~0.1 s of every
// command's start-up), nor the image engine's registry client.
func TestStarterDoesNotLinkTheServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/sparklane/sparklane/starter").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./starter: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps ./starter listed %d packages: %s", len(deps), out)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "go.temporal.io/server/") || strings.HasPrefix(p, "github.com/temporalio/ui-server/") || p == "github.com/sparklane/sparklane/internal/devserver" {
			t.Errorf("the starter links %s (the embedded server belongs in the worker: internal/workers/embedded)", p)
		}
		// Registry pulls run on the nodes; the starter checks image keys
		// through internal/imagespec alone.
		if strings.HasPrefix(p, "github.com/google/go-containerregistry/") || p == "github.com/sparklane/sparklane/internal/engine/images" {
			t.Errorf("the starter links %s (the image engine and its registry client belong in the worker)", p)
		}
	}
}
