package node_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
	"golang.org/x/crypto/ssh"
)

func TestParseSSH(t *testing.T) {
	cases := []struct {
		in   string
		want node.SSHTarget
	}{
		{"root@10.0.0.5:2222", node.SSHTarget{User: "root", Host: "10.0.0.5", Port: 2222}},
		{"ops@dgx1", node.SSHTarget{User: "ops", Host: "dgx1", Port: 22}},
		{"ops@[::1]:2200", node.SSHTarget{User: "ops", Host: "::1", Port: 2200}},
		{"a@b@host:23", node.SSHTarget{User: "a@b", Host: "host", Port: 23}},
	}
	for _, c := range cases {
		got, err := node.ParseSSH(c.in)
		if err != nil {
			t.Fatalf("ParseSSH(%q): %v", c.in, err)
		}
		if got != c.want {
			t.Errorf("ParseSSH(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if got, err := node.ParseSSH("host:2022"); err != nil || got.User == "" || got.Port != 2022 {
		t.Errorf("ParseSSH without user = %+v, %v; want the current user and port 2022", got, err)
	}
	for _, bad := range []string{"", "root@", "root@host:x", "root@host:70000", "root@::1", "@host", "root@[::1"} {
		_, err := node.ParseSSH(bad)
		if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec {
			t.Errorf("ParseSSH(%q) error = %v, want InvalidSpec", bad, err)
		}
	}
}

func TestReachableAndRun(t *testing.T) {
	srv := sshdtest.Start(t)
	ctx := context.Background()
	if err := node.Check(ctx, srv.Target(), 5*time.Second); err != nil {
		t.Fatalf("Check %s: %v\nsshd log:\n%s", srv, err, srv.Log())
	}
	c, err := node.Dial(ctx, srv.Target(), 5*time.Second)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	out, errOut, code, err := node.Run(ctx, c, "echo hello; echo oops >&2; exit 7")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if out != "hello\n" || errOut != "oops\n" || code != 7 {
		t.Errorf("Run = %q, %q, %d; want hello, oops, 7", out, errOut, code)
	}
	// A command that outlives ctx is stopped and reported, not waited on.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, _, err = node.Run(cctx, c, "sleep 30")
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("Run past ctx deadline: err=%v after %s; want a context error quickly", err, time.Since(start))
	}
}

func TestWrongHostKeyRefused(t *testing.T) {
	srv := sshdtest.Start(t)
	dir := t.TempDir()
	other, _ := sshdtest.NewKey(t, dir, "other")
	kh := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(kh, []byte("# fleet\n"+sshdtest.KnownHostsLine(srv.Port, other)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := srv.Target()
	tg.KnownHosts = kh
	err := node.Check(context.Background(), tg, 5*time.Second)
	if typ, _ := fault.TypeOf(err); typ != fault.HostKeyMismatch {
		t.Fatalf("Check with a wrong known_hosts key: %v (type %q), want HostKeyMismatch", err, typ)
	}
	msg := err.Error()
	t.Logf("mismatch error: %s", msg)
	for _, want := range []string{"127.0.0.1:" + strconv.Itoa(srv.Port), kh + ":2", "SHA256:", "ssh-keygen -R"} {
		if !strings.Contains(msg, want) {
			t.Errorf("mismatch error does not name %q: %s", want, msg)
		}
	}
	// And Docker over SSH is refused the same way.
	_, err = node.DockerClient(context.Background(), "", &tg)
	if typ, _ := fault.TypeOf(err); typ != fault.HostKeyMismatch {
		t.Errorf("DockerClient with a wrong host key: %v, want HostKeyMismatch", err)
	}
}

func TestUnknownHost(t *testing.T) {
	srv := sshdtest.Start(t)
	dir := t.TempDir()
	other, _ := sshdtest.NewKey(t, dir, "other")
	kh := filepath.Join(dir, "known_hosts")
	// Known: the same host on another port only.
	if err := os.WriteFile(kh, []byte(sshdtest.KnownHostsLine(srv.Port+1, other)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := srv.Target()
	tg.KnownHosts = kh
	err := node.Check(context.Background(), tg, 5*time.Second)
	if typ, _ := fault.TypeOf(err); typ != fault.UnknownHost {
		t.Fatalf("Check of a host missing from known_hosts: %v, want UnknownHost", err)
	}
	t.Logf("unknown-host error: %v", err)
	want := "ssh-keyscan -p " + strconv.Itoa(srv.Port) + " 127.0.0.1 >> " + kh
	if !strings.Contains(err.Error(), want) {
		t.Errorf("unknown-host error does not say %q: %v", want, err)
	}
}

func TestAuthFailed(t *testing.T) {
	srv := sshdtest.Start(t)
	_, wrongID := sshdtest.NewKey(t, t.TempDir(), "id_wrong")
	tg := srv.Target()
	tg.Identity = wrongID
	err := node.Check(context.Background(), tg, 5*time.Second)
	if typ, _ := fault.TypeOf(err); typ != fault.AuthFailed {
		t.Fatalf("Check with an unauthorized key: %v, want AuthFailed", err)
	}
	if !strings.Contains(err.Error(), wrongID) {
		t.Errorf("auth error does not name the identity %s: %v", wrongID, err)
	}
}

func TestClosedPortUnreachable(t *testing.T) {
	srv := sshdtest.Start(t)
	tg := srv.Target()
	srv.Stop()
	timeout := 2 * time.Second
	start := time.Now()
	err := node.Check(context.Background(), tg, timeout)
	took := time.Since(start)
	if err == nil {
		t.Fatal("Check of a closed port succeeded")
	}
	if _, permanent := fault.TypeOf(err); permanent {
		t.Errorf("closed port classified permanent (%v); it must be retryable", err)
	}
	if !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("closed port error = %q, want 'unreachable: connection refused'", err)
	}
	if took > timeout {
		t.Errorf("closed port took %s, more than the %s timeout", took, timeout)
	}
}

// A port that accepts TCP but never speaks SSH (a hung node) must fail
// within the timeout, not hang.
func TestSilentPortBoundedByTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	srvKH := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(srvKH, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, id := sshdtest.NewKey(t, t.TempDir(), "id")
	tg := node.SSHTarget{User: "root", Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port, KnownHosts: srvKH, Identity: id}
	timeout := 700 * time.Millisecond
	start := time.Now()
	err = node.Check(context.Background(), tg, timeout)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("silent port: err = %v, want unreachable", err)
	}
	if _, permanent := fault.TypeOf(err); permanent {
		t.Errorf("silent port classified permanent: %v", err)
	}
	if took < timeout/2 || took > timeout+2*time.Second {
		t.Errorf("silent port failed after %s; want about the %s timeout", took, timeout)
	}
}

func TestDockerOverSSH(t *testing.T) {
	if _, err := os.Stat("/var/run/docker.sock"); err != nil {
		t.Fatalf("docker socket missing (%v): start the Docker daemon", err)
	}
	srv := sshdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg := srv.Target()
	cli, err := node.DockerClient(ctx, "unix:///var/run/docker.sock", &tg)
	if err != nil {
		t.Fatalf("DockerClient over %s: %v\nsshd log:\n%s", srv, err, srv.Log())
	}
	defer cli.Close()
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		t.Fatalf("ServerVersion over SSH: %v", err)
	}
	local, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	lv, err := local.ServerVersion(ctx)
	if err != nil {
		t.Fatalf("local ServerVersion: %v", err)
	}
	if v.Version == "" || v.Version != lv.Version || v.KernelVersion != lv.KernelVersion {
		t.Errorf("version over SSH = %q/%q, local = %q/%q; want the same daemon", v.Version, v.KernelVersion, lv.Version, lv.KernelVersion)
	}
	if !strings.Contains(srv.Log(), "Accepted publickey") {
		t.Errorf("sshd log shows no accepted login; was SSH really used?\n%s", srv.Log())
	}
	// A socket that does not exist on the node is named.
	_, err = node.DockerClient(ctx, "unix:///nonexistent/docker.sock", &tg)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/docker.sock") {
		t.Errorf("DockerClient to a missing socket: %v, want an error naming it", err)
	}
}

// A node with both RSA and ed25519 host keys, known by only one of them,
// must be checked against the key known_hosts has, not reported as a
// mismatch because the client asked for the other type first.
func TestHostKnownByOneOfTwoKeys(t *testing.T) {
	srv := sshdtest.StartWith(t, sshdtest.Options{RSAHostKey: true})
	kh := filepath.Join(t.TempDir(), "known_hosts")
	tg := srv.Target()
	tg.KnownHosts = kh
	for _, known := range []ssh.PublicKey{srv.HostKey, srv.RSAHostKey} {
		if err := os.WriteFile(kh, []byte(sshdtest.KnownHostsLine(srv.Port, known)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := node.Check(context.Background(), tg, 5*time.Second); err != nil {
			t.Fatalf("Check with only the %s host key known: %v", known.Type(), err)
		}
	}
	// And a known RSA key the host does not have is a mismatch, not a
	// transient handshake failure.
	other, _ := sshdtest.NewRSAKey(t, t.TempDir(), "other_rsa")
	plain := sshdtest.Start(t) // ed25519 only
	if err := os.WriteFile(kh, []byte(sshdtest.KnownHostsLine(plain.Port, other)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tg = plain.Target()
	tg.KnownHosts = kh
	err := node.Check(context.Background(), tg, 5*time.Second)
	if typ, _ := fault.TypeOf(err); typ != fault.HostKeyMismatch {
		t.Fatalf("Check against an RSA-only known_hosts entry on an ed25519-only host: %v, want HostKeyMismatch", err)
	}
}
