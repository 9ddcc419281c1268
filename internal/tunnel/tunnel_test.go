package tunnel

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/loopnet"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// echoServer stands in for the control host's Temporal frontend: a real
// TCP server on loopback that answers every line with "echo: LINE".
func echoServer(t *testing.T) string {
	t.Helper()
	l := loopnet.Listen(t)
	loopnet.Serve(l, func(c net.Conn) {
		r := bufio.NewScanner(c)
		for r.Scan() {
			fmt.Fprintf(c, "echo: %s\n", r.Text())
		}
	})
	return l.Addr().String()
}

func waitState(t *testing.T, k *Keeper, node string, cond func(State) bool, what string) State {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range k.States() {
			if s.Node == node && cond(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tunnel to %s never became %s; states: %+v", node, what, k.States())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// roundTrip sends a line through the node's end of the tunnel.
func roundTrip(port int, line string) (string, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(got), err
}

// A node's 127.0.0.1:PORT reaches the control frontend through a real
// sshd; a dropped SSH connection is redialled and the tunnel serves again;
// the end of the context closes the node's port.
func TestReverseTunnelServesReconnectsAndCloses(t *testing.T) {
	sshd := sshdtest.Start(t)
	frontend := echoServer(t)
	port := sshdtest.FreePort(t)
	k := &Keeper{Frontend: frontend, RemotePort: port, MaxBackoff: 200 * time.Millisecond, KeepAlive: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Run(ctx, []Target{{Node: "dgx2", SSH: sshd.Target()}}); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	first := waitState(t, k, "dgx2", func(s State) bool { return s.Up }, "up")
	if got, err := roundTrip(port, "hello"); err != nil || got != "echo: hello" {
		t.Fatalf("through the tunnel: %q, %v; want the frontend's echo", got, err)
	}
	// The node side listens on loopback only (sshd's GatewayPorts no).
	if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		ln.Close()
		t.Fatalf("nothing listens on the node's 127.0.0.1:%d while the tunnel is up", port)
	}

	if err := sshd.DropConnections(); err != nil {
		t.Fatal(err)
	}
	waitState(t, k, "dgx2", func(s State) bool { return s.Up && s.Since.After(first.Since) }, "up again after the drop")
	if got, err := roundTrip(port, "again"); err != nil || got != "echo: again" {
		t.Fatalf("after reconnect: %q, %v", got, err)
	}
	if s := waitState(t, k, "dgx2", func(s State) bool { return s.Conns >= 2 }, "counting"); s.Conns < 2 {
		t.Fatalf("conns %d", s.Conns)
	}

	cancel()
	<-done
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := roundTrip(port, "x"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node's tunnel port still answers after the keeper stopped")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A node whose host key does not match is never tunnelled to, and its
// state says why.
func TestReverseTunnelChecksHostKey(t *testing.T) {
	sshd := sshdtest.Start(t)
	other := sshdtest.Start(t)
	// known_hosts of another server, rewritten for this server's port.
	b, err := os.ReadFile(other.KnownHostsFile)
	if err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	line := strings.Replace(string(b), fmt.Sprintf("]:%d ", other.Port), fmt.Sprintf("]:%d ", sshd.Port), 1)
	if err := os.WriteFile(kh, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	target := sshd.Target()
	target.KnownHosts = kh
	port := sshdtest.FreePort(t)
	k := &Keeper{Frontend: echoServer(t), RemotePort: port, MaxBackoff: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Run(ctx, []Target{{Node: "dgx3", SSH: target}}); close(done) }()
	defer func() { cancel(); <-done }()
	s := waitState(t, k, "dgx3", func(s State) bool { return s.Err != "" }, "failed")
	if s.Up || !strings.Contains(strings.ToLower(s.Err), "host key") {
		t.Fatalf("state %+v: want down with a host-key error", s)
	}
	if _, err := roundTrip(port, "x"); err == nil {
		t.Fatal("a node with a mismatched host key got a tunnel")
	}
}
