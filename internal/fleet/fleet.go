package fleet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/pki"
)

// Service managers a node service can run under.
const (
	// ManagerSystemd is a systemd unit (hosts where /run/systemd/system exists).
	ManagerSystemd = "systemd"
	// ManagerSupervisor is the sh supervisor started with setsid nohup
	// (hosts without systemd, and the test fleet).
	ManagerSupervisor = "supervisor"
)

// Per-step outcomes reported by Install, so a second run visibly changes
// nothing.
const (
	Uploaded  = "uploaded"
	Unchanged = "unchanged"
	Written   = "written"
	Installed = "installed"
	Started   = "started"
	Restarted = "restarted"
	Running   = "running"
)

// StepError is a failure on one node at one step, with what to do about it.
type StepError struct {
	// Node is the node's name; Step is what was being done (connect,
	// upload the binary to PATH, start the supervisor, …).
	Node string
	Step string
	// Err is the cause, with its fault type (HostKeyMismatch, AuthFailed…).
	Err error
	// Hint says what the operator should do (may be empty when Err says it).
	Hint string
}

// Error reads "node NAME: STEP: cause: what to do".
func (e *StepError) Error() string {
	s := fmt.Sprintf("node %s: %s: %v", e.Node, e.Step, e.Err)
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}

// Unwrap exposes the cause, so fault.TypeOf sees its permanent type.
func (e *StepError) Unwrap() error { return e.Err }

// Spec is what to install on one node.
type Spec struct {
	// Node is the node's name (its queue is node.NAME).
	Node string
	// Binary is the local path of the worker binary to put on the node.
	Binary string
	// Config is the node's sparklane.toml (NodeConfig).
	Config []byte
	// Credentials are files the node worker reads at start, such as its
	// fleet identity (the fleet CA and its relay-NODE pair under
	// STATE_DIR/pki): written only when their sha256 differs, keys 0600.
	// They travel over the SSH session's stdin, never on a command line.
	Credentials []File
}

// File is one credential file Install puts on the node.
type File struct {
	// Path is absolute on the node.
	Path string
	// Mode is the octal mode ("0600" for keys, "0644" for certificates).
	Mode string
	// Data is the content.
	Data []byte
}

// Engine installs node services with one Layout and service manager.
type Engine struct {
	// Layout says where files go on the node (DefaultLayout when zero).
	Layout Layout
	// Manager forces ManagerSystemd or ManagerSupervisor; empty picks
	// systemd when the node runs it (test -d /run/systemd/system).
	Manager string
	// StopTimeout bounds waiting for a supervisor to stop (default 30 s).
	StopTimeout time.Duration
	// Systemctl and SystemdDir are test hooks for hosts where systemd
	// cannot run (this machine, in tests): the systemctl program (default
	// "systemctl") and the directory whose presence means systemd runs
	// (default /run/systemd/system).
	Systemctl  string
	SystemdDir string
}

func (e *Engine) systemctl() string {
	if e.Systemctl == "" {
		return "systemctl"
	}
	return quote(e.Systemctl)
}

func (e *Engine) systemdDir() string {
	if e.SystemdDir == "" {
		return "/run/systemd/system"
	}
	return e.SystemdDir
}

func (e *Engine) layout() Layout {
	if e.Layout == (Layout{}) {
		return DefaultLayout()
	}
	return e.Layout
}

// InstallResult says, per step, what Install did on one node.
type InstallResult struct {
	// Node is the node's name.
	Node string `json:"node"`
	// Binary is uploaded or unchanged; Config is written or unchanged;
	// Service is installed or unchanged; Run is started, restarted or running.
	Binary  string `json:"binary"`
	Config  string `json:"config"`
	Service string `json:"service"`
	// Credentials is written, unchanged or "" (none given).
	Credentials string `json:"credentials,omitempty"`
	Run         string `json:"run"`
	// Manager is systemd or supervisor.
	Manager string `json:"manager"`
	// BuildID is the sha256 of the binary now on the node.
	BuildID string `json:"build_id"`
	// Notices are things the operator should know (no systemd on the host).
	Notices []string `json:"notices,omitempty"`
	// Took is the wall time of the install on this node; Steps splits it
	// (hash, probe, binary, config, service, run), to show what dominates.
	Took  time.Duration `json:"took"`
	Steps []StepTime    `json:"steps"`
}

// StepTime is how long one install step took.
type StepTime struct {
	// Step is hash, probe, binary, config, service or run.
	Step string `json:"step"`
	// Took is its wall time.
	Took time.Duration `json:"took"`
}

// Changed reports whether Install changed anything on the node.
func (r InstallResult) Changed() bool {
	return r.Binary != Unchanged || r.Config != Unchanged || r.Service != Unchanged || r.Credentials == Written || r.Run != Running
}

// facts is what one probe command learns about a node.
type facts struct {
	uid     int
	user    string
	arch    string
	systemd bool
	sha     map[string]string // path → sha256 ("" = absent)
}

// BuildID is the sha256 (hex) of the file at path: the worker's version as
// status compares it.
func BuildID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// run runs script on h as root: directly when the SSH user is root,
// otherwise through sudo -n.
func (e *Engine) run(ctx context.Context, h Host, f *facts, step, script string, stdin io.Reader) (Result, error) {
	cmd := "sh -c " + quote(script)
	if f != nil && f.uid != 0 {
		cmd = "sudo -n " + cmd
	}
	r, err := h.Run(ctx, cmd, stdin)
	if err != nil {
		return r, &StepError{Node: h.Name(), Step: step, Err: err, Hint: "check that the node is up and sshd answers, then run the command again"}
	}
	return r, nil
}

// must is run, with a non-zero exit turned into a StepError that quotes the
// node's stderr and says what to do.
func (e *Engine) must(ctx context.Context, h Host, f *facts, step, script string, stdin io.Reader) (Result, error) {
	r, err := e.run(ctx, h, f, step, script, stdin)
	if err != nil {
		return r, err
	}
	if r.Exit != 0 {
		return r, remoteError(h.Name(), step, f, r)
	}
	return r, nil
}

func remoteError(nodeName, step string, f *facts, r Result) error {
	msg := strings.TrimSpace(r.Stderr)
	if msg == "" {
		msg = strings.TrimSpace(r.Stdout)
	}
	err := fmt.Errorf("exit status %d: %s", r.Exit, msg)
	hint := "read the message above, fix it on the node, and run the command again"
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "a password is required") || strings.Contains(low, "sudo:"):
		u := "the SSH user"
		if f != nil && f.user != "" {
			u = "user " + f.user
		}
		hint = u + " is not root and cannot use sudo without a password: log in as root (ssh = \"root@host:port\") or give " + u + " passwordless sudo"
		return &StepError{Node: nodeName, Step: step, Err: fault.Permanent(fault.AuthFailed, err), Hint: hint}
	case strings.Contains(low, "permission denied") || strings.Contains(low, "operation not permitted") || strings.Contains(low, "read-only file system"):
		hint = "installing the node service needs root: log in as root (ssh = \"root@host:port\") or as a user with passwordless sudo, and check the target directory is writable"
		return &StepError{Node: nodeName, Step: step, Err: fault.Permanent(fault.AuthFailed, err), Hint: hint}
	case strings.Contains(low, "no space left"):
		hint = "free space on the node's / (or /usr/local) and run the command again"
	}
	return &StepError{Node: nodeName, Step: step, Err: err, Hint: hint}
}

// probe learns, in one round trip, who we are on the node, its
// architecture, whether it runs systemd, and the sha256 of each file
// install manages.
func (e *Engine) probe(ctx context.Context, h Host, extra ...string) (*facts, error) {
	l := e.layout()
	paths := append([]string{l.Binary(), l.Config(), l.Supervisor(), l.Unit()}, extra...)
	var b strings.Builder
	fmt.Fprintf(&b, `echo "uid=$(id -u)"; echo "user=$(id -un)"; echo "arch=$(uname -m)"
if test -d %s; then echo systemd=1; else echo systemd=0; fi
command -v sha256sum >/dev/null 2>&1 || echo nosha=1
`, quote(e.systemdDir()))
	for _, p := range paths {
		fmt.Fprintf(&b, "if [ -f %s ]; then echo \"sha=$(sha256sum < %s | cut -c1-64) %s\"; fi\n", quote(p), quote(p), p)
	}
	// Never sudo here: the probe only reads, and it learns whether
	// sudo is needed.
	r, err := e.run(ctx, h, nil, "probe", b.String(), nil)
	if err != nil {
		return nil, err
	}
	if r.Exit != 0 {
		return nil, remoteError(h.Name(), "probe", nil, r)
	}
	f := &facts{uid: -1, sha: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(r.Stdout))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "uid":
			f.uid, _ = strconv.Atoi(v)
		case "user":
			f.user = v
		case "arch":
			f.arch = v
		case "systemd":
			f.systemd = v == "1"
		case "nosha":
			return nil, &StepError{Node: h.Name(), Step: "probe", Err: errors.New("sha256sum is not installed on the node"), Hint: "install coreutils on the node"}
		case "sha":
			sum, p, _ := strings.Cut(v, " ")
			f.sha[p] = sum
		}
	}
	if f.uid < 0 {
		return nil, &StepError{Node: h.Name(), Step: "probe", Err: fmt.Errorf("unexpected answer %q", r.Stdout), Hint: "the node's login shell must be a POSIX shell"}
	}
	if f.uid != 0 {
		if r, err := e.run(ctx, h, nil, "privileges", "sudo -n true", nil); err != nil {
			return nil, err
		} else if r.Exit != 0 {
			return nil, &StepError{Node: h.Name(), Step: "privileges", Err: fault.Permanent(fault.AuthFailed, fmt.Errorf("user %s is not root and sudo -n failed: %s", f.user, strings.TrimSpace(r.Stderr))),
				Hint: "log in as root (ssh = \"root@host:port\") or give " + f.user + " passwordless sudo"}
		}
	}
	return f, nil
}

func (e *Engine) manager(f *facts) string {
	if e.Manager != "" {
		return e.Manager
	}
	if f.systemd {
		return ManagerSystemd
	}
	return ManagerSupervisor
}

// elfArch maps a binary's ELF machine to `uname -m` names; "" for a file
// that is not an ELF binary (a script: nothing to check).
func elfArch(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		return "x86_64"
	case elf.EM_AARCH64:
		return "aarch64"
	}
	return f.Machine.String()
}

// GoArch is the GOARCH of a node whose `uname -m` is arch ("" if unknown).
func GoArch(arch string) string {
	switch arch {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	}
	return ""
}

// Inspection is what a cheap look at a node tells (no file is hashed).
type Inspection struct {
	// Arch is the node's `uname -m`, to build a worker for it.
	Arch string `json:"arch"`
	// Installed: the worker binary is on the node.
	Installed bool `json:"installed"`
}

// Inspect looks at the node in one round trip without hashing anything:
// the full probe hashes the installed binary (about a second for a 200 MiB
// worker), which Install and Status do once each.
func (e *Engine) Inspect(ctx context.Context, h Host) (Inspection, error) {
	r, err := e.run(ctx, h, nil, "inspect", fmt.Sprintf(`uname -m; if [ -f %s ]; then echo installed; fi`, quote(e.layout().Binary())), nil)
	if err != nil {
		return Inspection{}, err
	}
	if r.Exit != 0 {
		return Inspection{}, remoteError(h.Name(), "inspect", nil, r)
	}
	lines := strings.Fields(r.Stdout)
	if len(lines) == 0 {
		return Inspection{}, &StepError{Node: h.Name(), Step: "inspect", Err: fmt.Errorf("uname -m printed nothing"), Hint: "the node's login shell must be a POSIX shell"}
	}
	return Inspection{Arch: lines[0], Installed: len(lines) > 1 && lines[1] == "installed"}, nil
}

// writeScript writes stdin to path through a temp name in the same
// directory, fsyncs it, checks its length and renames it into place, so a
// reader (or a running service) never sees a partial file. The length
// check catches a stream cut short; SSH's MAC already guards the bytes, so
// the file is not hashed again (on a 213 MiB worker a second sha256 pass
// costs more than the transfer).
func writeScript(path, mode string, size int64) string {
	return fmt.Sprintf(`set -e
dst=%[1]s
dir=$(dirname "$dst")
mkdir -p "$dir"
tmp="$dir/.$(basename "$dst").tmp.$$"
trap 'rm -f "$tmp"' EXIT
cat >"$tmp"
got=$(wc -c <"$tmp" | tr -d ' ')
if [ "$got" != %[3]d ]; then echo "the copy of $dst has $got bytes, not %[3]d: the upload was cut short; run the command again" >&2; exit 1; fi
sync "$tmp"
chmod %[2]s "$tmp"
mv -f "$tmp" "$dst"
trap - EXIT
sync "$dir" 2>/dev/null || sync
`, quote(path), mode, size)
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Install puts the node service on h: binary, config, unit or supervisor,
// started. A second Install with the same Spec changes nothing and says so.
func (e *Engine) Install(ctx context.Context, h Host, s Spec) (InstallResult, error) {
	start := time.Now()
	l := e.layout()
	res := InstallResult{Node: h.Name()}
	if err := l.check(); err != nil {
		return res, &StepError{Node: h.Name(), Step: "layout", Err: fault.Permanent(fault.InvalidSpec, err)}
	}
	mark := start
	step := func(name string) {
		now := time.Now()
		res.Steps = append(res.Steps, StepTime{Step: name, Took: now.Sub(mark)})
		mark = now
	}
	buildID, err := BuildID(s.Binary)
	if err != nil {
		return res, &StepError{Node: h.Name(), Step: "read the worker binary", Err: err, Hint: "build it (go build -o PATH ./worker) or pass --worker-binary PATH"}
	}
	step("hash")
	var credPaths []string
	for _, c := range s.Credentials {
		if !filepath.IsAbs(c.Path) || (c.Mode != "0600" && c.Mode != "0644") {
			return res, &StepError{Node: h.Name(), Step: "credentials", Err: fault.Permanent(fault.InvalidSpec, fmt.Errorf("credential file %q mode %q: want an absolute path and 0600 or 0644", c.Path, c.Mode))}
		}
		credPaths = append(credPaths, c.Path)
	}
	f, err := e.probe(ctx, h, credPaths...)
	if err != nil {
		return res, err
	}
	step("probe")
	if want := elfArch(s.Binary); want != "" && f.arch != "" && want != f.arch && !(want == "aarch64" && f.arch == "arm64") {
		return res, &StepError{Node: h.Name(), Step: "check the binary", Err: fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s is built for %s but the node is %s", s.Binary, want, f.arch)),
			Hint: fmt.Sprintf("build a worker for it (GOOS=linux GOARCH=%s CGO_ENABLED=0 go build -o worker ./worker) and pass --worker-binary", GoArch(f.arch))}
	}
	res.Manager = e.manager(f)
	if res.Manager == ManagerSupervisor && !f.systemd && e.Manager == "" {
		res.Notices = append(res.Notices, fmt.Sprintf("node %s does not run systemd (no /run/systemd/system): the worker runs under the sh supervisor %s, which restarts it when it exits but does not start at boot: run 'starter fleet install' again after a reboot", h.Name(), l.Supervisor()))
	}

	// The binary: uploaded only when its sha256 differs.
	res.Binary = Unchanged
	if f.sha[l.Binary()] != buildID {
		bf, err := os.Open(s.Binary)
		var fi os.FileInfo
		if err == nil {
			fi, err = bf.Stat()
		}
		if err != nil {
			return res, &StepError{Node: h.Name(), Step: "upload the binary", Err: err}
		}
		_, err = e.must(ctx, h, f, "upload the binary to "+l.Binary(), writeScript(l.Binary(), "0755", fi.Size()), bf)
		bf.Close()
		if err != nil {
			return res, err
		}
		res.Binary = Uploaded
	}
	res.BuildID = buildID
	step("binary")

	// The config.
	res.Config = Unchanged
	if sum := sha256hex(s.Config); f.sha[l.Config()] != sum {
		if _, err := e.must(ctx, h, f, "write the config "+l.Config(), writeScript(l.Config(), "0644", int64(len(s.Config))), bytes.NewReader(s.Config)); err != nil {
			return res, err
		}
		res.Config = Written
	}
	step("config")

	// Credentials (the worker reads them at start, so a change restarts it).
	if len(s.Credentials) > 0 {
		res.Credentials = Unchanged
		for _, c := range s.Credentials {
			if f.sha[c.Path] == sha256hex(c.Data) {
				continue
			}
			if _, err := e.must(ctx, h, f, "write the credential "+c.Path, writeScript(c.Path, c.Mode, int64(len(c.Data))), bytes.NewReader(c.Data)); err != nil {
				return res, err
			}
			res.Credentials = Written
		}
	}
	step("credentials")

	// The service definition.
	res.Service = Unchanged
	svcPath, svc, mode := l.Supervisor(), l.supervisorScript(s.Node), "0755"
	if res.Manager == ManagerSystemd {
		svcPath, svc, mode = l.Unit(), l.unitFile(s.Node), "0644"
	}
	if sum := sha256hex([]byte(svc)); f.sha[svcPath] != sum {
		if _, err := e.must(ctx, h, f, "write "+svcPath, writeScript(svcPath, mode, int64(len(svc))), strings.NewReader(svc)); err != nil {
			return res, err
		}
		res.Service = Installed
	}
	step("service")
	changed := res.Binary != Unchanged || res.Config != Unchanged || res.Service != Unchanged || res.Credentials == Written

	// The other manager's service, left by an install under the other
	// choice (--supervisor given or dropped), would run a second worker.
	if replaced, err := e.removeOtherManager(ctx, h, f, res.Manager); err != nil {
		return res, err
	} else if replaced != "" {
		res.Notices = append(res.Notices, fmt.Sprintf("node %s: removed %s, which an earlier install set up; the worker now runs under %s", h.Name(), replaced, res.Manager))
		changed = true
	}

	// Running it.
	if res.Manager == ManagerSystemd {
		res.Run, err = e.startSystemd(ctx, h, f, changed, res.Service != Unchanged)
	} else {
		res.Run, err = e.startSupervisor(ctx, h, f, changed)
	}
	step("run")
	res.Took = time.Since(start)
	return res, err
}

// removeOtherManager stops and removes the service of the manager not in
// use (the supervisor when systemd runs the worker, and the reverse),
// returning what it removed ("" when none was there).
func (e *Engine) removeOtherManager(ctx context.Context, h Host, f *facts, using string) (string, error) {
	l := e.layout()
	switch {
	case using == ManagerSystemd && f.sha[l.Supervisor()] != "":
		if err := e.stopSupervisor(ctx, h, f); err != nil {
			return "", err
		}
		_, err := e.must(ctx, h, f, "remove the supervisor "+l.Supervisor(), "rm -f "+quote(l.Supervisor()), nil)
		return "the sh supervisor " + l.Supervisor(), err
	case using == ManagerSupervisor && f.sha[l.Unit()] != "":
		script := "rm -f " + quote(l.Unit())
		if f.systemd {
			script = e.systemctl() + " disable --now --quiet " + UnitName + " && " + script + " && " + e.systemctl() + " daemon-reload"
		}
		_, err := e.must(ctx, h, f, "remove the systemd unit "+l.Unit(), script, nil)
		return "the systemd unit " + l.Unit(), err
	}
	return "", nil
}

func (e *Engine) startSystemd(ctx context.Context, h Host, f *facts, changed, unitChanged bool) (string, error) {
	if unitChanged {
		if _, err := e.must(ctx, h, f, "systemctl daemon-reload", e.systemctl()+" daemon-reload", nil); err != nil {
			return "", err
		}
	}
	if _, err := e.must(ctx, h, f, "systemctl enable "+UnitName, e.systemctl()+" enable --quiet "+UnitName, nil); err != nil {
		return "", err
	}
	r, err := e.run(ctx, h, f, "systemctl is-active", e.systemctl()+" is-active --quiet "+UnitName, nil)
	if err != nil {
		return "", err
	}
	switch {
	case r.Exit == 0 && !changed:
		return Running, nil
	case r.Exit == 0:
		_, err = e.must(ctx, h, f, "systemctl restart "+UnitName, e.systemctl()+" restart "+UnitName, nil)
		return Restarted, withJournal(err)
	}
	_, err = e.must(ctx, h, f, "systemctl start "+UnitName, e.systemctl()+" reset-failed "+UnitName+" 2>/dev/null; "+e.systemctl()+" start "+UnitName, nil)
	return Started, withJournal(err)
}

func withJournal(err error) error {
	var se *StepError
	if errors.As(err, &se) {
		se.Hint = "see why with: journalctl -u " + UnitName + " -n 50"
	}
	return err
}

// supervisorRunning is a script that exits 0 when the supervisor runs.
func (l Layout) supervisorRunning() string {
	return fmt.Sprintf(`[ -f %s ] && kill -0 "$(cat %s)" 2>/dev/null`, quote(l.PIDFile()), quote(l.PIDFile()))
}

func (e *Engine) startSupervisor(ctx context.Context, h Host, f *facts, changed bool) (string, error) {
	l := e.layout()
	r, err := e.run(ctx, h, f, "is the supervisor running", l.supervisorRunning(), nil)
	if err != nil {
		return "", err
	}
	state := Started
	if r.Exit == 0 {
		if !changed {
			return Running, nil
		}
		if err := e.stopSupervisor(ctx, h, f); err != nil {
			return "", err
		}
		state = Restarted
	}
	// setsid detaches it from the SSH session (no SIGHUP when it closes);
	// every descriptor goes to a file so the session can end.
	script := fmt.Sprintf(`set -e
mkdir -p %[1]s
rm -f %[2]s
setsid nohup /bin/sh %[3]s </dev/null >>%[4]s 2>&1 &
i=0
until [ -f %[5]s ] && [ -f %[6]s ]; do
	i=$((i+1))
	if [ $i -gt 100 ]; then echo "the supervisor did not start within 10 s; its log %[4]s says: $(tail -n 5 %[4]s)" >&2; exit 1; fi
	sleep 0.1
done
`, quote(l.RunDir), quote(l.StopFile()), quote(l.Supervisor()), quote(l.LogFile()), quote(l.PIDFile()), quote(l.WorkerPIDFile()))
	if _, err := e.must(ctx, h, f, "start the supervisor", script, nil); err != nil {
		return "", err
	}
	return state, nil
}

// stopSupervisor writes the stop file, sends the supervisor SIGTERM (it
// passes SIGTERM to the worker and waits for it) and waits until it is gone.
func (e *Engine) stopSupervisor(ctx context.Context, h Host, f *facts) error {
	l := e.layout()
	timeout := e.StopTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	script := fmt.Sprintf(`mkdir -p %[1]s
touch %[2]s
if [ -f %[3]s ]; then
	pid=$(cat %[3]s)
	kill -TERM "$pid" 2>/dev/null || true
	i=0
	while kill -0 "$pid" 2>/dev/null; do
		i=$((i+1))
		if [ $i -gt %[4]d ]; then echo "the supervisor (pid $pid) did not stop within %[5]s after SIGTERM" >&2; exit 1; fi
		sleep 0.1
	done
fi
rm -f %[2]s %[3]s %[6]s
`, quote(l.RunDir), quote(l.StopFile()), quote(l.PIDFile()), int(timeout/(100*time.Millisecond)), timeout, quote(l.WorkerPIDFile()))
	_, err := e.must(ctx, h, f, "stop the supervisor", script, nil)
	var se *StepError
	if errors.As(err, &se) {
		se.Hint = fmt.Sprintf("stop it by hand (kill the pid in %s and the worker in %s) and run the command again", l.PIDFile(), l.WorkerPIDFile())
	}
	return err
}

// Restart restarts the node service (the worker process) without changing
// its files: used by upgrade when only the binary changed elsewhere, and by
// operators.
func (e *Engine) Restart(ctx context.Context, h Host) error {
	f, err := e.probe(ctx, h)
	if err != nil {
		return err
	}
	if e.manager(f) == ManagerSystemd {
		_, err := e.must(ctx, h, f, "systemctl restart "+UnitName, e.systemctl()+" restart "+UnitName, nil)
		return withJournal(err)
	}
	_, err = e.startSupervisor(ctx, h, f, true)
	return err
}

// NodeStatus is what the node says about its service.
type NodeStatus struct {
	// Node is the node's name.
	Node string `json:"node"`
	// Installed: the binary is on the node.
	Installed bool `json:"installed"`
	// Manager is systemd or supervisor (empty: no service installed).
	Manager string `json:"manager,omitempty"`
	// State is active, inactive, failed, … (systemd's words; the
	// supervisor's running worker is active).
	State string `json:"state"`
	// WorkerPID is the worker's process id (0: not running).
	WorkerPID int `json:"worker_pid,omitempty"`
	// Since is when the running worker started (node clock).
	Since time.Time `json:"since,omitempty"`
	// BuildID is the sha256 of the worker binary on the node.
	BuildID string `json:"build_id,omitempty"`
}

// Status asks h about its node service.
func (e *Engine) Status(ctx context.Context, h Host) (NodeStatus, error) {
	l := e.layout()
	st := NodeStatus{Node: h.Name(), State: "not installed"}
	f, err := e.probe(ctx, h)
	if err != nil {
		return st, err
	}
	st.BuildID = f.sha[l.Binary()]
	st.Installed = st.BuildID != ""
	switch {
	case f.sha[l.Unit()] != "" && f.systemd && e.Manager != ManagerSupervisor:
		st.Manager = ManagerSystemd
	case f.sha[l.Supervisor()] != "":
		st.Manager = ManagerSupervisor
	default:
		return st, nil
	}
	var script string
	if st.Manager == ManagerSystemd {
		script = fmt.Sprintf(`echo "state=$(%[1]s is-active %[2]s)"; echo "pid=$(%[1]s show -p MainPID --value %[2]s)"`, e.systemctl(), UnitName)
	} else {
		script = fmt.Sprintf(`if %s; then echo state=active; [ -f %s ] && echo "pid=$(cat %s)"; else echo state=inactive; fi`,
			l.supervisorRunning(), quote(l.WorkerPIDFile()), quote(l.WorkerPIDFile()))
	}
	r, err := e.run(ctx, h, f, "service state", script, nil)
	if err != nil {
		return st, err
	}
	st.State = "unknown"
	sc := bufio.NewScanner(strings.NewReader(r.Stdout))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "state":
			st.State = strings.TrimSpace(v)
		case "pid":
			st.WorkerPID, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if st.WorkerPID > 0 && st.State == "active" {
		// Seconds since the worker started, in the node's own clock.
		r, err := e.run(ctx, h, f, "worker start time", fmt.Sprintf(`t=$(ps -o etimes= -p %d 2>/dev/null | tr -d ' '); [ -n "$t" ] && echo $(( $(date +%%s) - t ))`, st.WorkerPID), nil)
		if err == nil && r.Exit == 0 {
			if sec, err := strconv.ParseInt(strings.TrimSpace(r.Stdout), 10, 64); err == nil {
				st.Since = time.Unix(sec, 0).UTC()
			}
		}
	} else {
		st.WorkerPID = 0
	}
	return st, nil
}

// UninstallResult lists what Uninstall removed.
type UninstallResult struct {
	// Node is the node's name.
	Node string `json:"node"`
	// Stopped says a running service was stopped.
	Stopped bool `json:"stopped"`
	// Removed are the paths removed (none: nothing was installed).
	Removed []string `json:"removed"`
}

// Uninstall stops the node service and removes what Install added — the
// unit or supervisor, the binary, the config, the supervisor's run files —
// and the directories it created when they are left empty, and the relay
// identity it put under STATE_DIR/pki. Staged data and the rest of
// state_dir are never touched.
func (e *Engine) Uninstall(ctx context.Context, h Host) (UninstallResult, error) {
	l := e.layout()
	res := UninstallResult{Node: h.Name()}
	if err := l.check(); err != nil {
		return res, &StepError{Node: h.Name(), Step: "layout", Err: fault.Permanent(fault.InvalidSpec, err)}
	}
	f, err := e.probe(ctx, h)
	if err != nil {
		return res, err
	}
	if f.sha[l.Unit()] != "" && f.systemd {
		r, err := e.run(ctx, h, f, "systemctl is-active", e.systemctl()+" is-active --quiet "+UnitName, nil)
		if err != nil {
			return res, err
		}
		if _, err := e.must(ctx, h, f, "systemctl disable --now "+UnitName, e.systemctl()+" disable --now --quiet "+UnitName, nil); err != nil {
			return res, err
		}
		res.Stopped = r.Exit == 0
	}
	if r, err := e.run(ctx, h, f, "is the supervisor running", l.supervisorRunning(), nil); err != nil {
		return res, err
	} else if r.Exit == 0 {
		if err := e.stopSupervisor(ctx, h, f); err != nil {
			return res, err
		}
		res.Stopped = true
	}
	files := []string{l.Unit(), l.Supervisor(), l.Binary(), l.Config(), l.PIDFile(), l.WorkerPIDFile(), l.StopFile(), l.LogFile(), l.LogFile() + ".1"}
	var b strings.Builder
	for _, p := range files {
		fmt.Fprintf(&b, "if [ -e %s ] || [ -L %s ]; then rm -f %s && echo %s; fi\n", quote(p), quote(p), quote(p), quote(p))
	}
	// The fleet identity Install put under STATE_DIR/pki. ca.pem goes only
	// where no CA key sits beside it: that directory is a CA's home (the
	// control host's own state_dir), not a copy Install made.
	pkiDir := pki.FleetDir(l.StateDir)
	for _, p := range FleetIdentityFiles(l.StateDir, h.Name())[1:] {
		fmt.Fprintf(&b, "if [ -e %s ] || [ -L %s ]; then rm -f %s && echo %s; fi\n", quote(p), quote(p), quote(p), quote(p))
	}
	ca, caKey := filepath.Join(pkiDir, "ca.pem"), filepath.Join(pkiDir, "ca-key.pem")
	fmt.Fprintf(&b, "if [ -f %s ] && [ ! -e %s ]; then rm -f %s && echo %s; fi\n", quote(ca), quote(caKey), quote(ca), quote(ca))
	fmt.Fprintf(&b, "rmdir %s 2>/dev/null && echo %s/ || true\n", quote(pkiDir), quote(pkiDir))
	for _, d := range []string{l.LibDir, l.ConfDir, l.RunDir} {
		fmt.Fprintf(&b, "rmdir %s 2>/dev/null && echo %s/ || true\n", quote(d), quote(d))
	}
	if f.sha[l.Unit()] != "" && f.systemd {
		b.WriteString(e.systemctl() + " daemon-reload\n")
	}
	r, err := e.must(ctx, h, f, "remove the files", b.String(), nil)
	if err != nil {
		return res, err
	}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if line != "" {
			res.Removed = append(res.Removed, line)
		}
	}
	return res, nil
}

// FleetIdentityFiles are the node's fleet identity paths under its
// state_dir: the fleet CA's certificate, then its relay-NODE pair (as the
// node worker loads them for the staging relay and image transfers).
func FleetIdentityFiles(stateDir, node string) []string {
	d := pki.FleetDir(stateDir)
	f := pki.FleetIdentity(d, node)
	return []string{pki.CAFile(d), f.Cert, f.Key}
}

// Poller is one worker polling a node's queue, as the Temporal server sees it.
type Poller struct {
	// Identity is the worker's identity (pid@host by default): a
	// restarted worker has a new one.
	Identity string `json:"identity"`
	// LastAccess is the server's time of its latest poll.
	LastAccess time.Time `json:"last_access"`
}

// PollerSource lists the pollers of node NAME's queue (the CLI asks the
// Temporal server with DescribeTaskQueue on node.NAME).
type PollerSource func(ctx context.Context, nodeName string) ([]Poller, error)

// WaitPoller polls src every interval until a poller of node nodeName
// satisfies fresh, or bound passes; the error names the node and where to
// look.
func WaitPoller(ctx context.Context, src PollerSource, nodeName string, fresh func(Poller) bool, bound, interval time.Duration) (Poller, error) {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	deadline := time.Now().Add(bound)
	var lastErr error
	for {
		ps, err := src(ctx, nodeName)
		lastErr = err
		for _, p := range ps {
			if fresh(p) {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			msg := fmt.Errorf("no new worker polls node.%s after %s", nodeName, bound)
			if lastErr != nil {
				msg = fmt.Errorf("%w (last error: %v)", msg, lastErr)
			}
			return Poller{}, &StepError{Node: nodeName, Step: "wait for the worker to poll", Err: msg,
				Hint: "check 'starter fleet status' and the worker's log on the node (journalctl -u " + UnitName + ", or " + DefaultLayout().LogFile() + " under the supervisor); the control service must run so its SSH tunnel reaches the node"}
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return Poller{}, &StepError{Node: nodeName, Step: "wait for the worker to poll", Err: ctx.Err()}
		case <-t.C:
		}
	}
}

// NewPoller is a fresh-test for WaitPoller: a poller none of before had
// (a worker started after before was taken), or — when wantAny — any poller
// seen within the last 90 s (a worker already running, left alone).
func NewPoller(before []Poller, wantAny bool, now func() time.Time) func(Poller) bool {
	old := map[string]bool{}
	for _, p := range before {
		old[p.Identity] = true
	}
	return func(p Poller) bool {
		if wantAny {
			return now().Sub(p.LastAccess) < 90*time.Second
		}
		return !old[p.Identity]
	}
}
