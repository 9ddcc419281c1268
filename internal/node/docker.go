package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/client"
	"github.com/sparklane/sparklane/internal/fault"
	"golang.org/x/crypto/ssh"
)

// DefaultDockerHost is the Docker endpoint used when a node sets none.
const DefaultDockerHost = "unix:///var/run/docker.sock"

// DockerClient returns a Docker API client for a node. With sshTarget nil it
// talks to dockerHost on this machine (default unix:///var/run/docker.sock).
// Otherwise every HTTP connection is a stream-local forward through SSH
// (host key checked by Dial) to the node's Docker unix socket, which needs
// `AllowStreamLocalForwarding yes` in the node's sshd_config. The remote
// client is pinged before it is returned, so a refused key, a forbidden
// forward or a stopped daemon is reported here, named, not on first use.
// The API version is negotiated: nodes run different daemons.
func DockerClient(ctx context.Context, dockerHost string, sshTarget *SSHTarget) (*client.Client, error) {
	if dockerHost == "" {
		dockerHost = DefaultDockerHost
	}
	if sshTarget == nil {
		c, err := client.NewClientWithOpts(client.WithHost(dockerHost), client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("docker endpoint %q: %w (use unix:///var/run/docker.sock or tcp://host:2375)", dockerHost, err))
		}
		return c, nil
	}
	sock, ok := strings.CutPrefix(dockerHost, "unix://")
	if !ok || sock == "" {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: docker endpoint %q cannot be reached through SSH: give the node's unix socket, e.g. unix:///var/run/docker.sock", sshTarget, dockerHost))
	}
	t := *sshTarget
	d := &sshDialer{target: t, socket: sock}
	// The first connection is made here, so host-key and auth problems
	// surface from DockerClient with their permanent classification.
	first, err := Dial(ctx, t, dialTimeout(ctx))
	if err != nil {
		return nil, err
	}
	d.first = first
	httpc := &http.Client{Transport: &http.Transport{
		DialContext:     d.DialContext,
		IdleConnTimeout: 90 * time.Second,
	}}
	c, err := client.NewClientWithOpts(
		client.WithHTTPClient(httpc),
		client.WithHost("http://docker.sock"),
		client.WithDialContext(d.DialContext),
		client.WithAPIVersionNegotiation(),
	)
	if err != nil {
		_ = first.Close()
		return nil, fmt.Errorf("docker on %s via ssh: %w", t, err)
	}
	if _, err := c.Ping(ctx); err != nil {
		_ = c.Close()
		d.closeFirst()
		return nil, fmt.Errorf("docker on %s via ssh (socket %s): ping: %w", t, sock, err)
	}
	return c, nil
}

// sshDialer opens one SSH connection per HTTP connection and forwards it to
// the node's Docker socket; closing the HTTP connection (client.Close, idle
// timeout) closes its SSH connection, so nothing leaks and a rebooted node
// is simply dialed again.
type sshDialer struct {
	target SSHTarget
	socket string
	mu     sync.Mutex
	first  *ssh.Client // from DockerClient's check, used by the first dial
}

func (d *sshDialer) closeFirst() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.first != nil {
		_ = d.first.Close()
		d.first = nil
	}
}

// DialContext satisfies http.Transport.DialContext; network/addr are ignored.
func (d *sshDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	d.mu.Lock()
	c := d.first
	d.first = nil
	d.mu.Unlock()
	if c == nil {
		var err error
		if c, err = Dial(ctx, d.target, dialTimeout(ctx)); err != nil {
			return nil, err
		}
	}
	conn, err := c.Dial("unix", d.socket)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("docker on %s: forward to %s: %w (the node's sshd needs `AllowStreamLocalForwarding yes` and the user access to the socket)", d.target, d.socket, err)
	}
	return &sshConn{Conn: conn, client: c}, nil
}

// sshConn closes its SSH client together with the forwarded stream.
type sshConn struct {
	net.Conn
	client *ssh.Client
}

func (c *sshConn) Close() error {
	err := c.Conn.Close()
	_ = c.client.Close()
	return err
}

func dialTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d); left > 0 && left < DefaultTimeout {
			return left
		}
	}
	return DefaultTimeout
}
