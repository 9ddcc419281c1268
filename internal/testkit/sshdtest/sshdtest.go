package sshdtest

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/testkit/loopnet"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHD is the absolute path of the server binary; tests fail without it.
const SSHD = "/usr/sbin/sshd"

// Server is one running sshd. Its files live in Dir (a t.TempDir).
type Server struct {
	// Port is the loopback port sshd listens on.
	Port int
	// KnownHostsFile holds `[127.0.0.1]:PORT <host key>`.
	KnownHostsFile string
	// IdentityFile is the user's private key (authorized by the server).
	IdentityFile string
	// User is the login user: tests run as root.
	User string
	// HostKey is the server's public ed25519 host key.
	HostKey ssh.PublicKey
	// RSAHostKey is the server's second host key when Options.RSAHostKey
	// was set (nil otherwise).
	RSAHostKey ssh.PublicKey
	// Dir holds the config, keys and LogFile.
	Dir     string
	LogFile string

	cmd  *exec.Cmd
	done chan struct{}
	t    testing.TB
}

// Target is the node.SSHTarget that reaches this server with its keys.
func (s *Server) Target() node.SSHTarget {
	return node.SSHTarget{User: s.User, Host: "127.0.0.1", Port: s.Port, KnownHosts: s.KnownHostsFile, Identity: s.IdentityFile}
}

// Log returns what sshd wrote to its log so far (for failure messages).
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.LogFile)
	return string(b)
}

// Stop ends sshd (idempotent); t.Cleanup calls it too. After Stop the port
// is closed, which tests use for "unreachable". A connection's child forked
// a moment before may still hold the listening socket until it closes its
// copy (CI once saw a connect after Stop accepted, then reset), so Stop
// also waits until no socket listens on the port.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	deadline := time.Now().Add(10 * time.Second)
	for serve.Listening(s.Port) {
		if time.Now().After(deadline) {
			s.t.Errorf("sshdtest: 127.0.0.1:%d still has a listening socket 10 s after sshd (pid %d) was killed", s.Port, s.cmd.Process.Pid)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// PID is the listening sshd's process id (its per-connection children are
// its child processes).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// DropConnections kills every connection's sshd child (what a node reboot
// or a cut link does to open SSH sessions), leaving the listener up.
func (s *Server) DropConnections() error {
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(s.PID())).Output()
	if err != nil {
		return fmt.Errorf("pgrep -P %d: %w (no connection to drop?)", s.PID(), err)
	}
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return nil
}

// Options vary the server for tests of host-key algorithm choice.
type Options struct {
	// RSAHostKey adds an RSA host key next to the ed25519 one, as many
	// real nodes have (known_hosts may list only one of them).
	RSAHostKey bool
}

// Start is StartWith(t, Options{}).
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith writes keys and a config into a temp dir and runs
// `/usr/sbin/sshd -D -f CONFIG -E LOG` on a free loopback port, waits until
// the port answers, and stops it when the test ends. It fails the test (never
// skips) when sshd is not installed.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	if _, err := os.Stat(SSHD); err != nil {
		t.Fatalf("sshdtest: %s not found (%v): install openssh-server (apt-get install -y openssh-server)", SSHD, err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatalf("sshdtest: mkdir /run/sshd (sshd's privilege separation dir): %v", err)
	}
	dir := t.TempDir()
	s := &Server{Dir: dir, User: "root", LogFile: filepath.Join(dir, "sshd.log"), done: make(chan struct{}), t: t}

	hostPub, hostKeyFile := writeKey(t, dir, "host_ed25519")
	userPub, userKeyFile := writeKey(t, dir, "id_ed25519")
	s.HostKey, s.IdentityFile = hostPub, userKeyFile
	hostKeys := []string{"HostKey " + hostKeyFile}
	if opts.RSAHostKey {
		rsaPub, rsaFile := writeRSAKey(t, dir, "host_rsa")
		s.RSAHostKey = rsaPub
		hostKeys = append(hostKeys, "HostKey "+rsaFile)
	}
	authKeys := filepath.Join(dir, "authorized_keys")
	writeFile(t, authKeys, ssh.MarshalAuthorizedKey(userPub), 0o600)

	s.Port = FreePort(t)
	s.KnownHostsFile = filepath.Join(dir, "known_hosts")
	writeFile(t, s.KnownHostsFile, []byte(KnownHostsLine(s.Port, hostPub)+"\n"), 0o600)

	cfg := filepath.Join(dir, "sshd_config")
	writeFile(t, cfg, []byte(strings.Join([]string{
		"ListenAddress 127.0.0.1",
		"Port " + strconv.Itoa(s.Port),
		strings.Join(hostKeys, "\n"),
		"AuthorizedKeysFile " + authKeys,
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"UsePAM no",
		"StrictModes no",
		"PermitRootLogin yes",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"AllowStreamLocalForwarding yes",
		"AllowTcpForwarding yes",
		"LogLevel VERBOSE",
		"",
	}, "\n")), 0o600)

	s.cmd = exec.Command(SSHD, "-D", "-f", cfg, "-E", s.LogFile)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("sshdtest: start %s: %v", SSHD, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.Stop)

	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			t.Fatalf("sshdtest: sshd exited before listening on 127.0.0.1:%d; log %s:\n%s", s.Port, s.LogFile, s.Log())
		default:
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshdtest: sshd not listening on 127.0.0.1:%d after 10s (%v); log:\n%s", s.Port, err, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KnownHostsLine is the known_hosts line for key at 127.0.0.1:port
// (non-22 ports are written `[127.0.0.1]:PORT key`).
func KnownHostsLine(port int, key ssh.PublicKey) string {
	return knownhosts.Line([]string{knownhosts.Normalize(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))}, key)
}

// NewKey makes a fresh ed25519 key pair and writes the private half to
// dir/name (0600) in OpenSSH format; tests use it for "wrong key" cases.
func NewKey(t testing.TB, dir, name string) (ssh.PublicKey, string) {
	t.Helper()
	return writeKey(t, dir, name)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return loopnet.FreePort(t)
}

func writeKey(t testing.TB, dir, name string) (ssh.PublicKey, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("sshdtest: generate key: %v", err)
	}
	return writeKeyPair(t, dir, name, priv)
}

// NewRSAKey is NewKey for a 2048-bit RSA key.
func NewRSAKey(t testing.TB, dir, name string) (ssh.PublicKey, string) {
	t.Helper()
	return writeRSAKey(t, dir, name)
}

func writeRSAKey(t testing.TB, dir, name string) (ssh.PublicKey, string) {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("sshdtest: generate RSA key: %v", err)
	}
	return writeKeyPair(t, dir, name, priv)
}

// writeKeyPair writes priv to dir/name (PEM, 0600) and its public key to
// dir/name.pub (authorized_keys form).
func writeKeyPair(t testing.TB, dir, name string, priv crypto.Signer) (ssh.PublicKey, string) {
	t.Helper()
	block, err := ssh.MarshalPrivateKey(priv, "sparklane test "+name)
	if err != nil {
		t.Fatalf("sshdtest: marshal key %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	writeFile(t, path, pem.EncodeToMemory(block), 0o600)
	sshPub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		t.Fatalf("sshdtest: public key %s: %v", name, err)
	}
	writeFile(t, path+".pub", ssh.MarshalAuthorizedKey(sshPub), 0o644)
	return sshPub, path
}

func writeFile(t testing.TB, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatalf("sshdtest: write %s: %v", path, err)
	}
}

// String names the server in test messages.
func (s *Server) String() string { return fmt.Sprintf("sshd 127.0.0.1:%d", s.Port) }
