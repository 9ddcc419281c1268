package itest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/demo"
)

// `starter demo --clean` stops the demo's containers through its control
// service (started for the purpose), stops that service and removes the
// demo dir, saying how much it freed; a dir that is not a demo's is refused
// and left alone.
func TestDemoCleanRemovesTheDemoDirAndItsService(t *testing.T) {
	starter := buildBinary(t, "starter")
	base := t.TempDir()
	dir := filepath.Join(base, "demo")
	nas, err := demo.GenerateNAS(filepath.Join(dir, "nas"), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demo.WriteFleet(dir, filepath.Join(dir, "state"), nas, "sparklane/engine-sim:latest", freePort(t), -1); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		ctx := withTimeout(t, 3*time.Minute)
		cmd := exec.CommandContext(ctx, starter, args...)
		cmd.Env = append(os.Environ(), "SPARKLANE_CONFIG=", controlEnv(t))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}

	// Not a demo dir: refused, nothing removed.
	other := filepath.Join(base, "mine")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "sparklane.toml"), []byte("state_dir = \"s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("demo", "--clean", "--dir", other)
	if code == 0 || !strings.Contains(errOut, "is not a demo dir") || !strings.Contains(errOut, "nothing removed") {
		t.Fatalf("clean of a non-demo dir: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(other, "sparklane.toml")); err != nil {
		t.Fatalf("a non-demo dir lost its files: %v", err)
	}

	start := time.Now()
	code, out, errOut = run("--json", "demo", "--clean", "--dir", dir)
	if code != 0 {
		t.Fatalf("demo --clean: exit %d\n%s%s", code, out, errOut)
	}
	var res struct {
		Dir            string `json:"dir"`
		ServiceStopped bool   `json:"control_service_stopped"`
		FreedBytes     int64  `json:"freed_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("demo --clean --json: %v\n%s", err, out)
	}
	if res.Dir != dir || !res.ServiceStopped || res.FreedBytes < 64<<20 {
		t.Errorf("result %+v: want dir %s, service stopped, at least 64 MiB freed", res, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after --clean (%v)", dir, err)
	}
	if owner, ok := control.Find(filepath.Join(dir, "state")); ok {
		t.Errorf("the demo's control service still runs: pid %d", owner.PID)
	}
	t.Logf("demo --clean took %s, freed %d bytes", time.Since(start), res.FreedBytes)

	code, out, errOut = run("demo", "--clean", "--dir", dir)
	if code != 0 || !strings.Contains(out, "nothing to clean") {
		t.Errorf("second clean: exit %d\n%s%s", code, out, errOut)
	}
}
