package logging

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/log"
)

// readLines returns the JSON objects written to path, one per line.
func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestJSONLoggerThroughSDKAdapter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zl, err := newLogger("json", "info", f)
	if err != nil {
		t.Fatal(err)
	}
	var l log.Logger = SDK(zl)
	l.Debug("hidden", "k", 1)
	l.Info("staged", "Lane", "demo-4x", "Bytes", 42)
	child := l.(log.WithLogger).With("Node", "dgx1")
	child.Warn("slow", "odd") // dangling key must not be lost or panic
	child.Error("failed", 7, "x")
	_ = zl.Sync()

	lines := readLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("want 3 lines (debug filtered at info), got %d: %v", len(lines), lines)
	}
	if lines[0]["msg"] != "staged" || lines[0]["Lane"] != "demo-4x" || lines[0]["Bytes"] != float64(42) {
		t.Errorf("info line = %v", lines[0])
	}
	if lines[1]["level"] != "warn" || lines[1]["Node"] != "dgx1" || lines[1]["_extra"] != "odd" {
		t.Errorf("warn line = %v", lines[1])
	}
	if lines[2]["7"] != "x" || lines[2]["Node"] != "dgx1" {
		t.Errorf("error line = %v", lines[2])
	}
	if c, _ := lines[0]["caller"].(string); !strings.HasPrefix(c, "logging/logging_test.go") {
		t.Errorf("caller = %q, want the test file, not the adapter", c)
	}
}

func TestBadModeAndLevelAreNamed(t *testing.T) {
	if _, err := New("xml", "info"); err == nil || !strings.Contains(err.Error(), `"xml"`) {
		t.Errorf("New(xml) err = %v", err)
	}
	if _, err := New("console", "loud"); err == nil || !strings.Contains(err.Error(), `"loud"`) {
		t.Errorf("New(loud) err = %v", err)
	}
	for _, lv := range []string{"", "debug", "INFO", "warning", "error"} {
		if _, err := ParseLevel(lv); err != nil {
			t.Errorf("ParseLevel(%q): %v", lv, err)
		}
	}
	if l, err := New("console", "warn"); err != nil || l.Core().Enabled(-1) {
		t.Errorf("console warn logger: err=%v, debug enabled=%v", err, err == nil && l.Core().Enabled(-1))
	}
}

func TestSDKNilLoggerIsNoop(t *testing.T) {
	SDK(nil).Info("nothing", "a", 1) // must not panic
	if SDK(nil).(log.WithLogger).With("a", 1) == nil {
		t.Fatal("With on nop logger returned nil")
	}
}
