package simtest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/sim"
)

// PipeNet is an in-memory network with one listener: sim.Config.Listener
// serves on it and Client dials it, every connection a net.Pipe. Under
// testing/synctest a goroutine blocked on a socket is not durably blocked,
// so the fake clock would never advance; on pipes it does, and an engine
// and a bench client then run on virtual time: what they measure is the
// engine's pacing, exactly, however busy the machine is. Create it inside
// the bubble that uses it (its channels belong to that bubble).
type PipeNet struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// NewPipeNet returns an open PipeNet.
func NewPipeNet() *PipeNet {
	return &PipeNet{conns: make(chan net.Conn), closed: make(chan struct{})}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "engine-sim.pipe" }

// Accept waits for the next Dial; after Close it returns net.ErrClosed.
func (p *PipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.closed:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial; connections already made stay open.
func (p *PipeNet) Close() error {
	p.once.Do(func() { close(p.closed) })
	return nil
}

// Addr is a placeholder address ("engine-sim.pipe").
func (p *PipeNet) Addr() net.Addr { return pipeAddr{} }

// Dial connects to the listener, whatever the address.
func (p *PipeNet) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-p.closed:
		client.Close()
		server.Close()
		return nil, errors.New("engine-sim pipe network: closed")
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// Client is an HTTP client whose every connection is a Dial; its idle
// connections are closed by CloseIdleConnections (do so before the bubble
// ends, or their reading goroutines outlive it).
func (p *PipeNet) Client() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: p.Dial, DisableCompression: true}}
}

// StartOnPipe runs cfg in-process on a new PipeNet (cfg.Listener is set
// here), waits until it serves, and returns it with the client that
// reaches it; both are closed in t.Cleanup. Call it inside the synctest
// bubble the test runs in.
func StartOnPipe(t testing.TB, cfg sim.Config) (*Engine, *http.Client) {
	t.Helper()
	pipe := NewPipeNet()
	cfg.Listener = pipe
	e := Start(t, cfg)
	e.WaitServing(t, 30*time.Second)
	c := pipe.Client()
	t.Cleanup(c.CloseIdleConnections)
	return e, c
}
