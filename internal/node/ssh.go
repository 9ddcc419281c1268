package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// DefaultTimeout bounds a dial (TCP connect plus SSH handshake) when the
// caller gives no timeout, so an unreachable node is reported, not waited on.
const DefaultTimeout = 10 * time.Second

// SSHTarget says how to reach one node (or device) over SSH. It is built
// from a config's `ssh = "user@host:port"` plus its known_hosts and identity
// keys, so every place that dials applies the same host-key check.
type SSHTarget struct {
	User string `json:"user"`
	Host string `json:"host"`
	Port int    `json:"port"`
	// KnownHosts is the known_hosts file the host key must be found in
	// (default ~/.ssh/known_hosts).
	KnownHosts string `json:"known_hosts,omitempty"`
	// Identity is the private key file (default: the SSH agent, then
	// ~/.ssh/id_ed25519, ~/.ssh/id_ecdsa, ~/.ssh/id_rsa).
	Identity string `json:"identity,omitempty"`
}

// Addr is host:port as used for dialing and in known_hosts lookups.
func (t SSHTarget) Addr() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.port())) }

// String is user@host:port, the form operators write in the config.
func (t SSHTarget) String() string { return t.User + "@" + t.Addr() }

func (t SSHTarget) port() int {
	if t.Port == 0 {
		return 22
	}
	return t.Port
}

// ParseSSH parses `user@host:port` (port defaults to 22, user to the
// current user, IPv6 hosts in brackets: `root@[::1]:2222`). Bad input is a
// permanent InvalidSpec error, since retrying cannot fix a config value.
func ParseSSH(s string) (SSHTarget, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return SSHTarget{}, fault.Permanent(fault.InvalidSpec, errors.New("ssh target is empty: write it as user@host:port"))
	}
	var t SSHTarget
	if i := strings.LastIndex(s, "@"); i >= 0 {
		t.User, s = s[:i], s[i+1:]
		if t.User == "" {
			return SSHTarget{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("ssh target %q: empty user before '@': write it as user@host:port", orig))
		}
	} else {
		u, err := user.Current()
		if err != nil {
			return SSHTarget{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("ssh target %q has no user and the current user is unknown (%v): write it as user@host:port", orig, err))
		}
		t.User = u.Username
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return SSHTarget{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("ssh target %q: missing ']' after IPv6 host", orig))
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if rest := s[end+1:]; rest != "" && !strings.HasPrefix(rest, ":") {
			return SSHTarget{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("ssh target %q: unexpected %q after ']'", orig, rest))
		}
	case strings.Count(s, ":") == 1:
		i := strings.Index(s, ":")
		host, port = s[:i], s[i+1:]
	case strings.Count(s, ":") > 1:
		return SSHTarget{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("ssh target %q: put an IPv6 host in brackets: user@[::1]:22", orig))
	}
	if host == "" {
		return SSHTarget{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("ssh target %q: empty host: write it as user@host:port", orig))
	}
	t.Host, t.Port = host, 22
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return SSHTarget{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("ssh target %q: port %q is not a number in 1..65535", orig, port))
		}
		t.Port = p
	}
	return t, nil
}

// Dial connects to t within timeout and checks the host key against
// t.KnownHosts — always; there is no way to skip the check. Failures are
// classified where they happen: a changed key is HostKeyMismatch, a host
// missing from known_hosts is UnknownHost, a rejected key is AuthFailed (all
// permanent); refused, timed out or unroutable is a transient "unreachable".
func Dial(ctx context.Context, t SSHTarget, timeout time.Duration) (*ssh.Client, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if t.Host == "" {
		return nil, fault.Permanent(fault.InvalidSpec, errors.New("ssh target has no host: write it as user@host:port"))
	}
	khFile, err := knownHostsFile(t)
	if err != nil {
		return nil, err
	}
	check, err := knownhosts.New(khFile)
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("ssh %s: read known_hosts %s: %w (create it with: ssh-keyscan -p %d %s >> %s)", t.Addr(), khFile, err, t.port(), t.Host, khFile))
	}
	auths, closeAuth, err := authMethods(t)
	if err != nil {
		return nil, err
	}
	defer closeAuth()

	var hostKeyErr error
	cfg := &ssh.ClientConfig{
		User: t.User,
		Auth: auths,
		HostKeyCallback: func(hostname string, remote net.Addr, key ssh.PublicKey) error {
			if err := check(hostname, remote, key); err != nil {
				hostKeyErr = classifyHostKey(t, khFile, key, err)
				return hostKeyErr
			}
			return nil
		},
		HostKeyAlgorithms: knownAlgorithms(check, t.Addr()),
		Timeout:           timeout,
	}

	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", t.Addr())
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ssh %s: %w", t.Addr(), ctx.Err())
		}
		return nil, fmt.Errorf("ssh %s unreachable: %s", t.Addr(), netReason(err, timeout))
	}
	// The handshake is bounded by the same deadline and by ctx.
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(dctx, func() { _ = conn.Close() })
	c, chans, reqs, err := ssh.NewClientConn(conn, t.Addr(), cfg)
	stopped := stop()
	if err != nil {
		_ = conn.Close()
		switch {
		case hostKeyErr != nil:
			return nil, hostKeyErr
		case strings.Contains(err.Error(), "no common algorithm for host key"):
			return nil, fault.Permanent(fault.HostKeyMismatch, fmt.Errorf("ssh %s: HOST KEY MISMATCH: known_hosts %s has only %s key(s) for this host and the host offers none of them (%v): verify the host's key out of band, then update the file (ssh-keyscan -p %d %s >> %s)", t.Addr(), khFile, strings.Join(cfg.HostKeyAlgorithms, "/"), err, t.port(), t.Host, khFile))
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, fault.Permanent(fault.AuthFailed, fmt.Errorf("ssh %s: authentication as %q failed (%v): add the public key of %s to ~%s/.ssh/authorized_keys on the node, or set the node's identity", t.Addr(), t.User, err, identityName(t), t.User))
		case !stopped && ctx.Err() != nil:
			return nil, fmt.Errorf("ssh %s: %w", t.Addr(), ctx.Err())
		case !stopped || isTimeout(err):
			return nil, fmt.Errorf("ssh %s unreachable: no SSH handshake within %s (%v)", t.Addr(), timeout, err)
		default:
			return nil, fmt.Errorf("ssh %s unreachable: handshake: %w", t.Addr(), err)
		}
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// Check proves a node is reachable and accepts us: dial (host key checked,
// authenticated) and open one session. Errors are classified as in Dial.
func Check(ctx context.Context, t SSHTarget, timeout time.Duration) error {
	c, err := Dial(ctx, t, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return fmt.Errorf("ssh %s unreachable: open session: %w", t.Addr(), err)
	}
	_ = s.Close()
	return nil
}

// ErrNotStarted marks a Run whose command never started (no session, or
// the start request failed), as opposed to one that started and then lost
// its connection — for a shutdown command the two mean opposite things.
var ErrNotStarted = errors.New("command not started")

// Run runs cmd on the remote side of client and returns its output and exit
// code; used for graceful shutdown and remote hooks. A non-zero exit is not an
// error (exit says it); err is for failures to run at all or ctx ending, in
// which case Run returns at once, the remote command is sent SIGKILL (sshd
// may not deliver it) and the session closed; close the client to be sure.
func Run(ctx context.Context, client *ssh.Client, cmd string) (stdout, stderr string, exit int, err error) {
	s, err := client.NewSession()
	if err != nil {
		return "", "", -1, fmt.Errorf("ssh %s: open session for %q: %w: %w", client.RemoteAddr(), cmd, ErrNotStarted, err)
	}
	defer s.Close()
	// The session copies output from its own goroutines, which may still
	// run when ctx ends; syncbuf makes reading then safe.
	var out, errb syncbuf.Buffer
	s.Stdout, s.Stderr = &out, &errb
	if err := s.Start(cmd); err != nil {
		return "", "", -1, fmt.Errorf("ssh %s: start %q: %w: %w", client.RemoteAddr(), cmd, ErrNotStarted, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case werr := <-done:
		var ee *ssh.ExitError
		switch {
		case werr == nil:
			return out.String(), errb.String(), 0, nil
		case errors.As(werr, &ee):
			return out.String(), errb.String(), ee.ExitStatus(), nil
		default:
			return out.String(), errb.String(), -1, fmt.Errorf("ssh %s: %q: %w", client.RemoteAddr(), cmd, werr)
		}
	case <-ctx.Done():
		_ = s.Signal(ssh.SIGKILL)
		_ = s.Close()
		return out.String(), errb.String(), -1, fmt.Errorf("ssh %s: %q: %w", client.RemoteAddr(), cmd, ctx.Err())
	}
}

func knownHostsFile(t SSHTarget) (string, error) {
	if t.KnownHosts != "" {
		return t.KnownHosts, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fault.Permanent(fault.InvalidSpec, fmt.Errorf("ssh %s: no known_hosts set and no home directory (%v): set known_hosts for the node", t.Addr(), err))
	}
	return filepath.Join(home, ".ssh", "known_hosts"), nil
}

// classifyHostKey turns a knownhosts error into a permanent, actionable one.
func classifyHostKey(t SSHTarget, khFile string, offered ssh.PublicKey, err error) error {
	var ke *knownhosts.KeyError
	if errors.As(err, &ke) {
		if len(ke.Want) == 0 {
			return fault.Permanent(fault.UnknownHost, fmt.Errorf(
				"ssh %s: host is not in known_hosts %s (it offered %s %s): after checking that fingerprint out of band, add it with: ssh-keyscan -p %d %s >> %s",
				t.Addr(), khFile, offered.Type(), ssh.FingerprintSHA256(offered), t.port(), t.Host, khFile))
		}
		var where []string
		for _, w := range ke.Want {
			where = append(where, fmt.Sprintf("%s:%d (%s %s)", w.Filename, w.Line, w.Key.Type(), ssh.FingerprintSHA256(w.Key)))
		}
		return fault.Permanent(fault.HostKeyMismatch, fmt.Errorf(
			"ssh %s: HOST KEY MISMATCH: the host offered %s %s but known_hosts has %s; someone may be intercepting the connection, or the node was reinstalled: verify the new key out of band, then remove the old line (ssh-keygen -R '%s' -f %s) and add the new one (ssh-keyscan -p %d %s >> %s)",
			t.Addr(), offered.Type(), ssh.FingerprintSHA256(offered), strings.Join(where, ", "), knownhosts.Normalize(t.Addr()), khFile, t.port(), t.Host, khFile))
	}
	var re *knownhosts.RevokedError
	if errors.As(err, &re) {
		return fault.Permanent(fault.HostKeyMismatch, fmt.Errorf("ssh %s: host key %s is revoked in %s:%d: do not connect; investigate the node", t.Addr(), ssh.FingerprintSHA256(offered), re.Revoked.Filename, re.Revoked.Line))
	}
	return fault.Permanent(fault.HostKeyMismatch, fmt.Errorf("ssh %s: host key check against %s failed: %w", t.Addr(), khFile, err))
}

// knownAlgorithms asks the known_hosts callback which key types it holds for
// addr, so the server is asked for a key we can check. Without this, a host
// known by its RSA key but offering ed25519 first would look like a mismatch.
func knownAlgorithms(check ssh.HostKeyCallback, addr string) []string {
	// knownhosts looks up addr itself when it is given; the remote address
	// is only parsed, so a placeholder avoids a DNS lookup here.
	err := check(addr, &net.TCPAddr{IP: net.IPv4zero}, probeKey{})
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			algos = append(algos, a)
		}
	}
	for _, w := range ke.Want {
		switch w.Key.Type() {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512)
			add(ssh.KeyAlgoRSASHA256)
			add(ssh.KeyAlgoRSA)
		default:
			add(w.Key.Type())
		}
	}
	return algos
}

// probeKey is a key of a type no host has, used only to list known keys.
type probeKey struct{}

func (probeKey) Type() string                                 { return "sparklane-probe" }
func (probeKey) Marshal() []byte                              { return []byte("sparklane-probe") }
func (probeKey) Verify(data []byte, sig *ssh.Signature) error { return errors.New("probe key") }

func authMethods(t SSHTarget) ([]ssh.AuthMethod, func(), error) {
	noop := func() {}
	if t.Identity != "" {
		signer, err := loadKey(t.Identity)
		if err != nil {
			return nil, noop, fault.Permanent(fault.AuthFailed, fmt.Errorf("ssh %s: identity %s: %w", t.Addr(), t.Identity, err))
		}
		return []ssh.AuthMethod{ssh.PublicKeys(signer)}, noop, nil
	}
	var methods []ssh.AuthMethod
	closeFn := noop
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		if c, err := net.Dial("unix", sock); err == nil {
			methods = append(methods, ssh.PublicKeysCallback(agent.NewClient(c).Signers))
			closeFn = func() { _ = c.Close() }
		}
	}
	var signers []ssh.Signer
	if home, err := os.UserHomeDir(); err == nil {
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			if s, err := loadKey(filepath.Join(home, ".ssh", n)); err == nil {
				signers = append(signers, s)
			}
		}
	}
	if len(signers) > 0 {
		methods = append(methods, ssh.PublicKeys(signers...))
	}
	if len(methods) == 0 {
		return nil, noop, fault.Permanent(fault.AuthFailed, fmt.Errorf("ssh %s: no identity: set the node's identity key file, start an ssh-agent, or create ~/.ssh/id_ed25519", t.Addr()))
	}
	return methods, closeFn, nil
}

func loadKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	var pe *ssh.PassphraseMissingError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("key is passphrase-protected: load it into ssh-agent and leave identity empty, or use a key without a passphrase")
	}
	return s, err
}

func identityName(t SSHTarget) string {
	if t.Identity != "" {
		return t.Identity
	}
	return "your agent/default key"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func netReason(err error, timeout time.Duration) string {
	switch {
	case isTimeout(err) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within %s", timeout)
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused (sshd not running or wrong port)"
	case strings.Contains(err.Error(), "no route to host"):
		return "no route to host (node down or off the network)"
	}
	return err.Error()
}
