package control

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// File names under state_dir.
const (
	// LockFile is held (flock) by the running control service and holds
	// its Owner as JSON.
	LockFile = "control.lock"
	// LogFile receives a background control service's output.
	LogFile = "control.log"
)

// LoopbackIP is the only address the embedded Temporal server binds (it
// has no authentication, so it must never be reachable from the network),
// and so where clients on this machine look for it.
const LoopbackIP = "127.0.0.1"

// Owner describes the process holding a state_dir's control lock.
type Owner struct {
	PID int `json:"pid"`
	// Command is how the owner was started (argv joined), so an operator
	// knows what to stop.
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
	// Frontend is the Temporal frontend address; empty while starting.
	Frontend string `json:"frontend,omitempty"`
	// UI is the web UI base URL, when it runs one.
	UI string `json:"ui,omitempty"`
	// Metrics is the host:port serving the service's Prometheus metrics
	// (/metrics), when it serves them: what a scrape config targets.
	Metrics string `json:"metrics,omitempty"`
	// Listen is where a gateway answers clients (its lock only).
	Listen string `json:"listen,omitempty"`
	// Config is the fleet config file the service loaded, ConfigHash its
	// sha256 then: a starter whose config differs warns that the service
	// runs an older one.
	Config     string `json:"config,omitempty"`
	ConfigHash string `json:"config_hash,omitempty"`
	// Version is the owner's sparklane version.
	Version string `json:"version,omitempty"`
	// Nodes are the local nodes whose workers the service runs.
	Nodes []string `json:"nodes,omitempty"`
}

func (o Owner) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d", o.PID)
	if o.Command != "" {
		fmt.Fprintf(&b, " (%s)", o.Command)
	}
	if !o.Since.IsZero() {
		fmt.Fprintf(&b, ", since %s", o.Since.Format(time.RFC3339))
	}
	if o.Frontend != "" {
		fmt.Fprintf(&b, ", Temporal frontend %s", o.Frontend)
	} else {
		b.WriteString(", still starting (no frontend published yet)")
	}
	return b.String()
}

// HeldError says a state_dir's control lock is held by another process.
type HeldError struct {
	Path  string
	Owner Owner
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is held by a running control service: %s; starter uses it by itself — to replace it, stop it first with 'starter control stop'", e.Path, e.Owner.describe())
}

// Lock is a held control lock.
type Lock struct {
	f     *os.File
	owner Owner
}

// LockPath is state_dir/control.lock.
func LockPath(stateDir string) string { return filepath.Join(stateDir, LockFile) }

// LogPath is state_dir/control.log.
func LogPath(stateDir string) string { return filepath.Join(stateDir, LogFile) }

// TryLock opens path (creating it) and takes an exclusive flock on it
// without waiting: the lock lives as long as the returned file stays open.
// When another process holds it, held (when set) reads what the holder
// published in the file before it is closed, and the error wraps
// syscall.EWOULDBLOCK. Errors name the path ("open PATH: …", "lock PATH: …").
func TryLock(path string, held func(*os.File)) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if held != nil {
			held(f)
		}
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// Acquire takes stateDir's control lock for this process and publishes o.
// When another process holds it, the error is a *HeldError naming it.
func Acquire(stateDir string, o Owner) (*Lock, error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("create state_dir %s: %w", stateDir, err)
	}
	return AcquireFile(LockPath(stateDir), o)
}

// AcquireFile takes the lock at path (a control service's, a gateway's)
// for this process and publishes o; a *HeldError names its holder.
func AcquireFile(path string, o Owner) (*Lock, error) {
	var held Owner
	f, err := TryLock(path, func(f *os.File) { held = readOwner(f) })
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, &HeldError{Path: path, Owner: held}
	}
	if err != nil {
		return nil, err
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	if o.Since.IsZero() {
		o.Since = time.Now().UTC().Truncate(time.Second)
	}
	if o.Command == "" {
		o.Command = strings.Join(os.Args, " ")
	}
	l := &Lock{f: f}
	if err := l.Publish(o); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// Publish rewrites the owner record (e.g. once the frontend listens).
func (l *Lock) Publish(o Owner) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	l.owner = o
	return l.f.Sync()
}

// Owner is what the lock publishes now.
func (l *Lock) Owner() Owner { return l.owner }

// Release clears the owner record and drops the lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close()
	l.f = nil
	return err
}

func readOwner(f *os.File) Owner {
	buf := make([]byte, 64<<10)
	n, _ := f.ReadAt(buf, 0)
	var o Owner
	_ = json.Unmarshal(bytes.TrimSpace(buf[:n]), &o)
	return o
}

// Find reports the control service holding stateDir, if one runs.
func Find(stateDir string) (Owner, bool) { return FindFile(LockPath(stateDir)) }

// FindFile reports the process holding the lock at path, if one runs.
func FindFile(path string) (Owner, bool) {
	f, err := os.Open(path)
	if err != nil {
		return Owner{}, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return Owner{}, false
	}
	return readOwner(f), true
}

// StartOptions say how to start a control service in the background.
type StartOptions struct {
	// Exe and Args are the service's command line (`worker dev --config
	// FILE`).
	Exe  string
	Args []string
	// Resolve, when Exe is empty, finds the program: it is called only
	// when no service runs (finding it may mean building it).
	Resolve func() (string, error)
	// Env is the service's environment (default: this process's).
	Env []string
	// StateDir is the service's state_dir (its lock and log live there).
	StateDir string
	// Wait bounds how long Start waits for the frontend (default 2m: the
	// first start creates the SQLite schema).
	Wait time.Duration
}

// Start returns the running control service of o.StateDir, starting one
// in the background first when none runs. Two starters racing here start
// at most one service between them: the loser's child finds the lock held
// and exits, and both return the winner.
func Start(ctx context.Context, o StartOptions) (owner Owner, started bool, err error) {
	if owner, ok := ready(o.StateDir); ok {
		return owner, false, nil
	}
	if o.Exe == "" && o.Resolve != nil {
		exe, err := o.Resolve()
		if err != nil {
			return Owner{}, false, err
		}
		o.Exe = exe
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return Owner{}, false, fmt.Errorf("create state_dir %s: %w", o.StateDir, err)
	}
	logPath := LogPath(o.StateDir)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return Owner{}, false, fmt.Errorf("open %s: %w", logPath, err)
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, 2)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return Owner{}, false, err
	}
	defer devnull.Close()
	cmd := exec.Command(o.Exe, o.Args...)
	cmd.Env = o.Env
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	// Its own session: a Ctrl-C or SIGHUP aimed at the starter's terminal
	// never reaches the service.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return Owner{}, false, fmt.Errorf("start the control service (%s): %w", o.Exe, err)
	}
	exited := make(chan error, 1)
	child := &startedChild{done: make(chan struct{})}
	children.Store(cmd.Process.Pid, child)
	go func() {
		err := cmd.Wait()
		child.err = err
		close(child.done)
		exited <- err
	}()
	wait := o.Wait
	if wait <= 0 {
		wait = 2 * time.Minute
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	childDone := false
	var childErr error
	for {
		if owner, ok := ready(o.StateDir); ok {
			return owner, owner.PID == cmd.Process.Pid, nil
		}
		if childDone {
			// Our child lost a race to another service that is still
			// starting: wait for that one.
			if held, ok := Find(o.StateDir); ok && held.PID != cmd.Process.Pid {
				childDone = false
				exited = nil
			} else {
				return Owner{}, false, fmt.Errorf("the control service exited while starting (%v); its log %s ends with:\n%s", childErr, logPath, tailFrom(logPath, logStart, 20))
			}
		}
		select {
		case childErr = <-exited:
			childDone = true
		case <-tick.C:
		case <-deadline.C:
			return Owner{}, false, fmt.Errorf("the control service (pid %d) did not publish a Temporal frontend within %s; see %s", cmd.Process.Pid, wait, logPath)
		case <-ctx.Done():
			return Owner{}, false, ctx.Err()
		}
	}
}

// startedChild is a control service this process started (Start): its
// exit, once it has ended, for a starter that watched it die.
type startedChild struct {
	done chan struct{}
	err  error
}

// children are the control services this process started, by pid.
var children sync.Map

// ExitStatus says how the control service pid ended ("exit status 2",
// "signal: killed"), when this process started it: only its parent can
// know. It waits up to wait for the exit to be collected (the lock is
// freed as the process dies, a moment before its parent reaps it); false
// when this process did not start pid, or it has not ended by then.
func ExitStatus(pid int, wait time.Duration) (string, bool) {
	v, ok := children.Load(pid)
	if !ok {
		return "", false
	}
	c := v.(*startedChild)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		return "", false
	}
	if c.err == nil {
		return "exit status 0", true
	}
	return c.err.Error(), true
}

// LogTail is the last n lines of stateDir's control.log, indented: what a
// starter shows when the service died under it.
func LogTail(stateDir string, n int) string {
	return tailFrom(LogPath(stateDir), 0, n)
}

// ready is the running service of stateDir once its frontend accepts
// connections.
func ready(stateDir string) (Owner, bool) {
	owner, ok := Find(stateDir)
	if !ok || owner.Frontend == "" {
		return Owner{}, false
	}
	c, err := net.DialTimeout("tcp", owner.Frontend, time.Second)
	if err != nil {
		return Owner{}, false
	}
	c.Close()
	return owner, true
}

// Stop asks stateDir's control service to stop (SIGTERM: it lets its
// workers finish their current calls) and waits until its lock is free;
// past timeout it is killed. It reports the owner it stopped, and false
// when none ran.
func Stop(ctx context.Context, stateDir string, timeout time.Duration) (Owner, bool, error) {
	return StopFile(ctx, LockPath(stateDir), timeout)
}

// StopFile stops the process holding the lock at path (a control
// service's, a gateway's) as Stop does.
func StopFile(ctx context.Context, path string, timeout time.Duration) (Owner, bool, error) {
	owner, ok := FindFile(path)
	if !ok {
		return Owner{}, false, nil
	}
	if owner.PID <= 0 {
		return owner, true, fmt.Errorf("%s is held but names no pid; stop the process holding it by hand (fuser %s)", path, path)
	}
	p, err := os.FindProcess(owner.PID)
	if err != nil {
		return owner, true, err
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return owner, true, fmt.Errorf("signal pid %d (%s): %w", owner.PID, path, err)
	}
	deadline := time.Now().Add(timeout)
	killed := false
	for {
		if _, held := FindFile(path); !held {
			return owner, true, nil
		}
		if !killed && time.Now().After(deadline) {
			_ = p.Signal(syscall.SIGKILL)
			killed = true
			// A process in uninterruptible I/O (an fsync behind a busy
			// disk) dies only when that I/O returns; its lock is freed
			// then, not sooner.
			deadline = time.Now().Add(killWait)
		} else if killed && time.Now().After(deadline) {
			return owner, true, fmt.Errorf("pid %d still holds %s after SIGKILL", owner.PID, path)
		}
		select {
		case <-ctx.Done():
			return owner, true, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// killWait is how long Stop waits for a killed service's lock to be freed.
const killWait = 30 * time.Second

// HashFile is the hex sha256 of a file's content ("" when unreadable).
func HashFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// tailFrom returns the last n lines written to path after offset.
func tailFrom(path string, offset int64, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if offset > 0 && offset <= int64(len(b)) {
		b = b[offset:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// Unit is the systemd unit of the control service on the control
// host: it restarts on failure, and its runs survive restarts because they
// live in the SQLite file under state_dir. With gatewayUnits the gateways
// run as their own units (GatewayUnit) and the service does not start them.
func Unit(worker, config string, gatewayUnits bool) string {
	exec := fmt.Sprintf("ExecStart=%s dev --config %s", worker, config)
	if gatewayUnits {
		exec += " --gateways=units"
	}
	return SystemdUnit(`# Written by 'starter control install': sparklane's control service
# (embedded Temporal server + web UI, control worker, this host's node workers,
# reverse SSH tunnels to remote nodes).`, "sparklane control service", exec)
}

// SystemdUnit is the systemd unit every sparklane service is installed
// with (the control service here, node services by internal/fleet):
// header's comment lines, then service's [Service] lines followed by the
// shared policy: restarted 2 s after a failure, stopped with SIGTERM (so
// a running activity heartbeats its last chunk) within 60 s.
func SystemdUnit(header, description string, service ...string) string {
	return header + `
[Unit]
Description=` + description + `
After=network-online.target docker.service
Wants=network-online.target

[Service]
` + strings.Join(service, "\n") + `
Restart=on-failure
RestartSec=2
KillSignal=SIGTERM
TimeoutStopSec=60

[Install]
WantedBy=multi-user.target
`
}

// GatewayLockPath is where gateway name's process holds its lock and
// publishes its Owner: STATE_DIR/gateway/NAME.lock ("default" for the
// one [gateway]).
func GatewayLockPath(stateDir, name string) string {
	return filepath.Join(stateDir, "gateway", nonEmptyName(name)+".lock")
}

// GatewayLogPath is where a gateway the control service started logs.
func GatewayLogPath(stateDir, name string) string {
	return filepath.Join(stateDir, "gateway", nonEmptyName(name)+".log")
}

func nonEmptyName(name string) string {
	if name == "" {
		return "default"
	}
	return name
}

// Spawn starts exe args in the background in its own session (a Ctrl-C
// or the parent's death does not reach it), appending its output to
// logPath, and reaps it when it ends. It returns the child's pid.
func Spawn(exe string, args []string, logPath string) (int, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return 0, err
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", logPath, err)
	}
	defer logf.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", exe, err)
	}
	go func() { _ = cmd.Wait() }()
	return cmd.Process.Pid, nil
}

// GatewayUnit is the systemd unit of gateway name (control install): its
// own process beside the control service's, restarted when it dies.
func GatewayUnit(worker, config, name string) string {
	args := fmt.Sprintf("ExecStart=%s gateway --config %s", worker, config)
	if name != "" {
		args += " --name " + name
	}
	return SystemdUnit(`# Written by 'starter control install': a sparklane gateway, the lanes' one
# client-facing address (its own process: a restart of the control service
# leaves it serving from its table).`, "sparklane gateway "+nonEmptyName(name), args, "ExecReload=/bin/kill -HUP $MAINPID")
}

// GatewayUnitName is the systemd unit name of gateway name.
func GatewayUnitName(name string) string {
	if name == "" {
		return "sparklane-gateway.service"
	}
	return "sparklane-gateway-" + name + ".service"
}
