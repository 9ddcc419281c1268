package workers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// The control service reloads a changed fleet config only when it loads
// and no run is under way; a file that does not load, or runs under way,
// are said once each and change nothing.
func TestConfigWatchReloadsWhenNothingRuns(t *testing.T) {
	dir := t.TempDir()
	file := conftest.WriteFile(t, dir, "sparklane.toml", conftest.GoodConfig)
	core, logs := observer.New(zap.InfoLevel)
	var runs []string
	w := &configWatch{file: file, loaded: control.HashFile(file), log: zap.New(core),
		runs: func(context.Context) ([]string, error) { return runs, nil }}
	ctx := context.Background()
	if w.check(ctx) {
		t.Fatal("reload with the file unchanged")
	}
	write := func(body string) {
		if err := os.WriteFile(filepath.Join(dir, "sparklane.toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(conftest.GoodConfig + "\nthis is not toml = = =\n")
	if w.check(ctx) || w.check(ctx) {
		t.Fatal("reload on a file that does not load")
	}
	write("probe_grace = \"7s\"\n" + conftest.GoodConfig)
	runs = []string{"cutover/c1"}
	if w.check(ctx) || w.check(ctx) {
		t.Fatal("reload while cutover/c1 runs")
	}
	runs = nil
	if !w.check(ctx) {
		t.Fatal("no reload once nothing runs")
	}
	var said []string
	for _, e := range logs.All() {
		said = append(said, e.Message)
	}
	text := strings.Join(said, "\n")
	for _, want := range []string{"does not load", "reloads it once these runs end", "reloading the control service"} {
		if strings.Count(text, want) != 1 {
			t.Errorf("log says %q %d times, want once:\n%s", want, strings.Count(text, want), text)
		}
	}
}
