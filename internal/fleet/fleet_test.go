package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/pki"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// rig is one "node" (this machine through a real loopback sshd) with every
// install directory inside a temp root.
type rig struct {
	t      *testing.T
	srv    *sshdtest.Server
	host   *SSHHost
	eng    *Engine
	root   string
	double string // the test double worker
	log    string // where the double records "PID ARGS" at each start
}

// doubleScript is a test double of the worker: it records its pid and
// arguments, then waits without polling anything. exec keeps the pid the
// supervisor recorded.
func doubleScript(log, version string) string {
	return fmt.Sprintf("#!/bin/sh\n# worker test double %s\necho \"$$ $*\" >>%s\nexec sleep 3600\n", version, quote(log))
}

func newRig(t *testing.T) *rig {
	t.Helper()
	srv := sshdtest.Start(t)
	root := t.TempDir()
	r := &rig{t: t, srv: srv, root: root, double: filepath.Join(t.TempDir(), "worker"), log: filepath.Join(t.TempDir(), "starts.log")}
	r.eng = &Engine{Manager: ManagerSupervisor, StopTimeout: 10 * time.Second, Layout: Layout{
		LibDir:   filepath.Join(root, "usr/local/lib/sparklane"),
		ConfDir:  filepath.Join(root, "etc/sparklane"),
		RunDir:   filepath.Join(root, "run/sparklane"),
		UnitDir:  filepath.Join(root, "etc/systemd/system"),
		StateDir: filepath.Join(root, "var/lib/sparklane"),
	}}
	r.writeDouble("v1")
	h, err := DialHost(context.Background(), "dgx2", srv.Target(), 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", srv, err)
	}
	r.host = h
	t.Cleanup(func() {
		// Whatever the test did, no supervisor or worker outlives it.
		for _, p := range []string{r.eng.Layout.PIDFile(), r.eng.Layout.WorkerPIDFile()} {
			if pid := readPID(p); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		h.Close()
	})
	return r
}

func (r *rig) writeDouble(version string) {
	r.t.Helper()
	if err := os.WriteFile(r.double, []byte(doubleScript(r.log, version)), 0o755); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) spec() Spec {
	return Spec{Node: "dgx2", Binary: r.double, Config: []byte("# node config of dgx2\nstate_dir = \"/var/lib/sparklane\"\n")}
}

func (r *rig) install() InstallResult {
	r.t.Helper()
	res, err := r.eng.Install(context.Background(), r.host, r.spec())
	if err != nil {
		r.t.Fatalf("install: %v\nsshd log:\n%s", err, r.srv.Log())
	}
	return res
}

// starts are the double's recorded starts ("PID ARGS").
func (r *rig) starts() []string {
	b, err := os.ReadFile(r.log)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// waitStarts waits (bounded) until the double has started n times.
func (r *rig) waitStarts(n int) []string {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if s := r.starts(); len(s) >= n {
			return s
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(r.eng.Layout.LogFile())
			r.t.Fatalf("the worker double started %d times, want %d; supervisor log:\n%s", len(r.starts()), n, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitWorkerPID waits for worker.pid to name the worker whose start line
// is start: the supervisor writes it after starting the worker in the
// background, so the worker's own start line may come first.
func (r *rig) waitWorkerPID(start string) int {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		pid := readPID(r.eng.Layout.WorkerPIDFile())
		if pid > 0 && strings.HasPrefix(start, strconv.Itoa(pid)+" ") {
			return pid
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("worker.pid says %d, not the worker that started last (%q)", pid, start)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(x) != string(y) {
		t.Fatalf("%s differs from %s", b, a)
	}
}

func wantSteps(t *testing.T, got InstallResult, binary, cfg, service, run string) {
	t.Helper()
	if got.Binary != binary || got.Config != cfg || got.Service != service || got.Run != run {
		t.Fatalf("install steps = binary %s, config %s, service %s, run %s; want %s, %s, %s, %s", got.Binary, got.Config, got.Service, got.Run, binary, cfg, service, run)
	}
}

func TestInstallTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	l := r.eng.Layout
	first := r.install()
	wantSteps(t, first, Uploaded, Written, Installed, Started)
	if first.Manager != ManagerSupervisor {
		t.Fatalf("manager %q, want supervisor", first.Manager)
	}
	sameFile(t, r.double, l.Binary())
	if b, _ := os.ReadFile(l.Config()); string(b) != string(r.spec().Config) {
		t.Fatalf("config on the node = %q", b)
	}
	if id, _ := BuildID(r.double); first.BuildID != id {
		t.Fatalf("build id %s, want %s", first.BuildID, id)
	}
	starts := r.waitStarts(1)
	want := fmt.Sprintf("node --node dgx2 --config %s", l.Config())
	if !strings.HasSuffix(starts[0], want) {
		t.Fatalf("the worker ran as %q, want args %q", starts[0], want)
	}
	pid := readPID(l.WorkerPIDFile())
	if !alive(pid) || !strings.HasPrefix(starts[0], strconv.Itoa(pid)+" ") {
		t.Fatalf("worker.pid %d (alive %v) is not the started worker %q", pid, alive(pid), starts[0])
	}
	binInfo, _ := os.Stat(l.Binary())

	second := r.install()
	wantSteps(t, second, Unchanged, Unchanged, Unchanged, Running)
	if second.Changed() {
		t.Fatal("second install reports a change")
	}
	if again, _ := os.Stat(l.Binary()); !os.SameFile(binInfo, again) || !again.ModTime().Equal(binInfo.ModTime()) {
		t.Fatal("second install rewrote the binary")
	}
	if got := readPID(l.WorkerPIDFile()); got != pid || len(r.starts()) != 1 {
		t.Fatalf("second install restarted the worker: pid %d → %d, starts %v", pid, got, r.starts())
	}
	for _, s := range first.Steps {
		t.Logf("first install: %-8s %v", s.Step, s.Took)
	}
	t.Logf("first install took %v, second %v", first.Took, second.Took)
}

func TestChangedBinaryIsUploadedAndRestarted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.install()
	oldPID := r.waitWorkerPID(r.waitStarts(1)[0])
	r.writeDouble("v2")
	res := r.install()
	wantSteps(t, res, Uploaded, Unchanged, Unchanged, Restarted)
	sameFile(t, r.double, r.eng.Layout.Binary())
	if id, _ := BuildID(r.double); res.BuildID != id {
		t.Fatalf("build id %s, want the new binary's %s", res.BuildID, id)
	}
	starts := r.waitStarts(2)
	if alive(oldPID) {
		t.Fatalf("the old worker (pid %d) still runs after the upgrade", oldPID)
	}
	newPID := r.waitWorkerPID(starts[1])
	if !alive(newPID) || !strings.HasPrefix(starts[1], strconv.Itoa(newPID)+" ") {
		t.Fatalf("worker.pid %d is not the restarted worker %q", newPID, starts[1])
	}
	// No temp file is left beside the binary.
	ents, _ := os.ReadDir(r.eng.Layout.LibDir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "supervise,worker" {
		t.Fatalf("lib dir holds %v, want supervise and worker only", names)
	}
}

func TestSupervisorRestartsKilledWorker(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.install()
	first := r.waitStarts(1)
	pid := r.waitWorkerPID(first[0])
	sup := readPID(r.eng.Layout.PIDFile())
	if !alive(pid) || !alive(sup) {
		t.Fatalf("worker %d / supervisor %d not running", pid, sup)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	starts := r.waitStarts(2)
	newPID := r.waitWorkerPID(starts[1])
	if newPID == pid || !alive(newPID) || !strings.HasPrefix(starts[1], strconv.Itoa(newPID)+" ") {
		t.Fatalf("after kill -9 of %d: worker.pid %d, starts %v (first %v)", pid, newPID, starts, first)
	}
	if readPID(r.eng.Layout.PIDFile()) != sup {
		t.Fatal("the supervisor itself changed")
	}
	st, err := r.eng.Status(context.Background(), r.host)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "active" || st.WorkerPID != newPID || st.Manager != ManagerSupervisor {
		t.Fatalf("status %+v, want active worker %d under the supervisor", st, newPID)
	}
	if st.Since.IsZero() || time.Since(st.Since) > time.Minute {
		t.Fatalf("status says the worker runs since %v", st.Since)
	}
}

// tree lists every path under root with its type and (for files) content.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out = append(out, rel+"/")
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, rel+" "+string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestUninstallRemovesOnlyWhatInstallAdded(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	l := r.eng.Layout
	// What was there before: a neighbour in /etc/sparklane's parent, a
	// file of the operator's in the config dir, staged data in state_dir.
	for p, c := range map[string]string{
		filepath.Join(l.ConfDir, "operator-notes.txt"):           "mine",
		filepath.Join(l.StateDir, "models--org--m/blobs/abc"):    "weights",
		filepath.Join(r.root, "usr/local/lib/other/tool"):        "tool",
		filepath.Join(filepath.Dir(l.RunDir), "unrelated.pid"):   "1",
		filepath.Join(filepath.Dir(l.UnitDir), "keep-this.conf"): "x",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := tree(t, r.root)
	r.install()
	r.waitStarts(1)
	sup, worker := readPID(l.PIDFile()), readPID(l.WorkerPIDFile())

	res, err := r.eng.Uninstall(context.Background(), r.host)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Stopped {
		t.Fatal("uninstall did not report stopping the running service")
	}
	if alive(sup) || alive(worker) {
		t.Fatalf("supervisor %d alive %v, worker %d alive %v after uninstall", sup, alive(sup), worker, alive(worker))
	}
	for _, p := range []string{l.Binary(), l.Config(), l.Supervisor()} {
		if !contains(res.Removed, p) {
			t.Errorf("uninstall did not report removing %s (removed %v)", p, res.Removed)
		}
	}
	after := tree(t, r.root)
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Fatalf("after install + uninstall the tree differs:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	// A second uninstall finds nothing.
	res, err = r.eng.Uninstall(context.Background(), r.host)
	if err != nil || res.Stopped || len(res.Removed) != 0 {
		t.Fatalf("second uninstall: %+v, %v; want nothing to do", res, err)
	}
	st, err := r.eng.Status(context.Background(), r.host)
	if err != nil || st.Installed || st.State != "not installed" {
		t.Fatalf("status after uninstall: %+v, %v", st, err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestWrongHostKeyNamesNodeHostAndKnownHosts(t *testing.T) {
	t.Parallel()
	srv := sshdtest.Start(t)
	other, _ := sshdtest.NewKey(t, t.TempDir(), "other_host")
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, []byte(sshdtest.KnownHostsLine(srv.Port, other)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	target := srv.Target()
	target.KnownHosts = kh
	_, err := DialHost(context.Background(), "dgx3", target, 5*time.Second)
	if err == nil {
		t.Fatal("dial with a wrong known_hosts key succeeded")
	}
	if typ, _ := fault.TypeOf(err); typ != fault.HostKeyMismatch {
		t.Fatalf("error type %q, want %s: %v", typ, fault.HostKeyMismatch, err)
	}
	msg := err.Error()
	for _, want := range []string{"node dgx3", "connect", fmt.Sprintf("127.0.0.1:%d", srv.Port), kh + ":1", "HOST KEY MISMATCH"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
}

func TestRemoteErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		stderr, want string
		perm         bool
	}{
		{"mkdir: cannot create directory '/usr/local/lib/sparklane': Permission denied", "needs root", true},
		{"sudo: a password is required", "passwordless sudo", true},
		{"cat: write error: No space left on device", "free space", false},
	} {
		err := remoteError("dgx4", "upload the binary to /usr/local/lib/sparklane/worker", &facts{user: "ops"}, Result{Stderr: c.stderr, Exit: 1})
		msg := err.Error()
		if !strings.HasPrefix(msg, "node dgx4: upload the binary to /usr/local/lib/sparklane/worker: ") || !strings.Contains(msg, c.want) || !strings.Contains(msg, c.stderr) {
			t.Errorf("%q → %q: want node, step, stderr and %q", c.stderr, msg, c.want)
		}
		if _, perm := fault.TypeOf(err); perm != c.perm {
			t.Errorf("%q: permanent %v, want %v", c.stderr, perm, c.perm)
		}
	}
}

func TestInstallRefusesABinaryForAnotherArch(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// A real ELF file of the other architecture: this test program is ELF
	// for this machine; patch its e_machine field.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	const eMachine = 18
	other := "aarch64"
	if b[eMachine] == 183 { // EM_AARCH64
		b[eMachine], other = 62, "x86_64" // EM_X86_64
	} else {
		b[eMachine] = 183
	}
	bin := filepath.Join(t.TempDir(), "worker")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	s := r.spec()
	s.Binary = bin
	_, err = r.eng.Install(context.Background(), r.host, s)
	if err == nil || !strings.Contains(err.Error(), "node dgx2") || !strings.Contains(err.Error(), "built for "+other) || !strings.Contains(err.Error(), "--worker-binary") {
		t.Fatalf("install of a %s binary: %v", other, err)
	}
	if _, err := os.Stat(r.eng.Layout.Binary()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the wrong binary was uploaded anyway (%v)", err)
	}
}

func TestNodeConfigRoundTrips(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "sparklane.toml")
	if err := os.WriteFile(src, []byte(`state_dir = "state"
hf_cache_dir = "/nas/hub"
shared_roots = ["/nas"]
relay_port = 7390
image_port = 7391

[temporal]
namespace = "lab"
port = 7299

[[nodes]]
name = "dgx1"
address = "10.0.0.1"
roots = ["/mnt/nvme"]

[[nodes]]
name = "dgx2"
ssh = "root@10.0.0.2:22"
known_hosts = "/root/.ssh/known_hosts"
identity = "/root/.ssh/id_ed25519"
address = "10.0.0.2"
roots = ["/mnt/nvme"]
clear_helper = ["sudo", "-n"]

[[clusters]]
name = "pair"
nodes = ["dgx1", "dgx2"]

[staging]
serving_rate = "400M"
min_available = "0"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	b, notices, err := NodeConfig(cfg, "/var/lib/sparklane")
	if err != nil || len(notices) != 0 {
		t.Fatalf("NodeConfig: %v %v", err, notices)
	}
	again, _, _ := NodeConfig(cfg, "/var/lib/sparklane")
	if string(again) != string(b) {
		t.Fatal("NodeConfig is not deterministic")
	}
	out := filepath.Join(dir, "node.toml")
	if err := os.WriteFile(out, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := config.Load(out)
	if err != nil {
		t.Fatalf("the node config does not load: %v\n%s", err, b)
	}
	if got.StateDir != "/var/lib/sparklane" || got.HFCacheDir != "/nas/hub" || strings.Join(got.SharedRoots, ",") != "/nas" {
		t.Fatalf("roots: %+v", got)
	}
	if got.RelayPort != 7390 || got.ImagePort != 7391 {
		t.Fatalf("relay_port %d image_port %d on the node, want 7390 and 7391: its peers dial those", got.RelayPort, got.ImagePort)
	}
	if got.Temporal.Address != "127.0.0.1:7299" || got.Temporal.Namespace != "lab" {
		t.Fatalf("temporal %+v, want address 127.0.0.1:7299 (the tunnel's end on the node), namespace lab", got.Temporal)
	}
	if len(got.Nodes) != 2 || got.Nodes[1].Name != "dgx2" || got.Nodes[1].Address != "10.0.0.2" || strings.Join(got.Nodes[1].Roots, ",") != "/mnt/nvme" || strings.Join(got.Nodes[1].ClearHelper, " ") != "sudo -n" {
		t.Fatalf("nodes %+v", got.Nodes)
	}
	if got.Nodes[1].KnownHosts != "" || got.Nodes[1].Identity != "" || strings.Contains(string(b), "id_ed25519") {
		t.Fatalf("control-host key paths reached the node config:\n%s", b)
	}
	if len(got.Clusters) != 1 || strings.Join(got.Clusters[0].Nodes, ",") != "dgx1,dgx2" {
		t.Fatalf("clusters %+v", got.Clusters)
	}
	// The node worker applies [staging] itself: an explicit "0" (no
	// floor) must not come back as the default.
	if got.Staging.ServingRate != 400<<20 || got.Staging.Floor() != 0 {
		t.Fatalf("[staging] on the node: %+v, want serving_rate 400M and no floor\n%s", got.Staging, b)
	}
	cfg.Staging = config.StagingLimits{}
	b, _, _ = NodeConfig(cfg, "/var/lib/sparklane")
	if strings.Contains(string(b), "staging") {
		t.Fatalf("no [staging] in the control config, yet the node config has one:\n%s", b)
	}
}

func TestWaitPollerWantsANewWorker(t *testing.T) {
	t.Parallel()
	now := time.Now()
	old := Poller{Identity: "100@dgx2@", LastAccess: now}
	calls := 0
	src := func(ctx context.Context, n string) ([]Poller, error) {
		if n != "dgx2" {
			return nil, fmt.Errorf("asked for %s", n)
		}
		calls++
		if calls < 3 {
			return []Poller{old}, nil
		}
		return []Poller{old, {Identity: "200@dgx2@", LastAccess: now}}, nil
	}
	p, err := WaitPoller(context.Background(), src, "dgx2", NewPoller([]Poller{old}, false, time.Now), 5*time.Second, time.Millisecond)
	if err != nil || p.Identity != "200@dgx2@" || calls != 3 {
		t.Fatalf("WaitPoller = %+v, %v after %d calls; want the new poller on the 3rd", p, err, calls)
	}
	// An unchanged running worker counts when it polled lately.
	p, err = WaitPoller(context.Background(), src, "dgx2", NewPoller([]Poller{old}, true, time.Now), 0, time.Millisecond)
	if err != nil || p.Identity != "100@dgx2@" {
		t.Fatalf("running worker: %+v, %v", p, err)
	}
	// None: the error names the node, the step and where to look.
	_, err = WaitPoller(context.Background(), func(context.Context, string) ([]Poller, error) { return []Poller{old}, nil }, "dgx2",
		NewPoller([]Poller{old}, false, time.Now), 10*time.Millisecond, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "node dgx2: wait for the worker to poll: no new worker polls node.dgx2") || !strings.Contains(err.Error(), "fleet status") {
		t.Fatalf("timeout error: %v", err)
	}
}

// systemctlDouble is a test double of systemctl (systemd cannot run in
// this container): it records each call and keeps the unit's enabled and
// active state in files, with mainPID as the unit's main process.
func systemctlDouble(dir string, mainPID int) string {
	return fmt.Sprintf(`#!/bin/sh
state=%s
echo "$*" >>"$state/calls"
quiet= now= words=
for a; do
	case "$a" in
	--quiet) quiet=1 ;;
	--now) now=1 ;;
	--value|-p|MainPID) ;;
	*) words="$words $a" ;;
	esac
done
set -- $words
case "$1" in
daemon-reload|reset-failed) ;;
enable) touch "$state/enabled" ;;
disable) rm -f "$state/enabled"; [ -n "$now" ] && rm -f "$state/active" ;;
start|restart) touch "$state/active" ;;
is-active)
	if [ -f "$state/active" ]; then [ -n "$quiet" ] || echo active; exit 0; fi
	[ -n "$quiet" ] || echo inactive; exit 3 ;;
show) if [ -f "$state/active" ]; then echo %d; else echo 0; fi ;;
*) echo "systemctl double: unknown command $1" >&2; exit 1 ;;
esac
`, quote(dir), mainPID)
}

func TestSystemdUnitInstallUpgradeStatusUninstall(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	l := r.eng.Layout
	sd := t.TempDir()
	ctl := filepath.Join(sd, "systemctl")
	if err := os.WriteFile(ctl, []byte(systemctlDouble(sd, os.Getpid())), 0o755); err != nil {
		t.Fatal(err)
	}
	r.eng.Manager, r.eng.Systemctl, r.eng.SystemdDir = "", ctl, sd // auto: systemd "runs"
	calls := func() string {
		b, _ := os.ReadFile(filepath.Join(sd, "calls"))
		_ = os.Remove(filepath.Join(sd, "calls"))
		return strings.TrimSpace(string(b))
	}
	unit := "sparklane-node.service"

	res := r.install()
	wantSteps(t, res, Uploaded, Written, Installed, Started)
	if res.Manager != ManagerSystemd || len(res.Notices) != 0 {
		t.Fatalf("manager %q notices %v, want systemd and none", res.Manager, res.Notices)
	}
	want := strings.Join([]string{"daemon-reload", "enable --quiet " + unit, "is-active --quiet " + unit, "reset-failed " + unit, "start " + unit}, "\n")
	if got := calls(); got != want {
		t.Fatalf("systemctl calls:\n%s\nwant:\n%s", got, want)
	}
	b, err := os.ReadFile(l.Unit())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"ExecStart=" + l.Binary() + " node --node dgx2 --config " + l.Config(), "Restart=on-failure", "RestartSec=2", "WantedBy=multi-user.target"} {
		if !strings.Contains(string(b), "\n"+line+"\n") {
			t.Errorf("unit %s lacks %q:\n%s", l.Unit(), line, b)
		}
	}
	if _, err := os.Stat(l.Supervisor()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a supervisor script was written on a systemd host (%v)", err)
	}

	res = r.install()
	wantSteps(t, res, Unchanged, Unchanged, Unchanged, Running)
	if got := calls(); got != "enable --quiet "+unit+"\nis-active --quiet "+unit {
		t.Fatalf("second install called systemctl:\n%s", got)
	}

	r.writeDouble("v2")
	res = r.install()
	wantSteps(t, res, Uploaded, Unchanged, Unchanged, Restarted)
	if got := calls(); !strings.HasSuffix(got, "restart "+unit) || strings.Contains(got, "daemon-reload") {
		t.Fatalf("upgrade called systemctl:\n%s", got)
	}

	st, err := r.eng.Status(context.Background(), r.host)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := BuildID(r.double); st.Manager != ManagerSystemd || st.State != "active" || st.WorkerPID != os.Getpid() || st.BuildID != id || st.Since.IsZero() {
		t.Fatalf("status %+v", st)
	}
	calls()

	un, err := r.eng.Uninstall(context.Background(), r.host)
	if err != nil {
		t.Fatal(err)
	}
	if !un.Stopped || !contains(un.Removed, l.Unit()) || !contains(un.Removed, l.Binary()) {
		t.Fatalf("uninstall %+v", un)
	}
	if got := calls(); !strings.Contains(got, "disable --now --quiet "+unit) || !strings.HasSuffix(got, "daemon-reload") {
		t.Fatalf("uninstall called systemctl:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(sd, "enabled")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the unit is still enabled")
	}

	// Where no systemd runs, the supervisor is used, and the output says so.
	r.eng.SystemdDir = filepath.Join(sd, "absent")
	res = r.install()
	if res.Manager != ManagerSupervisor || len(res.Notices) != 1 || !strings.Contains(res.Notices[0], "node dgx2 does not run systemd") {
		t.Fatalf("install without systemd: manager %q notices %v", res.Manager, res.Notices)
	}
	r.waitStarts(1) // the systemctl double ran no worker: this is the first start
	sup := readPID(l.PIDFile())

	// systemd again: the supervisor is stopped and removed, the unit runs.
	r.eng.SystemdDir = sd
	calls()
	res = r.install()
	if res.Manager != ManagerSystemd || res.Run != Started || len(res.Notices) != 1 || !strings.Contains(res.Notices[0], "removed the sh supervisor") {
		t.Fatalf("switch to systemd: %+v", res)
	}
	if alive(sup) {
		t.Fatalf("the supervisor (pid %d) still runs beside the systemd unit", sup)
	}
	if _, err := os.Stat(l.Supervisor()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the supervisor script is still there (%v)", err)
	}

	// --supervisor on a systemd host: the unit is disabled and removed.
	r.eng.Manager = ManagerSupervisor
	calls()
	res = r.install()
	if res.Manager != ManagerSupervisor || len(res.Notices) != 1 || !strings.Contains(res.Notices[0], "removed the systemd unit") {
		t.Fatalf("switch to the supervisor: %+v", res)
	}
	if got := calls(); !strings.Contains(got, "disable --now --quiet "+unit) || !strings.HasSuffix(got, "daemon-reload") {
		t.Fatalf("switch to the supervisor called systemctl:\n%s", got)
	}
	if _, err := os.Stat(l.Unit()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the unit is still there (%v)", err)
	}
	r.waitStarts(2)
	if _, err := r.eng.Uninstall(context.Background(), r.host); err != nil {
		t.Fatal(err)
	}
}

// An upload cut short fails
// naming the file, and leaves neither the file nor a temp file behind.
func TestCutShortUploadLeavesNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	dst := filepath.Join(r.root, "lib", "worker")
	full := []byte(strings.Repeat("sparklane worker bytes\n", 1000))
	_, err := r.eng.must(context.Background(), r.host, &facts{}, "upload the binary to "+dst, writeScript(dst, "0755", int64(len(full))), strings.NewReader(string(full[:len(full)/2])))
	if err == nil || !strings.Contains(err.Error(), "node dgx2: upload the binary to "+dst) || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("cut-short upload: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Dir(dst))
	if len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	// The whole stream goes through.
	if _, err := r.eng.must(context.Background(), r.host, &facts{}, "upload", writeScript(dst, "0755", int64(len(full))), strings.NewReader(string(full))); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != string(full) {
		t.Fatal("the uploaded file differs")
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", fi.Mode())
	}
}

// The supervisor's log lives in /run (memory): past 10 MiB it is moved
// aside when the worker (re)starts, and the new log gets the new lines.
func TestSupervisorRotatesItsLog(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	l := r.eng.Layout
	if err := os.MkdirAll(l.RunDir, 0o755); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 10<<20+1)
	if err := os.WriteFile(l.LogFile(), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	r.install()
	r.waitStarts(1)
	if b, err := os.ReadFile(l.LogFile() + ".1"); err != nil || len(b) < len(big) {
		t.Fatalf("the old log was not moved aside (%d bytes, %v)", len(b), err)
	}
	if b, _ := os.ReadFile(l.LogFile()); len(b) > 4096 || !strings.Contains(string(b), "supervise: worker started") {
		t.Fatalf("new log (%d bytes): %.200q", len(b), b)
	}
	res, err := r.eng.Uninstall(context.Background(), r.host)
	if err != nil || !contains(res.Removed, l.LogFile()+".1") {
		t.Fatalf("uninstall %+v, %v: want the rotated log removed", res, err)
	}
}

// A directory the install cannot write (immutable here, as a read-only
// /usr would be) fails naming the node, the step and that root or
// passwordless sudo is needed, as a permanent error.
func TestUnwritableInstallDirSaysWhatToDo(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	parent := filepath.Dir(r.eng.Layout.LibDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", parent).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i %s (e2fsprogs, on ext4/xfs): %v %s", parent, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", parent).Run() })
	_, err := r.eng.Install(context.Background(), r.host, r.spec())
	if err == nil {
		t.Fatal("install into an immutable directory succeeded")
	}
	msg := err.Error()
	for _, want := range []string{"node dgx2: upload the binary to " + r.eng.Layout.Binary(), "Operation not permitted", "needs root", "passwordless sudo"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if typ, _ := fault.TypeOf(err); typ != fault.AuthFailed {
		t.Errorf("fault type %q, want %s", typ, fault.AuthFailed)
	}
}

// TestRelayIdentityInstalledKeptAndRemoved: the node's relay identity
// (fleet CA certificate, relay-NODE pair) lands under STATE_DIR/pki with
// the key 0600; a second install with the same files changes nothing, a
// re-issued key restarts the worker (it reads the identity at start), and
// uninstall removes the three files but never a CA certificate whose key
// sits beside it (that directory is a CA's home).
func TestRelayIdentityInstalledKeptAndRemoved(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	l := r.eng.Layout
	paths := FleetIdentityFiles(l.StateDir, "dgx2")
	spec := func(key string) Spec {
		s := r.spec()
		s.Credentials = []File{{Path: paths[0], Mode: "0644", Data: []byte("CA CERT\n")}, {Path: paths[1], Mode: "0644", Data: []byte("RELAY CERT\n")}, {Path: paths[2], Mode: "0600", Data: []byte(key)}}
		return s
	}
	install := func(s Spec) InstallResult {
		t.Helper()
		res, err := r.eng.Install(context.Background(), r.host, s)
		if err != nil {
			t.Fatalf("install: %v", err)
		}
		return res
	}
	if res := install(spec("KEY 1\n")); res.Credentials != Written {
		t.Fatalf("first install: credentials %q, want written", res.Credentials)
	}
	r.waitStarts(1)
	for i, want := range []struct {
		data string
		mode os.FileMode
	}{{"CA CERT\n", 0o644}, {"RELAY CERT\n", 0o644}, {"KEY 1\n", 0o600}} {
		fi, err := os.Stat(paths[i])
		b, _ := os.ReadFile(paths[i])
		if err != nil || string(b) != want.data || fi.Mode().Perm() != want.mode {
			t.Fatalf("%s: %v, %q, mode %v; want %q mode %v", paths[i], err, b, fi.Mode().Perm(), want.data, want.mode)
		}
	}
	if res := install(spec("KEY 1\n")); res.Credentials != Unchanged || res.Changed() {
		t.Fatalf("second install: %+v, want nothing changed", res)
	}
	if res := install(spec("KEY 2\n")); res.Credentials != Written || res.Run != Restarted {
		t.Fatalf("install with a re-issued key: credentials %q, run %q; want written and restarted", res.Credentials, res.Run)
	}
	r.waitStarts(2)
	if b, _ := os.ReadFile(paths[2]); string(b) != "KEY 2\n" {
		t.Fatalf("key on the node %q", b)
	}
	if _, err := r.eng.Install(context.Background(), r.host, Spec{Node: "dgx2", Binary: r.double, Config: r.spec().Config, Credentials: []File{{Path: "relative/key.pem", Mode: "0600"}}}); err == nil || !strings.Contains(err.Error(), "relative/key.pem") {
		t.Fatalf("a relative credential path: %v, want refused naming it", err)
	}

	res, err := r.eng.Uninstall(context.Background(), r.host)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s left after uninstall (removed %v)", p, res.Removed)
		}
	}
	if _, err := os.Stat(pki.FleetDir(l.StateDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the emptied pki dir is left: %v", err)
	}

	// A CA's home: ca.pem with ca-key.pem beside it stays.
	home := pki.FleetDir(l.StateDir)
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		if err := os.WriteFile(filepath.Join(home, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.eng.Uninstall(context.Background(), r.host); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		if _, err := os.Stat(filepath.Join(home, f)); err != nil {
			t.Fatalf("uninstall removed the CA's own %s: %v", f, err)
		}
	}
}
