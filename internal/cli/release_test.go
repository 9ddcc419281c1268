package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/fleet"
)

// A starter run from an unpacked release takes its workers from that
// release and from the tarballs in the directory it was unpacked in (when
// their SHA256SUMS is there), and runs the release's worker as the control
// service even inside the source tree (this test runs in it); --from
// replaces both sources; outside a release nothing is taken from one.
func TestStarterInAReleaseUsesItsWorkers(t *testing.T) {
	t.Setenv("SPARKLANE_CONTROL_EXE", "")
	dl := t.TempDir()
	rel := filepath.Join(dl, "sparklane-1.0.0-linux-amd64")
	if err := os.MkdirAll(rel, 0o755); err != nil {
		t.Fatal(err)
	}
	old := executable
	executable = func() (string, error) { return filepath.Join(rel, "starter"), nil }
	t.Cleanup(func() { executable = old })
	cfg := &config.Config{StateDir: t.TempDir()}

	if got := (&fleetOpts{}).releaseSet(cfg); got != nil || selfRelease() != "" {
		t.Fatalf("no RELEASE file, yet a release: %+v %q", got, selfRelease())
	}
	if err := os.WriteFile(filepath.Join(rel, fleet.ReleaseManifest), []byte("version=1.0.0\nos=linux\narch=amd64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := (&fleetOpts{}).releaseSet(cfg); got == nil || !slices.Equal(got.Sources, []string{rel}) || got.Cache != filepath.Join(cfg.StateDir, "releases") {
		t.Fatalf("release without tarballs beside it: %+v", got)
	}
	if err := os.WriteFile(filepath.Join(dl, fleet.ReleaseSums), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := (&fleetOpts{}).releaseSet(cfg); got == nil || !slices.Equal(got.Sources, []string{rel, dl}) {
		t.Fatalf("release with the tarballs' sums beside it: %+v", got)
	}
	if got := (&fleetOpts{from: []string{"/x.tar.gz"}}).releaseSet(cfg); got == nil || !slices.Equal(got.Sources, []string{"/x.tar.gz"}) {
		t.Fatalf("--from: %+v", got)
	}
	a := &App{Err: &bytes.Buffer{}}
	if exe, err := a.controlExe(context.Background(), cfg); err != nil || exe != filepath.Join(rel, "worker") {
		t.Fatalf("control service program of a release: %q, %v", exe, err)
	}
}
