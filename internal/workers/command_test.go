package workers

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func runWorker(args ...string) (int, string, string) {
	var out, errw bytes.Buffer
	code := Execute(context.Background(), args, &out, &errw, Options{})
	return code, out.String(), errw.String()
}

// --help on the worker and on every mode exits 0 and prints that mode's
// usage and flags.
func TestHelpForEveryModeExitsZero(t *testing.T) {
	cases := map[string][]string{
		"worker":  {"--help"},
		"dev":     {"dev", "--help"},
		"control": {"control", "--help"},
		"node":    {"node", "--help"},
		"gateway": {"gateway", "--help"},
		"-h":      {"node", "-h"},
	}
	for name, args := range cases {
		code, out, errOut := runWorker(args...)
		if code != 0 || !strings.Contains(out, "Usage:") || !strings.Contains(out, "--config") {
			t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s", name, code, out, errOut)
		}
	}
	_, out, _ := runWorker("--help")
	for _, mode := range []string{"control", "node", "dev", "gateway"} {
		if !strings.Contains(out, "  "+mode+" ") {
			t.Errorf("worker --help does not list mode %s:\n%s", mode, out)
		}
	}
	if _, out, _ := runWorker("node", "--help"); !strings.Contains(out, "--node string") {
		t.Errorf("worker node --help does not show --node:\n%s", out)
	}
}

// Misuse fails with exit 1 and a one-line error that says what to do.
func TestMisuseFailsNamingTheFix(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.toml")
	cases := []struct {
		args []string
		want string
	}{
		{nil, "no mode given: use control, node --node NAME, dev or gateway"},
		{[]string{"frob"}, `unknown mode "frob": use control, node, dev or gateway`},
		{[]string{"gateway", "--name", "nope", "--config", missing}, "absent.toml"},
		{[]string{"node", "--config", missing}, "worker node needs --node NAME"},
		{[]string{"control", "--config", missing}, "absent.toml"},
		{[]string{"dev", "--bogus"}, "unknown flag: --bogus"},
	}
	for _, c := range cases {
		code, out, errOut := runWorker(c.args...)
		if code != 1 || !strings.HasPrefix(errOut, "worker: ") || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("worker %v: exit %d, stderr %q (want %q), stdout %q", c.args, code, errOut, c.want, out)
		}
	}
}
