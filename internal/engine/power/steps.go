package power

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/node"
)

// Target is one powered thing (a node or a device) as plain data, so it can
// travel in workflow inputs: names and addresses only, never a token.
type Target struct {
	// Name is the node or device name errors and results use.
	Name string `json:"name"`
	// Kind is "node" or "device".
	Kind string `json:"kind"`
	// SSH is user@host:port for the graceful SSH path and the reachability
	// check; KnownHosts and Identity are what the SSH dialer uses.
	SSH        string       `json:"ssh,omitempty"`
	KnownHosts string       `json:"known_hosts,omitempty"`
	Identity   string       `json:"identity,omitempty"`
	Power      config.Power `json:"power"`
}

// NodeTarget is the Target for a configured node.
func NodeTarget(n config.Node) Target {
	return Target{Name: n.Name, Kind: "node", SSH: n.SSH, KnownHosts: n.KnownHosts, Identity: n.Identity, Power: n.Power}
}

// DeviceTarget is the Target for a configured [[devices]] entry.
func DeviceTarget(d config.Device) Target {
	return Target{Name: d.Name, Kind: "device", SSH: d.SSH, KnownHosts: d.KnownHosts, Identity: d.Identity, Power: d.Power}
}

func (t Target) label() string {
	k := t.Kind
	if k == "" {
		k = "device"
	}
	return k + " " + t.Name
}

// Engine holds what the power steps need from the outside world. The
// integrator builds one per worker and wraps each step method as an
// activity; tests build one around the doubles.
type Engine struct {
	// HTTP is used for Home Assistant; nil means a 15 s-timeout client.
	HTTP *http.Client
	// Getenv reads token_env / password_env; nil means os.Getenv.
	Getenv func(string) string
	// DialShell opens a host-key checked shell on t; nil means
	// DialNodeShell (node.Dial). Used only for "ssh:" shutdowns.
	DialShell func(ctx context.Context, t Target) (Shell, error)
	// DialTCP dials the RouterOS API; nil means a net.Dialer.
	DialTCP func(ctx context.Context, network, addr string) (net.Conn, error)
	// Reachable returns nil when t answers. It replaces both default
	// probes: for WaitReachable an authenticated, host-key checked SSH
	// session (node.Check; a TCP connect to the RouterOS API for devices
	// without ssh), for WaitUnreachable AliveProbe (any answer from the
	// host's kernel, even a refused connection, counts as still up).
	Reachable func(ctx context.Context, t Target) error
	// Polling returns nil when t's node worker polls its task queue; the
	// integrator supplies it (DescribeTaskQueue). nil means not checked.
	Polling func(ctx context.Context, t Target) error
}

func (e *Engine) getenv(k string) string {
	if e.Getenv != nil {
		return e.Getenv(k)
	}
	return os.Getenv(k)
}

func (e *Engine) ha(t Target) (*HA, error) {
	tok, err := loadToken(t.Power, e.getenv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.label(), err)
	}
	if t.Power.HAURL == "" {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: power.relay %s is set but power.ha_url is empty: set the Home Assistant base URL", t.label(), t.Power.Relay))
	}
	return NewHA(t.Power.HAURL, tok, e.HTTP), nil
}

// ShutdownInput asks for the graceful shutdown of Target.
type ShutdownInput struct {
	Target Target `json:"target"`
	// Timeout bounds the SSH command or RouterOS call (default 60 s). A
	// command still hanging at the timeout is counted as dropped: a machine
	// going down often stops answering without closing the connection, and
	// the next step (WaitUnreachable) checks the outcome anyway.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// ShutdownResult says what was done.
type ShutdownResult struct {
	Device string `json:"device"`
	// Method is "ssh", "routeros" or "" when nothing is configured.
	Method string `json:"method"`
	// Skipped is true when the target has no graceful shutdown (a dumb
	// switch): the relay alone powers it off.
	Skipped bool `json:"skipped,omitempty"`
	// Dropped is true when the connection went away mid-command — the
	// normal outcome of a poweroff, counted as success.
	Dropped bool   `json:"dropped,omitempty"`
	Output  string `json:"output,omitempty"`
}

// Shutdown is the graceful-shutdown step: "ssh:COMMAND" over a host-key
// checked SSH session, or "routeros:..." through the RouterOS API
// (/system/shutdown). The session dropping mid-command counts as success.
func (e *Engine) Shutdown(ctx context.Context, in ShutdownInput) (ShutdownResult, error) {
	t := in.Target
	res := ShutdownResult{Device: t.Name}
	spec, err := ParseShutdown(t.Power.Shutdown, t.SSH != "")
	if err != nil {
		return res, fmt.Errorf("%s: %w", t.label(), err)
	}
	res.Method = spec.Method
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	switch spec.Method {
	case "":
		res.Skipped = true
		return res, nil
	case "ssh":
		if t.SSH == "" {
			return res, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: power.shutdown is ssh but ssh (user@host:port) is not set", t.label()))
		}
		dialShell := e.DialShell
		if dialShell == nil {
			dialShell = DialNodeShell
		}
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		sh, err := dialShell(sctx, t)
		if err != nil {
			return res, fmt.Errorf("%s: graceful shutdown: dial %s: %w", t.label(), t.SSH, err)
		}
		if c, ok := sh.(interface{ Close() error }); ok {
			defer c.Close()
		}
		out, err := sh.Run(sctx, spec.Command)
		res.Output = out
		switch {
		case err == nil:
			return res, nil
		case errors.Is(err, ErrSessionDropped):
			res.Dropped = true
			return res, nil
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			res.Dropped = true
			return res, nil
		default:
			return res, fmt.Errorf("%s: graceful shutdown %q over ssh %s: %w", t.label(), spec.Command, t.SSH, err)
		}
	case "routeros":
		pw, err := spec.password(e.getenv)
		if err != nil {
			return res, fmt.Errorf("%s: %w", t.label(), err)
		}
		dial := e.DialTCP
		if dial == nil {
			d := net.Dialer{Timeout: 10 * time.Second}
			dial = d.DialContext
		}
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		dropped, err := routerOSShutdown(sctx, dial, spec, pw, timeout)
		if err != nil {
			return res, fmt.Errorf("%s: graceful shutdown: %w", t.label(), err)
		}
		res.Dropped = dropped
		return res, nil
	}
	return res, fmt.Errorf("%s: unknown shutdown method %q", t.label(), spec.Method)
}

// unreachableConfirmations is how many failed probes in a row count as
// "unreachable", so one lost packet does not cut power under a running node.
const unreachableConfirmations = 2

// WaitUnreachable polls probe every interval until it fails twice in a row
// (the device is down) or bound passes. It returns the number of probes.
// Past the bound it returns an error: the device ignored its shutdown.
func WaitUnreachable(ctx context.Context, probe func(context.Context) error, bound, interval time.Duration) (int, error) {
	fails := 0
	return poll(ctx, probe, bound, interval, func(err error) bool {
		if err == nil {
			fails = 0
			return false
		}
		fails++
		return fails >= unreachableConfirmations
	})
}

// WaitReachable polls probe every interval until it succeeds or bound
// passes; the error past the bound carries the last probe error.
func WaitReachable(ctx context.Context, probe func(context.Context) error, bound, interval time.Duration) (int, error) {
	return poll(ctx, probe, bound, interval, func(err error) bool { return err == nil })
}

// ErrBoundExceeded is wrapped when a wait step ran out of time.
var ErrBoundExceeded = errors.New("bound exceeded")

func poll(ctx context.Context, probe func(context.Context) error, bound, interval time.Duration, done func(error) bool) (int, error) {
	if bound <= 0 {
		bound = 5 * time.Minute
	}
	if interval <= 0 {
		interval = 5 * time.Second
	}
	deadline := time.Now().Add(bound)
	n := 0
	for {
		pctx, cancel := context.WithTimeout(ctx, min(max(interval, 2*time.Second), 15*time.Second))
		err := probe(pctx)
		cancel()
		n++
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if done(err) {
			return n, nil
		}
		if !time.Now().Add(interval).Before(deadline) {
			if err != nil {
				return n, fmt.Errorf("%w after %s (%d probes; last: %v)", ErrBoundExceeded, bound, n, err)
			}
			return n, fmt.Errorf("%w after %s (%d probes; still answering)", ErrBoundExceeded, bound, n)
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// WaitInput bounds a reachability wait.
type WaitInput struct {
	Target Target `json:"target"`
	// Bound caps the wait (default 5 min); Interval spaces the probes
	// (default 5 s).
	Bound    time.Duration `json:"bound,omitempty"`
	Interval time.Duration `json:"interval,omitempty"`
}

// WaitResult says how long the wait took.
type WaitResult struct {
	Device string        `json:"device"`
	Probes int           `json:"probes"`
	Waited time.Duration `json:"waited"`
}

// WaitUnreachable is the step between graceful shutdown and relay off: the
// relay is cut only once the device stopped answering.
func (e *Engine) WaitUnreachable(ctx context.Context, in WaitInput) (WaitResult, error) {
	start := time.Now()
	probe := e.aliveProbe(in.Target)
	n, err := WaitUnreachable(ctx, probe, in.Bound, in.Interval)
	res := WaitResult{Device: in.Target.Name, Probes: n, Waited: time.Since(start).Round(time.Millisecond)}
	if err != nil {
		return res, fmt.Errorf("%s still answers after its graceful shutdown: %w: check power.shutdown, or power it off with --force to cut the relay anyway", in.Target.label(), err)
	}
	return res, nil
}

// WaitReachable is the last step of power on: the device answers (SSH) and,
// for nodes, its worker polls its queue (the Polling callback).
func (e *Engine) WaitReachable(ctx context.Context, in WaitInput) (WaitResult, error) {
	start := time.Now()
	reach := e.reachable(in.Target)
	probe := func(ctx context.Context) error {
		if err := reach(ctx); err != nil {
			return err
		}
		if e.Polling != nil && in.Target.Kind != "device" {
			if err := e.Polling(ctx, in.Target); err != nil {
				return fmt.Errorf("answers but its worker is not polling: %w", err)
			}
		}
		return nil
	}
	n, err := WaitReachable(ctx, probe, in.Bound, in.Interval)
	res := WaitResult{Device: in.Target.Name, Probes: n, Waited: time.Since(start).Round(time.Millisecond)}
	if err != nil {
		return res, fmt.Errorf("%s did not come up after power on: %w: check the outlet, BIOS power-on-AC setting, Wake-on-LAN, and the node worker", in.Target.label(), err)
	}
	return res, nil
}

// reachable is the "it is up and usable" probe: SSH answers (host key
// checked, authenticated) or, for SSH-less gear, its RouterOS API accepts.
func (e *Engine) reachable(t Target) func(context.Context) error {
	if e.Reachable != nil {
		return func(ctx context.Context) error { return e.Reachable(ctx, t) }
	}
	if t.SSH != "" {
		st, err := nodeSSH(t)
		if err != nil {
			return func(context.Context) error { return err }
		}
		return func(ctx context.Context) error { return node.Check(ctx, st, 0) }
	}
	if addr := probeAddr(t); addr != "" {
		return TCPProbe(addr)
	}
	if t.Kind == "node" && e.Polling != nil {
		// A local node (no ssh: the control host's own): up is its
		// worker polling, which WaitReachable asks next.
		return func(context.Context) error { return nil }
	}
	return func(context.Context) error {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s has no ssh address or RouterOS API to probe: set ssh", t.label()))
	}
}

// aliveProbe is the "is anything still running" probe for WaitUnreachable.
func (e *Engine) aliveProbe(t Target) func(context.Context) error {
	if e.Reachable != nil {
		return func(ctx context.Context) error { return e.Reachable(ctx, t) }
	}
	if addr := probeAddr(t); addr != "" {
		return AliveProbe(addr)
	}
	return func(context.Context) error {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s has no ssh address or RouterOS API to probe: set ssh", t.label()))
	}
}

func probeAddr(t Target) string {
	if t.SSH != "" {
		return sshAddr(t.SSH)
	}
	if spec, err := ParseShutdown(t.Power.Shutdown, false); err == nil && spec.Method == "routeros" {
		return spec.Addr
	}
	return ""
}

// AliveProbe returns a probe that fails only when nothing at addr's host
// answers: a refused connection still means the kernel is running (sshd
// stops early in a shutdown, the disks sync later), so the relay must wait.
func AliveProbe(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return err
	}
}

// TCPProbe returns a probe that succeeds when addr accepts a TCP connection:
// the cheapest "is it up" check, good enough to know a machine went down.
func TCPProbe(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// sshAddr turns user@host[:port] into host:port.
func sshAddr(s string) string {
	if i := strings.LastIndex(s, "@"); i >= 0 {
		s = s[i+1:]
	}
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s
	}
	return net.JoinHostPort(strings.Trim(s, "[]"), "22")
}

// RelayInput asks for a relay switch with confirmation.
type RelayInput struct {
	Target Target `json:"target"`
	// Bound caps the state confirmation (default 30 s), Interval spaces the
	// state reads (default 1 s).
	Bound    time.Duration `json:"bound,omitempty"`
	Interval time.Duration `json:"interval,omitempty"`
}

// RelayResult is the relay's confirmed state.
type RelayResult struct {
	Device string `json:"device"`
	Entity string `json:"entity,omitempty"`
	// State is what Home Assistant reported last ("on", "off").
	State string `json:"state,omitempty"`
	Polls int    `json:"polls,omitempty"`
	// Skipped is true when the target has no relay configured.
	Skipped bool `json:"skipped,omitempty"`
}

// RelayOff switches the outlet off and confirms Home Assistant reports it
// off. Callers that already shut the device down gracefully treat an error
// here as a warning (the device is down, but may boot back on its own).
func (e *Engine) RelayOff(ctx context.Context, in RelayInput) (RelayResult, error) {
	return e.relay(ctx, in, false)
}

// RelayOn switches the outlet on and confirms Home Assistant reports it on.
func (e *Engine) RelayOn(ctx context.Context, in RelayInput) (RelayResult, error) {
	return e.relay(ctx, in, true)
}

func (e *Engine) relay(ctx context.Context, in RelayInput, on bool) (RelayResult, error) {
	t := in.Target
	res := RelayResult{Device: t.Name, Entity: t.Power.Relay}
	if t.Power.Relay == "" {
		res.Skipped = true
		return res, nil
	}
	ha, err := e.ha(t)
	if err != nil {
		return res, err
	}
	r, err := ha.SetRelay(ctx, SetRelayInput{Entity: t.Power.Relay, On: on, Bound: in.Bound, Interval: in.Interval})
	res.State, res.Polls = r.State, r.Polls
	if err != nil {
		return res, fmt.Errorf("%s: relay %s: %w", t.label(), t.Power.Relay, err)
	}
	return res, nil
}

// WakeInput asks for a Wake-on-LAN packet.
type WakeInput struct {
	Target Target `json:"target"`
}

// WakeResult says where the packet went.
type WakeResult struct {
	Device    string `json:"device"`
	MAC       string `json:"mac,omitempty"`
	Broadcast string `json:"broadcast,omitempty"`
	// Skipped is true when the target has no power.wol.
	Skipped bool `json:"skipped,omitempty"`
}

// Wake sends the Wake-on-LAN magic packet to the target's MAC.
func (e *Engine) Wake(ctx context.Context, in WakeInput) (WakeResult, error) {
	t := in.Target
	res := WakeResult{Device: t.Name, MAC: t.Power.WOL, Broadcast: t.Power.Broadcast}
	if t.Power.WOL == "" {
		res.Skipped = true
		return res, nil
	}
	if res.Broadcast == "" {
		res.Broadcast = DefaultBroadcast
	}
	if err := WakeOnLAN(ctx, t.Power.WOL, t.Power.Broadcast); err != nil {
		return res, fmt.Errorf("%s: %w", t.label(), err)
	}
	return res, nil
}

// RelayState reads the relay of p for the fleet probe: on=false, known=true
// means the outlet is off, so the node is reported "off" rather than
// unreachable. known=false (no relay, or Home Assistant says unavailable)
// means the relay cannot tell.
func RelayState(ctx context.Context, p config.Power) (on bool, known bool, err error) {
	var e Engine
	return e.RelayState(ctx, p)
}

// RelayState is RelayState with the engine's HTTP client and environment.
func (e *Engine) RelayState(ctx context.Context, p config.Power) (on bool, known bool, err error) {
	if p.Relay == "" {
		return false, false, nil
	}
	ha, err := e.ha(Target{Name: p.Relay, Kind: "relay", Power: p})
	if err != nil {
		return false, false, err
	}
	st, err := ha.State(ctx, p.Relay)
	if err != nil {
		return false, false, err
	}
	switch st {
	case "on":
		return true, true, nil
	case "off":
		return false, true, nil
	default:
		return false, false, nil
	}
}
