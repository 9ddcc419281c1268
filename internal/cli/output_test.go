package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
)

// decodeOne parses stdout as exactly one JSON object and fails otherwise.
func decodeOne(t *testing.T, what, out string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: stdout is not one JSON object: %v\n%s", what, err, out)
	}
	if dec.More() {
		t.Fatalf("%s: stdout holds more than one JSON document:\n%s", what, out)
	}
	return v
}

// Every command's --json output is one JSON document on stdout, also on
// failure ({"error": ...}, exit code unchanged) and for commands that print
// text (their lines under "output"); ">>" is printed as ">>".
func TestJSONOutputIsOneDocumentOnSuccessAndFailure(t *testing.T) {
	cfg, lanes := writeCLIFleet(t, "app.toml", simLane("serve >> /tmp/log && true"))
	dir := filepath.Dir(cfg)
	bad := writeConfigTestFile(t, dir, "bad.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve\"\nnot_a_key = 1\n")
	cases := []struct {
		name string
		args []string
		code int
		// key that must be in the document ("error" on failure)
		key string
	}{
		{"lanes", []string{"--config", cfg, "lanes", "--json"}, 0, ""},
		{"recipe render", []string{"--config", cfg, "--json", "recipe", "render", "--lane", "app"}, 0, ""},
		{"recipe check ok", []string{"--config", cfg, "--json", "recipe", "check", filepath.Join(lanes, "app.toml")}, 0, "ok"},
		{"recipe check bad", []string{"--config", cfg, "--json", "recipe", "check", bad}, 1, "errors"},
		{"render unknown lane", []string{"--config", cfg, "--json", "recipe", "render", "--lane", "nope"}, 1, "error"},
		{"missing config", []string{"--config", filepath.Join(dir, "absent.toml"), "--json", "lanes"}, 1, "error"},
		{"unknown flag", []string{"--config", cfg, "--json", "lanes", "--bogus"}, 1, "error"},
		{"unknown command", []string{"--config", cfg, "--json", "frobnicate"}, 1, "error"},
		{"status unknown node", []string{"--config", cfg, "--json", "status", "--node", "zz"}, 1, "error"},
		{"verify without lane", []string{"--config", cfg, "--json", "verify"}, 1, "error"},
		{"help", []string{"--json", "--help"}, 0, "output"},
	}
	for _, c := range cases {
		code, out, errOut := runStarter(t, c.args...)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", c.name, code, c.code, out, errOut)
		}
		if strings.TrimSpace(out)[0] == '[' { // lanes prints a list
			var v []any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Errorf("%s: not JSON: %v\n%s", c.name, err, out)
			}
			continue
		}
		v := decodeOne(t, c.name, out)
		if c.key != "" {
			if _, ok := v[c.key]; !ok {
				t.Errorf("%s: no %q in %s", c.name, c.key, out)
			}
		}
		if c.code != 0 && c.key == "error" {
			if msg, _ := v["error"].(string); msg == "" || !strings.Contains(errOut, msg) {
				t.Errorf("%s: error %q should be the message on stderr too: %s", c.name, msg, errOut)
			}
		}
		if strings.Contains(out, `\u003e`) || strings.Contains(out, `\u0026`) {
			t.Errorf("%s: HTML-escaped JSON: %s", c.name, out)
		}
	}
	_, out, _ := runStarter(t, "--config", cfg, "--json", "recipe", "render", "--lane", "app")
	if !strings.Contains(out, `>\\>`) || !strings.Contains(out, `&\\&`) { // shell-quoted by the renderer, not HTML-escaped
		t.Errorf("render --json does not carry the command verbatim:\n%s", out)
	}
	code, out, _ := runStarter(t, "--config", cfg, "--json", "status", "--node", "zz")
	if code != 1 || !strings.Contains(out, "--node zz: no such node") {
		t.Errorf("status --node zz: exit %d\n%s", code, out)
	}
}

// Without --json, stdout stays plain text and errors go to stderr only.
func TestTextOutputKeepsErrorsOnStderr(t *testing.T) {
	code, out, errOut := runStarter(t, "--config", filepath.Join(t.TempDir(), "absent.toml"), "lanes")
	if code != 1 || out != "" || !strings.HasPrefix(errOut, "starter: ") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
}

// The status table's REASON column wraps long reasons onto their own rows.
func TestWrapAndReasonColumn(t *testing.T) {
	why := "node worker not polling node.n2 (no pickup within 3s); start it with: worker node --node n2"
	lines := wrap(why, reasonWidth)
	if len(lines) < 2 || strings.Join(lines, " ") != why {
		t.Fatalf("wrap: %q", lines)
	}
	for _, l := range lines {
		if len(l) > reasonWidth {
			t.Errorf("line longer than %d: %q", reasonWidth, l)
		}
	}
	if got := wrap("averyveryverylongword short", 5); len(got) != 2 || got[0] != "averyveryverylongword" {
		t.Errorf("long word: %q", got)
	}
	if wrap("", 10) != nil {
		t.Error("empty reason should give no lines")
	}
	var buf bytes.Buffer
	a := &App{Out: &buf}
	printFleet(a, nil, statusFixture(why))
	text := buf.String()
	rows := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if !strings.Contains(rows[0], "REASON") || len(rows) != 2+len(lines) {
		t.Fatalf("table:\n%s", text)
	}
	for _, r := range rows {
		if len(r) > 140 {
			t.Errorf("row of %d characters:\n%s", len(r), text)
		}
	}
	if !strings.Contains(rows[2], "unreachable") || strings.Contains(rows[2], "(node worker") {
		t.Errorf("state column should hold only the state:\n%s", text)
	}
}

func statusFixture(why string) contract.FleetProbeResult {
	return contract.FleetProbeResult{Attempt: 1, Nodes: []contract.NodeState{
		{Node: "n1", State: contract.NodeFree, SSH: "local", Worker: "polling"},
		{Node: "n2", State: contract.NodeUnreachable, Worker: "not polling", Why: why},
	}}
}
