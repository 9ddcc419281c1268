package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// stagingLane is simLane with one hub-mirror block under node a's roots.
const stagingLane = "runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve --port {port}\"\ncluster = \"one\"\n" +
	"[[staging]]\nkind = \"hub-mirror\"\nsrc = \"/nas/hub\"\ndst = \"/nvme/w\"\nrepos = [\"org/m\"]\n"

// markerExe is a control service program that only records it was run:
// a command that must start nothing leaves no marker behind.
func markerExe(t *testing.T) (exe, marker string) {
	t.Helper()
	dir := t.TempDir()
	marker = filepath.Join(dir, "ran")
	exe = writeConfigTestFile(t, dir, "worker", "#!/bin/sh\ntouch "+marker+"\nexit 1\n")
	if err := os.Chmod(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe, marker
}

// stage --node and verify --node name a node of the lane, checked before
// anything starts: no control service (so no node lease) for a ghost.
func TestStageNodeCheckedBeforeAnyRun(t *testing.T) {
	cfg, _ := writeCLIFleet(t, "st.toml", stagingLane)
	exe, marker := markerExe(t)
	t.Setenv("SPARKLANE_CONTROL_EXE", exe)
	for _, cmd := range []string{"stage", "verify"} {
		code, out, errOut := runStarter(t, "--config", cfg, cmd, "--lane", "st", "--node", "ghost")
		if code != 1 || !strings.Contains(errOut, "--node ghost: lane st does not run on it (cluster one: a)") {
			t.Errorf("%s --node ghost: exit %d\n%s%s", cmd, code, out, errOut)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a control service was started for --node ghost")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(cfg), "state", "control.lock")); err == nil {
		t.Error("state_dir holds a control lock after --node ghost")
	}
}

// -o of a key the lane does not use is an error naming the key and the
// keys the lane uses.
func TestOverrideOfUnknownKeyIsAnError(t *testing.T) {
	cfg, _ := writeCLIFleet(t, "st.toml", stagingLane)
	code, out, errOut := runStarter(t, "--config", cfg, "recipe", "render", "--lane", "st", "-o", "nosuchkey=1")
	if code != 1 || !strings.Contains(errOut, `-o nosuchkey=1: lane st (`) || !strings.Contains(errOut, `uses no key "nosuchkey"`) ||
		!strings.Contains(errOut, "known keys: ") || !strings.Contains(errOut, "port") {
		t.Fatalf("-o nosuchkey=1: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runStarter(t, "--config", cfg, "recipe", "render", "--lane", "st", "-o", "port=9001"); code != 0 || !strings.Contains(out, "--port 9001") {
		t.Fatalf("-o port=9001: exit %d\n%s%s", code, out, errOut)
	}
}

// A config with no [[nodes]] (an empty file included) is an error naming
// the file for commands that work on nodes, not an empty table.
func TestNodelessConfigIsAnError(t *testing.T) {
	dir := t.TempDir()
	exe, marker := markerExe(t)
	t.Setenv("SPARKLANE_CONTROL_EXE", exe)
	for name, body := range map[string]string{"empty.toml": "", "nodeless.toml": "recipes_dir = \"lanes\"\n"} {
		cfg := writeConfigTestFile(t, dir, name, body)
		writeConfigTestFile(t, filepath.Join(dir, "lanes"), "st.toml", stagingLane)
		for _, args := range [][]string{{"status"}, {"disk"}, {"cutover", "--lane", "st", "--dry-run"}, {"logs", "--lane", "st"}} {
			code, out, errOut := runStarter(t, append([]string{"--config", cfg}, args...)...)
			if code != 1 || !strings.Contains(errOut, cfg+" has no [[nodes]]") || out != "" {
				t.Errorf("%s %v: exit %d\nstdout %q\nstderr %q", name, args, code, out, errOut)
			}
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a control service was started for a node-less config")
	}
}

// logs looks for a lane's containers on the lane's nodes only: neither a
// warning nor the error names a node outside its cluster, and --node must
// be one of the lane's.
func TestLogsStaysOnTheLanesNodes(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfigTestFile(t, dir, "sparklane.toml", cliFleet+
		"[[nodes]]\nname = \"b\"\nroots = [\"/nvme\"]\n[[nodes]]\nname = \"far\"\nssh = \"op@127.0.0.1:1\"\nroots = [\"/nvme\"]\n"+
		"[[clusters]]\nname = \"all\"\nnodes = [\"a\", \"b\", \"far\"]\n")
	writeConfigTestFile(t, filepath.Join(dir, "lanes"), "solo42.toml", simLane("serve"))
	code, out, errOut := runStarter(t, "--config", cfg, "logs", "--lane", "solo42")
	if code != 1 || !strings.Contains(errOut, "no container of lane solo42 on nodes a ") {
		t.Fatalf("logs --lane solo42: exit %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(errOut, "far") || strings.Contains(errOut, " b ") || strings.Contains(errOut, "b,") {
		t.Errorf("logs named a node outside the lane's cluster:\n%s", errOut)
	}
	code, _, errOut = runStarter(t, "--config", cfg, "logs", "--lane", "solo42", "--node", "far")
	if code != 1 || !strings.Contains(errOut, "--node far: lane solo42 does not run on it (cluster one: a)") {
		t.Errorf("logs --node far: exit %d\n%s", code, errOut)
	}
}

// A node without a worker gets the hint that fits it: fleet install for
// a remote node, the control service for a local one.
func TestStartWorkerHintByKindOfNode(t *testing.T) {
	cfg := &config.Config{File: "f.toml", Nodes: []config.Node{{Name: "dgx1", SSH: "op@10.0.0.1:22"}, {Name: "n1"}}}
	if h := startWorkerHint(cfg, "dgx1"); !strings.Contains(h, "starter fleet install dgx1") || strings.Contains(h, "worker node") {
		t.Errorf("remote node: %s", h)
	}
	if h := startWorkerHint(cfg, "n1"); !strings.Contains(h, "control service") || strings.Contains(h, "fleet install") {
		t.Errorf("local node: %s", h)
	}
}

// temporal.port = 0 is a free port (not silently 7233); absent is 7233
// (ui_port likewise, 8233);
// 0 with a remote node is an error naming the key.
func TestTemporalPortZeroMeansAFreePort(t *testing.T) {
	dir := t.TempDir()
	load := func(body string) *config.Config {
		t.Helper()
		cfg, err := config.Load(writeConfigTestFile(t, dir, "sparklane.toml", body))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if p := load(cliFleet + "[temporal]\nport = 0\n").Temporal.Port; p != 0 {
		t.Errorf("temporal.port = 0 loaded as %d", p)
	}
	if p := load(cliFleet).Temporal.Port; p != config.DefaultPort {
		t.Errorf("no temporal.port loaded as %d, want %d", p, config.DefaultPort)
	}
	// The web UI port the same way: 0 is a free port, absent is 8233.
	if p := load(cliFleet + "[temporal]\nui_port = 0\n").Temporal.UIPort; p != 0 {
		t.Errorf("temporal.ui_port = 0 loaded as %d", p)
	}
	if p := load(cliFleet).Temporal.UIPort; p != config.DefaultUIPort {
		t.Errorf("no temporal.ui_port loaded as %d, want %d", p, config.DefaultUIPort)
	}
	t.Setenv("SPARKLANE_TEMPORAL_PORT", "0")
	if p := load(cliFleet).Temporal.Port; p != 0 {
		t.Errorf("SPARKLANE_TEMPORAL_PORT=0 loaded as %d", p)
	}
	t.Setenv("SPARKLANE_TEMPORAL_PORT", "")
	if err := os.MkdirAll(filepath.Join(dir, "lanes"), 0o755); err != nil {
		t.Fatal(err)
	}
	remote := cliFleet + "[temporal]\nport = 0\n[[nodes]]\nname = \"far\"\nssh = \"op@10.0.0.9:22\"\nroots = [\"/nvme\"]\n"
	cfg := writeConfigTestFile(t, dir, "sparklane.toml", remote)
	code, out, errOut := runStarter(t, "--config", cfg, "recipe", "check")
	if code != 1 || !strings.Contains(errOut+out, cfg+": temporal.port: 0 (a free port, picked at start) cannot serve remote node far") {
		t.Errorf("port 0 with a remote node: exit %d\n%s%s", code, out, errOut)
	}
}

// cutover --dry-run with no control service running starts none (nor
// builds its program): it prints the plan and says which facts it could
// not check.
func TestDryRunStartsNothing(t *testing.T) {
	cfg, _ := writeCLIFleet(t, "st.toml", stagingLane)
	exe, marker := markerExe(t)
	t.Setenv("SPARKLANE_CONTROL_EXE", exe)
	code, out, errOut := runStarter(t, "--config", cfg, "cutover", "--lane", "st", "--dry-run")
	if code != 0 {
		t.Fatalf("cutover --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"DRY RUN — cutover of lane st on cluster one", "Nothing is written or started",
		"fleet not probed: no control service runs for state_dir", "node reachability, free space and the lanes running on the nodes were not checked",
		"[a] rank 0  not checked", "(hub-mirror): plan not checked: no control service runs", "stop the lanes running on a, if any (not checked"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(errOut, "building") || strings.Contains(errOut, "started the control service") {
		t.Errorf("dry run built or started something:\n%s", errOut)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the dry run ran the control service's program")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(cfg), "state", "control.lock")); err == nil {
		t.Error("the dry run left a control lock in state_dir")
	}
}
