package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/sparklane/sparklane/internal/node"
)

// Target is one node the tunnel reaches.
type Target struct {
	Node string
	SSH  node.SSHTarget
}

// State is one tunnel's last known condition.
type State struct {
	Node string `json:"node"`
	// Up is true while the remote listener is in place.
	Up bool `json:"up"`
	// Since is when Up last changed.
	Since time.Time `json:"since"`
	// Err is the last failure (dial, host key, listen), for operators.
	Err string `json:"error,omitempty"`
	// Conns counts connections forwarded so far.
	Conns int64 `json:"conns"`
}

// Keeper holds the tunnels of a set of nodes.
type Keeper struct {
	// Frontend is the control host's Temporal frontend (127.0.0.1:7233).
	Frontend string
	// RemotePort is the port opened on each node's 127.0.0.1.
	RemotePort int
	// Log receives connect/disconnect lines (nil: none).
	Log *zap.Logger
	// MaxBackoff caps the wait between reconnects (default 30s).
	MaxBackoff time.Duration
	// KeepAlive is how often a tunnel is checked with an SSH keepalive
	// request, so a dead link is noticed and redialled (default 15s).
	KeepAlive time.Duration

	mu     sync.Mutex
	states map[string]*State
}

// Run keeps a tunnel to every target until ctx ends.
func (k *Keeper) Run(ctx context.Context, targets []Target) {
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.keep(ctx, t)
		}()
	}
	wg.Wait()
}

// States returns every tunnel's state.
func (k *Keeper) States() []State {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []State
	for _, s := range k.states {
		out = append(out, *s)
	}
	return out
}

func (k *Keeper) set(node string, up bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.states == nil {
		k.states = map[string]*State{}
	}
	s, ok := k.states[node]
	if !ok {
		s = &State{Node: node}
		k.states[node] = s
	}
	if s.Up != up || s.Since.IsZero() {
		s.Since = time.Now()
	}
	s.Up = up
	s.Err = ""
	if err != nil {
		s.Err = err.Error()
	}
}

func (k *Keeper) count(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.states[node]; ok {
		s.Conns++
	}
}

func (k *Keeper) log() *zap.Logger {
	if k.Log == nil {
		return zap.NewNop()
	}
	return k.Log
}

func (k *Keeper) keep(ctx context.Context, t Target) {
	maxBackoff := k.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 30 * time.Second
	}
	backoff := time.Second
	for ctx.Err() == nil {
		start := time.Now()
		err := k.serve(ctx, t)
		if ctx.Err() != nil {
			k.set(t.Node, false, nil)
			return
		}
		k.set(t.Node, false, err)
		k.log().Warn("tunnel to node down; reconnecting", zap.String("node", t.Node), zap.String("ssh", t.SSH.String()), zap.Error(err), zap.Duration("in", backoff))
		if time.Since(start) > 2*maxBackoff {
			backoff = time.Second // it was up for a while: retry promptly
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// serve holds one SSH connection and its remote listener until either
// fails or ctx ends.
func (k *Keeper) serve(ctx context.Context, t Target) error {
	client, err := node.Dial(ctx, t.SSH, node.DefaultTimeout)
	if err != nil {
		return err
	}
	defer client.Close()
	remote := net.JoinHostPort("127.0.0.1", strconv.Itoa(k.RemotePort))
	ln, err := client.Listen("tcp", remote)
	if err != nil {
		return fmt.Errorf("node %s: ask sshd at %s to listen on its %s (ssh -R): %w; check AllowTcpForwarding in the node's sshd_config and that nothing else holds the port", t.Node, t.SSH.Addr(), remote, err)
	}
	defer ln.Close()
	k.set(t.Node, true, nil)
	k.log().Info("tunnel to node up", zap.String("node", t.Node), zap.String("remote", remote), zap.String("frontend", k.Frontend))

	done := make(chan error, 2)
	go func() { done <- k.watch(ctx, client) }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				done <- fmt.Errorf("node %s: remote listener closed: %w", t.Node, err)
				return
			}
			k.count(t.Node)
			go k.forward(c)
		}
	}()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-done:
		return err
	}
}

// watch sends keepalives so a silent dead link is noticed.
func (k *Keeper) watch(ctx context.Context, client *ssh.Client) error {
	every := k.KeepAlive
	if every <= 0 {
		every = 15 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			errc := make(chan error, 1)
			go func() {
				_, _, err := client.SendRequest("keepalive@openssh.com", true, nil)
				errc <- err
			}()
			select {
			case err := <-errc:
				if err != nil {
					return fmt.Errorf("keepalive: %w", err)
				}
			case <-time.After(every):
				return errors.New("keepalive: no answer: link down")
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

func (k *Keeper) forward(remote net.Conn) {
	defer remote.Close()
	local, err := net.DialTimeout("tcp", k.Frontend, 10*time.Second)
	if err != nil {
		k.log().Warn("tunnel: control frontend refused a forwarded connection", zap.String("frontend", k.Frontend), zap.Error(err))
		return
	}
	defer local.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(local, remote); closeWrite(local); done <- struct{}{} }()
	go func() { _, _ = io.Copy(remote, local); closeWrite(remote); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
