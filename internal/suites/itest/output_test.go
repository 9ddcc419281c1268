package itest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// status --node N exits 1 when N is not usable and 0 when it is; the
// reason sits in its own wrapped REASON column; --json carries the error
// inside the one document on stdout.
func TestStatusNodeFlagExitCodeReasonColumnAndJSON(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 2, clusters: map[string][]string{"duo": {"n1", "n2"}}})
	f.startControl()
	f.startNode("n1")
	ctx := withTimeout(t, 2*time.Minute)

	code, out, errOut := f.starter(ctx, "status", "--node", "n1")
	if code != 0 {
		t.Fatalf("status --node n1 (free): exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = f.starter(ctx, "status", "--node", "n1", "--node", "n2")
	if code != 1 || !strings.Contains(errOut, "not usable: n2: unreachable") {
		t.Fatalf("status --node n2 (no worker): exit %d, want 1\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if !strings.Contains(lines[0], "REASON") {
		t.Fatalf("no REASON column:\n%s", out)
	}
	for _, l := range lines {
		if len(l) > 160 {
			t.Errorf("status row of %d characters (reason not wrapped):\n%s", len(l), out)
		}
	}
	if !strings.Contains(out, "worker node --node n2") {
		t.Errorf("the reason should say how to start n2's worker:\n%s", out)
	}
	t.Logf("status --node n1 --node n2:\n%s", out)

	code, out, errOut = f.starter(ctx, "status", "--node", "n2", "--json")
	if code != 1 {
		t.Fatalf("status --node n2 --json: exit %d\n%s%s", code, out, errOut)
	}
	var res struct {
		Nodes []struct{ Node, State, Why string }
		Error string
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&res); err != nil || dec.More() {
		t.Fatalf("status --json on failure is not one JSON document (%v):\n%s", err, out)
	}
	if !strings.Contains(res.Error, "n2: unreachable") || len(res.Nodes) != 2 || res.Nodes[1].State != "unreachable" {
		t.Errorf("JSON: %+v", res)
	}
}

// verify of a lane whose node has no worker says so ("no worker on
// node.n1 — … start it with …"), not "staged data drifted … 1 missing",
// in text and in --json.
func TestVerifyWithoutWorkerSaysNoWorker(t *testing.T) {
	nas := filepath.Join(t.TempDir(), "nas")
	if err := os.MkdirAll(filepath.Join(nas, "hub"), 0o755); err != nil {
		t.Fatal(err)
	}
	recipe := `name = "solo"
cluster = "one"
runtime = "sim"
image = "sparklane/engine-sim:latest"
model = "demo/sim-model"
command = "/engine-sim /hub --port {port}"

[[staging]]
kind = "hub-mirror"
id = "weights"
src = "` + filepath.Join(nas, "hub") + `"
dst = "/srv/sparklane/hf"
repos = ["demo/sim-model"]
verify = "sampled"
`
	f := newFleet(t, fleetOptions{nodes: 1, shared: nas, clusters: map[string][]string{"one": {"n1"}}, recipes: map[string]string{"solo": recipe}})
	f.startControl()
	ctx := withTimeout(t, 2*time.Minute)
	code, out, errOut := f.starter(ctx, "verify", "--lane", "solo")
	if code != 1 {
		t.Fatalf("verify with no worker: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"no worker on node.n1", "start it with 'worker node --node n1 --config " + f.cfgFile + "'", "starter fleet install n1"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut+out, "drifted") || strings.Contains(out, "missing:") {
		t.Errorf("verify reports drift for a node it never checked:\n%s%s", out, errOut)
	}
	if !strings.Contains(out, "(no worker)") {
		t.Errorf("table should mark the block unchecked:\n%s", out)
	}
	code, out, errOut = f.starter(ctx, "verify", "--lane", "solo", "--json")
	var res struct {
		OK       bool     `json:"ok"`
		Error    string   `json:"error"`
		NoWorker []string `json:"no_worker"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&res); err != nil || dec.More() {
		t.Fatalf("verify --json is not one JSON document (%v):\n%s\n%s", err, out, errOut)
	}
	if code != 1 || res.OK || len(res.NoWorker) != 1 || res.NoWorker[0] != "n1" || !strings.Contains(res.Error, "no worker on node.n1") {
		t.Errorf("verify --json: exit %d, %+v", code, res)
	}
}

// Every command's --json output on a real fleet is exactly one JSON
// document on stdout — on success and on failure ({"error": ...} with the
// exit code unchanged) — and nothing else is printed there.
func TestEveryCommandJSONParsesOnSuccessAndFailure(t *testing.T) {
	recipe := `name = "solo"
cluster = "one"
runtime = "sim"
image = "sparklane/engine-sim:latest"
model = "demo/sim-model"
command = "/engine-sim /hub --port {port} >> /dev/null"
`
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"one": {"n1"}}, recipes: map[string]string{"solo": recipe}})
	f.startControl()
	f.startNode("n1")
	ctx := withTimeout(t, 3*time.Minute)
	cases := []struct {
		args []string
		fail bool
	}{
		{[]string{"status"}, false},
		{[]string{"status", "--node", "n1"}, false},
		{[]string{"status", "--node", "n9"}, true},
		{[]string{"lanes"}, false},
		{[]string{"recipe", "render", "--lane", "solo"}, false},
		{[]string{"recipe", "render", "--lane", "nope"}, true},
		{[]string{"cutover", "--lane", "solo", "--dry-run"}, false},
		{[]string{"stage", "--lane", "solo"}, true}, // no [[staging]] blocks
		{[]string{"fetch", "--lane", "solo"}, true}, // no hub-mirror blocks
		{[]string{"verify", "--lane", "solo"}, false},
		{[]string{"stop", "--lane", "solo"}, false},
		{[]string{"stop"}, true},
		{[]string{"probe", "--lane", "solo"}, true}, // not serving
		{[]string{"report", "--lane", "solo", "--list"}, false},
		{[]string{"report", "--lane", "solo", "--show", "nope"}, true},
		{[]string{"attach", "no-such-workflow"}, true},
		{[]string{"schedule", "list"}, false},
		{[]string{"control", "status"}, true}, // no service runs: exit 1, {"running": false}
		{[]string{"cancel", "--cluster", "one"}, true},
		{[]string{"keep", "--cluster", "one", "off"}, true}, // no keeper runs
		{[]string{"keep", "--cluster", "one", "sideways"}, true},
		{[]string{"frobnicate"}, true},
	}
	for _, c := range cases {
		code, out, errOut := f.starter(ctx, append(c.args, "--json")...)
		name := strings.Join(c.args, " ")
		if (code != 0) != c.fail {
			t.Errorf("%s --json: exit %d, want failure=%v\nstdout: %s\nstderr: %s", name, code, c.fail, out, errOut)
		}
		dec := json.NewDecoder(strings.NewReader(out))
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() {
			t.Errorf("%s --json: stdout is not one JSON document (%v):\n%s", name, err, out)
			continue
		}
		if m, ok := v.(map[string]any); ok && code != 0 {
			if _, has := m["error"]; !has {
				_, hasErrs := m["errors"]
				if running, ok := m["running"]; !hasErrs && !(ok && running == false) {
					t.Errorf("%s --json failed (exit %d) without an error in the document:\n%s", name, code, out)
				}
			}
		}
		if strings.Contains(out, `\u003e`) {
			t.Errorf("%s --json: HTML-escaped output:\n%s", name, out)
		}
	}
}

// Against a real server, the terminal carries results and one-line errors
// only: the SDK client's log lines go to STATE_DIR/starter.log, whose path
// (and the control service's log) --verbose prints.
func TestStarterLogsGoToAFileUnderStateDir(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"one": {"n1"}}})
	f.startControl()
	f.startNode("n1")
	ctx := withTimeout(t, 2*time.Minute)
	code, out, errOut := f.starter(ctx, "status")
	if code != 0 || errOut != "" {
		t.Fatalf("status: exit %d, stderr %q (want nothing on stderr)\n%s", code, errOut, out)
	}
	code, out, errOut = f.starter(ctx, "status", "--verbose")
	want := "logging to " + filepath.Join(f.cfg.StateDir, "starter.log")
	if code != 0 || !strings.Contains(errOut, want) || !strings.Contains(errOut, filepath.Join(f.cfg.StateDir, "control.log")) {
		t.Fatalf("status --verbose: exit %d, stderr lacks %q:\n%s%s", code, want, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(f.cfg.StateDir, "starter.log")); err != nil {
		t.Fatalf("starter.log: %v", err)
	}
}
