package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sparklane/sparklane/internal/node"
)

// Host runs shell commands on one node. It is the engine's only way to
// touch a node, so the engine is tested against a real sshd without knowing
// how the connection was made.
type Host interface {
	// Run runs cmd with sh on the node, feeding it stdin (nil: none), and
	// returns its output and exit status. A non-zero exit is not an error;
	// err is for failing to run at all.
	Run(ctx context.Context, cmd string, stdin io.Reader) (Result, error)
	// Name is the node's name, for messages.
	Name() string
}

// Result is what one remote command did.
type Result struct {
	// Stdout and Stderr are the command's output, kept to quote in errors.
	Stdout, Stderr string
	// Exit is the exit status (-1: it did not run to an exit).
	Exit int
}

// SSHHost is a Host over one SSH connection (host key checked against
// known_hosts by node.Dial, always).
type SSHHost struct {
	node   string
	target node.SSHTarget
	client *ssh.Client
}

// DialHost connects to node nodeName at t. Errors name the node and say what
// to do (the known_hosts line to check, the key to authorize).
func DialHost(ctx context.Context, nodeName string, t node.SSHTarget, timeout time.Duration) (*SSHHost, error) {
	c, err := node.Dial(ctx, t, timeout)
	if err != nil {
		return nil, &StepError{Node: nodeName, Step: "connect", Err: err}
	}
	return &SSHHost{node: nodeName, target: t, client: c}, nil
}

// Name is the node's name.
func (h *SSHHost) Name() string { return h.node }

// Target is how the node was reached.
func (h *SSHHost) Target() node.SSHTarget { return h.target }

// Close closes the SSH connection.
func (h *SSHHost) Close() error { return h.client.Close() }

// Run runs cmd in a new session of the connection.
func (h *SSHHost) Run(ctx context.Context, cmd string, stdin io.Reader) (Result, error) {
	s, err := h.client.NewSession()
	if err != nil {
		return Result{Exit: -1}, fmt.Errorf("ssh %s: open session: %w", h.target.Addr(), err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr, s.Stdin = &out, &errb, stdin
	if err := s.Start(cmd); err != nil {
		return Result{Exit: -1}, fmt.Errorf("ssh %s: start command: %w", h.target.Addr(), err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case werr := <-done:
		r := Result{Stdout: out.String(), Stderr: errb.String()}
		var ee *ssh.ExitError
		switch {
		case werr == nil:
			return r, nil
		case errors.As(werr, &ee):
			r.Exit = ee.ExitStatus()
			return r, nil
		default:
			r.Exit = -1
			return r, fmt.Errorf("ssh %s: %w", h.target.Addr(), werr)
		}
	case <-ctx.Done():
		_ = s.Signal(ssh.SIGKILL)
		_ = s.Close()
		// The output buffers may still be written by the session's
		// copiers: return none of them.
		return Result{Exit: -1}, fmt.Errorf("ssh %s: %w", h.target.Addr(), ctx.Err())
	}
}
