package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// The starter's log (the SDK client's lines and its own) goes to
// STATE_DIR/starter.log, never the terminal at the default level; with
// --verbose it is echoed on stderr and both log paths are printed.
func TestStarterLogGoesToStateDirFile(t *testing.T) {
	state := t.TempDir()
	var errw bytes.Buffer
	a := &App{Err: &errw, LogLevel: "warn", cfg: &config.Config{StateDir: state}}
	a.logger().Sugar().Errorw("Activity error.", "Error", "context canceled")
	if a.closeLog == nil {
		t.Fatal("no log file opened")
	}
	_ = a.closeLog()
	if errw.Len() != 0 {
		t.Errorf("default level wrote to the terminal: %q", errw.String())
	}
	b, err := os.ReadFile(filepath.Join(state, StarterLogFile))
	if err != nil || !strings.Contains(string(b), "Activity error.") || !strings.Contains(string(b), "context canceled") {
		t.Fatalf("starter.log (%v): %q", err, b)
	}

	errw.Reset()
	a = &App{Err: &errw, LogLevel: "warn", Verbose: true, cfg: &config.Config{StateDir: state}}
	a.logger().Warn("retrying")
	_ = a.closeLog()
	for _, want := range []string{filepath.Join(state, "starter.log"), filepath.Join(state, "control.log"), "retrying"} {
		if !strings.Contains(errw.String(), want) {
			t.Errorf("--verbose stderr lacks %q:\n%s", want, errw.String())
		}
	}
}
