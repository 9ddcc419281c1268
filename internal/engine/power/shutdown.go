package power

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sparklane/sparklane/internal/engine/power/routeros"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/node"
)

// DefaultShutdownCommand is what "ssh:" (or an empty power.shutdown on a
// target with SSH) runs.
const DefaultShutdownCommand = "systemctl poweroff"

// Shell runs one command on a device and returns its combined output. It is
// the narrow seam between power and the SSH layer (internal/node dials,
// with known_hosts checks; SSHShell adapts the resulting client).
type Shell interface {
	Run(ctx context.Context, cmd string) (string, error)
}

// ErrSessionDropped means the connection went away before the command
// reported an exit status. For a shutdown command that is the expected
// outcome (the machine is going down), so Shutdown counts it as success.
var ErrSessionDropped = errors.New("ssh session dropped before the command exited")

// SSHShell runs commands in new sessions of an established, host-key
// checked *ssh.Client (from node.Dial; power never skips host-key checks).
type SSHShell struct {
	Client *ssh.Client
}

// Run executes cmd in a new session and returns stdout and stderr
// together. Only a session that was running the command and then lost its
// connection (no exit status, or the transport died) is ErrSessionDropped;
// failing to open or start the session is a plain error, since then the
// command never ran. A non-zero exit is an error quoting the output; ctx
// ending signals the command and closes the session.
func (s SSHShell) Run(ctx context.Context, cmd string) (string, error) {
	if s.Client == nil {
		return "", errors.New("ssh shell has no client: dial the device first")
	}
	remote := s.Client.RemoteAddr()
	stdout, stderr, exit, err := node.Run(ctx, s.Client, cmd)
	out := stdout + stderr
	switch {
	case err == nil && exit == 0:
		return out, nil
	case err == nil:
		return out, fmt.Errorf("ssh %s: %q exited with status %d (output: %s)", remote, cmd, exit, snippet([]byte(out)))
	case errors.Is(err, node.ErrNotStarted) || ctx.Err() != nil:
		return out, err
	case isDrop(err):
		return out, fmt.Errorf("%w: %v", ErrSessionDropped, err)
	default:
		return out, err
	}
}

// Close closes the SSH connection.
func (s SSHShell) Close() error {
	if s.Client == nil {
		return nil
	}
	return s.Client.Close()
}

// DialNodeShell is the default Engine.DialShell: node.Dial to t.SSH with
// t.KnownHosts and t.Identity (host key always checked), as an SSHShell.
func DialNodeShell(ctx context.Context, t Target) (Shell, error) {
	st, err := nodeSSH(t)
	if err != nil {
		return nil, err
	}
	c, err := node.Dial(ctx, st, 0)
	if err != nil {
		return nil, err
	}
	return SSHShell{Client: c}, nil
}

func nodeSSH(t Target) (node.SSHTarget, error) {
	st, err := node.ParseSSH(t.SSH)
	if err != nil {
		return st, fmt.Errorf("%s: %w", t.label(), err)
	}
	st.KnownHosts, st.Identity = t.KnownHosts, t.Identity
	return st, nil
}

// isDrop recognises the ways x/crypto/ssh reports a vanished peer.
func isDrop(err error) bool {
	var missing *ssh.ExitMissingError
	var opErr *net.OpError
	return errors.As(err, &missing) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || (errors.As(err, &opErr) && !opErr.Timeout())
}

// ShutdownSpec is a parsed power.shutdown value.
type ShutdownSpec struct {
	// Method is "ssh", "routeros" or "" (no graceful step configured).
	Method string `json:"method"`
	// Command is the SSH command (ssh).
	Command string `json:"command,omitempty"`
	// Addr is host:port of the RouterOS API, User its login (routeros).
	Addr string `json:"addr,omitempty"`
	User string `json:"user,omitempty"`
	// PasswordEnv / PasswordFile name where the RouterOS password is read
	// from; the password itself never appears in config or inputs.
	PasswordEnv  string `json:"password_env,omitempty"`
	PasswordFile string `json:"password_file,omitempty"`
}

// ParseShutdown parses power.shutdown:
//
//	ssh:COMMAND        run COMMAND over SSH ("ssh:" alone = systemctl poweroff)
//	routeros:[USER@]HOST[:PORT][?password_env=VAR|password_file=PATH]
//	                   RouterOS API /system/shutdown (user admin, port 8728;
//	                   no password source = empty password, the factory default)
//
// An empty spec means no graceful step (hasSSH true selects the default SSH
// command instead, since a node reachable over SSH can always be asked).
func ParseShutdown(spec string, hasSSH bool) (ShutdownSpec, error) {
	shown := spec
	bad := func(why string) (ShutdownSpec, error) {
		return ShutdownSpec{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("power.shutdown %q: %s", shown, why))
	}
	if strings.TrimSpace(spec) == "" {
		if hasSSH {
			return ShutdownSpec{Method: "ssh", Command: DefaultShutdownCommand}, nil
		}
		return ShutdownSpec{}, nil
	}
	method, rest, ok := strings.Cut(spec, ":")
	if !ok {
		return bad(`write "ssh:COMMAND" or "routeros:[USER@]HOST[:PORT]"`)
	}
	switch method {
	case "ssh":
		cmd := strings.TrimSpace(rest)
		if cmd == "" {
			cmd = DefaultShutdownCommand
		}
		return ShutdownSpec{Method: "ssh", Command: cmd}, nil
	case "routeros":
		u, err := url.Parse("routeros://" + strings.TrimSpace(rest))
		if err != nil || u.Host == "" {
			return bad("the RouterOS address is not [USER@]HOST[:PORT]")
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				shown = "routeros:" + u.User.Username() + ":" + Masked + "@" + u.Host
				return bad("do not put the password in config: use ?password_env=VAR or ?password_file=PATH")
			}
		}
		s := ShutdownSpec{Method: "routeros", User: "admin", Addr: u.Host}
		if u.User != nil && u.User.Username() != "" {
			s.User = u.User.Username()
		}
		if u.Port() == "" {
			s.Addr = net.JoinHostPort(u.Hostname(), routeros.DefaultPort)
		}
		q := u.Query()
		for k := range q {
			if k != "password_env" && k != "password_file" {
				return bad(fmt.Sprintf("unknown option %q (known: password_env, password_file)", k))
			}
		}
		s.PasswordEnv, s.PasswordFile = q.Get("password_env"), q.Get("password_file")
		return s, nil
	default:
		return bad(fmt.Sprintf("unknown method %q: use ssh or routeros", method))
	}
}

func (s ShutdownSpec) password(getenv func(string) string) (Secret, error) {
	switch {
	case s.PasswordEnv != "":
		v := getenv(s.PasswordEnv)
		if v == "" {
			return Secret{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf(
				"power.shutdown password_env %s is empty or unset in this worker's environment: export the RouterOS password there", s.PasswordEnv))
		}
		return NewSecret(v, "password_env "+s.PasswordEnv), nil
	case s.PasswordFile != "":
		b, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return Secret{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("power.shutdown password_file %s: %v", s.PasswordFile, err))
		}
		return NewSecret(strings.TrimRight(string(b), "\r\n"), "password_file "+s.PasswordFile), nil
	default:
		return NewSecret("", "empty password (factory default)"), nil
	}
}

// routerOSShutdown logs in and sends /system/shutdown. A connection dropped
// after the command was sent counts as success: the device is going down.
func routerOSShutdown(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), spec ShutdownSpec, pw Secret, timeout time.Duration) (dropped bool, err error) {
	c, err := dial(ctx, "tcp", spec.Addr)
	if err != nil {
		return false, fmt.Errorf("RouterOS API at %s: %w (is the api service enabled on port %s?)", spec.Addr, err, portOf(spec.Addr))
	}
	conn := routeros.NewConn(c)
	if timeout > 0 {
		conn.Timeout = timeout
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	if err := conn.Login(spec.User, pw.reveal()); err != nil {
		// Quote the device's words with the password scrubbed out, just in case.
		msg := pw.scrub(err.Error())
		if errors.Is(err, routeros.ErrLoginFailed) {
			return false, fault.Permanent(fault.AuthFailed, fmt.Errorf(
				"RouterOS API at %s refused user %q with the password from %s: %s: check the user and password", spec.Addr, spec.User, pw.Source(), msg))
		}
		return false, fmt.Errorf("RouterOS API at %s: login: %s", spec.Addr, msg)
	}
	_, err = conn.Run("/system/shutdown")
	if err == nil {
		return false, nil
	}
	var trap *routeros.TrapError
	if errors.As(err, &trap) {
		return false, fmt.Errorf("RouterOS API at %s refused /system/shutdown: %s: check that user %q has the reboot policy", spec.Addr, trap.Message, spec.User)
	}
	// The sentence was sent; an I/O error now is the device going away.
	return true, nil
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return routeros.DefaultPort
	}
	return p
}
