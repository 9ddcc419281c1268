package fleete2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/fleet"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"

	// The embedded Temporal server: these tests host control services in-process.
	_ "github.com/sparklane/sparklane/internal/workers/embedded"
)

func starter(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errw bytes.Buffer
	code := cli.Execute(context.Background(), args, strings.NewReader(""), &out, &errw, nil)
	return code, out.String(), errw.String()
}

// testWorkerPkg is the test worker's package: the worker command line
// with the fault points of internal/testkit/testworker, armed from its
// environment (a node service's from its node.env).
const testWorkerPkg = "internal/testkit/testworker/cmd/testworker"

// buildTestWorker builds the test worker into dir in the background (the
// module root is three levels up); wait returns the binary.
func buildTestWorker(t *testing.T, dir string) (wait func() string) {
	bin := filepath.Join(dir, "testworker")
	done := make(chan error, 1)
	go func() {
		cmd := exec.Command("go", "build", "-o", bin, "./"+testWorkerPkg)
		cmd.Dir = filepath.Join("..", "..", "..")
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build ./%s: %v\n%s", testWorkerPkg, err, out)
		}
		done <- err
	}()
	return func() string {
		t.Helper()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return bin
	}
}

func readPID(path string) int {
	b, _ := os.ReadFile(path)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

type installRow struct {
	fleet.InstallResult
	Poller   string        `json:"poller"`
	PollWait time.Duration `json:"poll_wait"`
	Error    string        `json:"error"`
}

func installJSON(t *testing.T, args ...string) []installRow {
	t.Helper()
	code, out, errOut := starter(t, args...)
	var rows []installRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 {
		t.Fatalf("starter %v: exit %d (%v)\n%s\n%s", args, code, err, out, errOut)
	}
	return rows
}

func TestFleetInstallStatusUpgradeUninstallWithTheRealWorker(t *testing.T) {
	fx := newInstallFixture(t)
	first, pid := fx.install(t)
	fx.status(t, first, pid)
	fx.upgrade(t, first, pid)
	fx.uninstall(t)
}

// installFixture is one node, this machine over a real sshd, installed
// into a root of its own, and the control service of its state_dir
// running in this process.
type installFixture struct {
	dir, state string
	port       int
	l          fleet.Layout
	// common are the starter arguments of every fleet command.
	common []string
}

func newInstallFixture(t *testing.T) *installFixture {
	dir := t.TempDir()
	srv := sshdtest.Start(t)
	port := sshdtest.FreePort(t)
	state := filepath.Join(dir, "state")
	root := filepath.Join(dir, "node-root")
	cfgFile := filepath.Join(dir, "sparklane.toml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(`state_dir = %q
hf_cache_dir = %q

[temporal]
port = %d
ui_port = -1

[[nodes]]
name = "dgx2"
ssh = "root@127.0.0.1:%d"
known_hosts = %q
identity = %q
roots = [%q]

[[clusters]]
name = "solo"
nodes = ["dgx2"]
`, state, filepath.Join(dir, "nas"), port, srv.Port, srv.KnownHostsFile, srv.IdentityFile, filepath.Join(dir, "nvme"))), 0o644); err != nil {
		t.Fatal(err)
	}

	// The control service of this state_dir, in this process: its embedded
	// frontend listens on 127.0.0.1:PORT, which is also where the node's
	// worker (on this machine) looks for it.
	done := runControl(t, cfgFile)
	waitControl(t, state, done)
	l := fleet.DefaultLayout()
	for _, p := range []*string{&l.LibDir, &l.ConfDir, &l.RunDir, &l.UnitDir, &l.StateDir} {
		*p = filepath.Join(root, *p)
	}
	t.Cleanup(func() {
		for _, p := range []string{l.PIDFile(), l.WorkerPIDFile()} {
			if pid := readPID(p); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return &installFixture{dir: dir, state: state, port: port, l: l,
		common: []string{"--config", cfgFile, "--json", "fleet", "--root", root, "--supervisor"}}

}

// install installs the real worker twice: the first uploads and starts
// it, the second changes nothing. It returns the first row and the
// running worker's pid.
func (fx *installFixture) install(t *testing.T) (installRow, int) {
	state, l, common, port := fx.state, fx.l, fx.common, fx.port
	// Install, run inside this source tree, builds the real worker into
	// STATE_DIR/bin (the build cache makes it a link of some seconds),
	// then: uploaded, written, installed, started, and the server sees
	// the node's worker polling node.dgx2.
	rows := installJSON(t, append(common, "install", "--wait", "90s")...)
	if len(rows) != 1 || rows[0].Binary != fleet.Uploaded || rows[0].Config != fleet.Written || rows[0].Service != fleet.Installed || rows[0].Run != fleet.Started || rows[0].Poller == "" {
		t.Fatalf("first install: %+v", rows)
	}
	first := rows[0]
	worker := filepath.Join(state, "bin", "worker")
	if id, err := fleet.BuildID(worker); err != nil || id != first.BuildID {
		t.Fatalf("the installed build %s is not the worker built into %s (%s, %v)", first.BuildID, worker, id, err)
	}
	for _, s := range first.Steps {
		t.Logf("install of the real worker (%d MiB): %-8s %v", fileSize(t, worker)>>20, s.Step, s.Took)
	}
	t.Logf("install took %v, then the worker polled after %v", first.Took, first.PollWait)
	nodeCfg, err := config.Load(l.Config())
	if err != nil {
		t.Fatalf("the installed node config does not load: %v", err)
	}
	if nodeCfg.Temporal.Address != fmt.Sprintf("127.0.0.1:%d", port) || nodeCfg.StateDir != l.StateDir {
		t.Fatalf("node config temporal %+v state_dir %s", nodeCfg.Temporal, nodeCfg.StateDir)
	}

	// Again: nothing changes, the running worker is left alone.
	pid := readPID(l.WorkerPIDFile())
	rows = installJSON(t, append(common, "install", "--wait", "90s")...)
	if r := rows[0]; r.Binary != fleet.Unchanged || r.Config != fleet.Unchanged || r.Service != fleet.Unchanged || r.Run != fleet.Running || readPID(l.WorkerPIDFile()) != pid {
		t.Fatalf("second install: %+v (worker pid %d → %d)", r, pid, readPID(l.WorkerPIDFile()))
	}
	for _, s := range rows[0].Steps {
		t.Logf("second install: %-8s %v", s.Step, s.Took)
	}
	t.Logf("second install took %v, the running worker's poll seen after %v", rows[0].Took, rows[0].PollWait)
	return first, pid
}

// status checks fleet status (JSON and text) and install's text line.
func (fx *installFixture) status(t *testing.T, first installRow, pid int) {
	common := fx.common
	// Status: active, same build as the control's, a recent poll.
	code, out, errOut := starter(t, append(common, "status")...)
	var st []struct {
		fleet.NodeStatus
		ControlBuildID string    `json:"control_build_id"`
		Mismatch       bool      `json:"mismatch"`
		LastPoll       time.Time `json:"last_poll"`
		Error          string    `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st) != 1 {
		t.Fatalf("status: exit %d (%v)\n%s\n%s", code, err, out, errOut)
	}
	s := st[0]
	if s.State != "active" || s.WorkerPID != pid || s.BuildID != first.BuildID || s.ControlBuildID != first.BuildID || s.Mismatch || time.Since(s.LastPoll) > 2*time.Minute || s.Error != "" {
		t.Fatalf("status %+v", s)
	}

	textArgs := append([]string{}, common...)
	textArgs = append(textArgs[:2], textArgs[3:]...) // without --json
	code, out, errOut = starter(t, append(textArgs, "install")...)
	if want := fmt.Sprintf("dgx2: binary unchanged (build %s), config unchanged, service unchanged (supervisor), running, polling node.dgx2 (", short(first.BuildID)); code != 0 || !strings.HasPrefix(out, want) {
		t.Fatalf("install (text): exit %d, want a line starting %q\n%s\n%s", code, want, out, errOut)
	}
	t.Logf("starter fleet install (text):\n%s", out)
	code, out, errOut = starter(t, append(textArgs, "status")...)
	t.Logf("starter fleet status (text):\n%s", out)
	if code != 0 || !strings.Contains(out, "active (supervisor)") || !strings.Contains(out, short(first.BuildID)) || strings.Contains(out, "MISMATCH") || !strings.Contains(out, " ago") {
		t.Fatalf("status (text): exit %d\n%s\n%s", code, out, errOut)
	}
}

// upgrade makes a new build: status flags the mismatch; upgrade uploads
// it and restarts the worker.
func (fx *installFixture) upgrade(t *testing.T, first installRow, pid int) {
	dir, l, common := fx.dir, fx.l, fx.common
	worker := filepath.Join(fx.state, "bin", "worker")
	// A new build: status flags the mismatch; upgrade uploads it, restarts
	// the worker and waits for the new one's poll.
	worker2 := filepath.Join(dir, "worker2")
	b, err := os.ReadFile(worker)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(worker2, append(b, []byte("\nsparklane test build 2\n")...), 0o755); err != nil {
		t.Fatal(err)
	}
	common2 := append(append([]string{}, common...), "--worker-binary", worker2)
	code, out, _ := starter(t, append(common2, "status")...)
	if code != 0 || !strings.Contains(out, `"mismatch": true`) {
		t.Fatalf("status with a new control build: exit %d\n%s", code, out)
	}
	rows := installJSON(t, append(common2, "upgrade", "--wait", "90s")...)
	if r := rows[0]; r.Binary != fleet.Uploaded || r.Run != fleet.Restarted || r.Poller == "" || r.Poller == first.Poller {
		t.Fatalf("upgrade: %+v (first poller %s)", r, first.Poller)
	}
	if readPID(l.WorkerPIDFile()) == pid {
		t.Fatal("upgrade did not restart the worker")
	}
	for _, s := range rows[0].Steps {
		t.Logf("upgrade: %-8s %v", s.Step, s.Took)
	}
	t.Logf("upgrade took %v, the new worker polled after %v", rows[0].Took, rows[0].PollWait)
}

// uninstall stops the worker and removes its files, not the staged data.
func (fx *installFixture) uninstall(t *testing.T) {
	l, common := fx.l, fx.common
	// Uninstall: stopped, files gone, the node's staged data untouched.
	staged := filepath.Join(l.StateDir, "keep.txt")
	if err := os.MkdirAll(l.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(staged, []byte("staged"), 0o644); err != nil {
		t.Fatal(err)
	}
	wpid := readPID(l.WorkerPIDFile())
	code, out, errOut := starter(t, append(common, "uninstall")...)
	if code != 0 || !strings.Contains(out, `"stopped": true`) {
		t.Fatalf("uninstall: exit %d\n%s\n%s", code, out, errOut)
	}
	if syscall.Kill(wpid, 0) == nil {
		t.Fatalf("the worker (pid %d) still runs after uninstall", wpid)
	}
	for _, p := range []string{l.Binary(), l.Config(), l.Supervisor(), l.LibDir, l.ConfDir, l.RunDir} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after uninstall", p)
		}
	}
	if _, err := os.Stat(staged); err != nil {
		t.Fatalf("uninstall touched staged data: %v", err)
	}
}

func fileSize(t *testing.T, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Errors from the CLI name the node, the step and what to do, and nodes
// that are not remote are refused or skipped saying why.
func TestFleetErrorsNameNodeStepAndRemedy(t *testing.T) {
	dir := t.TempDir()
	srv := sshdtest.Start(t)
	other, _ := sshdtest.NewKey(t, dir, "other_host")
	kh := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(kh, []byte(sshdtest.KnownHostsLine(srv.Port, other)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	worker := filepath.Join(dir, "worker")
	if err := os.WriteFile(worker, []byte("#!/bin/sh\nexec sleep 3600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "sparklane.toml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(`state_dir = %q

[[nodes]]
name = "here"

[[nodes]]
name = "dgx3"
ssh = "root@127.0.0.1:%d"
known_hosts = %q
identity = %q
`, filepath.Join(dir, "state"), srv.Port, kh, srv.IdentityFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--config", cfgFile, "fleet", "--root", filepath.Join(dir, "root"), "--supervisor", "--worker-binary", worker}

	code, out, errOut := starter(t, append(common, "install", "--wait", "0")...)
	if code != 1 || !strings.Contains(out, "here: local (empty ssh)") {
		t.Fatalf("install: exit %d, want 1 and the local node skipped\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"node dgx3: connect:", fmt.Sprintf("127.0.0.1:%d", srv.Port), "HOST KEY MISMATCH", kh + ":1", "ssh-keygen -R"} {
		if !strings.Contains(out, want) || !strings.Contains(errOut, want) {
			t.Errorf("install output does not name %q:\nstdout:\n%s\nstderr:\n%s", want, out, errOut)
		}
	}
	code, _, errOut = starter(t, append(common, "install", "--wait", "0", "here")...)
	if code != 1 || !strings.Contains(errOut, "node here has no ssh in "+cfgFile) {
		t.Fatalf("install of a local node: exit %d\n%s", code, errOut)
	}
	code, _, errOut = starter(t, append(common, "uninstall", "dgx9")...)
	if code != 1 || !strings.Contains(errOut, `node "dgx9" is not in `+cfgFile+" (nodes: here, dgx3)") {
		t.Fatalf("uninstall of an unknown node: exit %d\n%s", code, errOut)
	}
	code, _, errOut = starter(t, append(common, "upgrade", "--wait", "0")...)
	if code != 1 || !strings.Contains(errOut, "node dgx3: connect:") {
		t.Fatalf("upgrade: exit %d\n%s", code, errOut)
	}
}
