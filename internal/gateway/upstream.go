package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// laneTransport is the gateway's client to the lanes' heads over plain
// HTTP/1.1: each request is written and its answer read on the handler's
// own goroutine, on a connection kept alive per head (net/http's
// Transport hands every request to two goroutines per connection, which
// on a small control host costs a large share of the proxy's CPU). An
// https head goes through tls, net/http's Transport.
type laneTransport struct {
	tls     *http.Transport
	dialer  net.Dialer
	maxIdle int
	idleFor time.Duration

	mu   sync.Mutex
	idle map[string][]*laneConn // by host:port, most recent last
}

// laneConn is one kept-alive connection to a head.
type laneConn struct {
	addr string
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time
}

func newLaneTransport(tls *http.Transport) *laneTransport {
	return &laneTransport{tls: tls, dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		maxIdle: 256, idleFor: 90 * time.Second, idle: map[string][]*laneConn{}}
}

// get takes the most recent idle connection to addr (reused: true), or
// dials one (always, with fresh).
func (t *laneTransport) get(ctx context.Context, addr string, fresh bool) (*laneConn, bool, error) {
	t.mu.Lock()
	for l := t.idle[addr]; len(l) > 0 && !fresh; l = t.idle[addr] {
		pc := l[len(l)-1]
		t.idle[addr] = l[:len(l)-1]
		if time.Since(pc.used) < t.idleFor {
			t.mu.Unlock()
			return pc, true, nil
		}
		pc.c.Close()
	}
	t.mu.Unlock()
	c, err := t.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	return &laneConn{addr: addr, c: c, br: bufio.NewReaderSize(c, 32<<10), bw: bufio.NewWriterSize(c, 32<<10)}, false, nil
}

// put keeps pc for the next request to its head (or closes it past
// maxIdle).
func (t *laneTransport) put(pc *laneConn) {
	pc.used = time.Now()
	t.mu.Lock()
	if l := t.idle[pc.addr]; len(l) < t.maxIdle {
		t.idle[pc.addr] = append(l, pc)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	pc.c.Close()
}

// dropIdle closes every kept connection to addr: one was found closed
// by the engine, which may have restarted (a heal, a rollback), and then
// the others kept to it are as dead.
func (t *laneTransport) dropIdle(addr string) {
	t.mu.Lock()
	l := t.idle[addr]
	delete(t.idle, addr)
	t.mu.Unlock()
	for _, pc := range l {
		pc.c.Close()
	}
}

// CloseIdleConnections closes every kept-alive connection.
func (t *laneTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*laneConn{}
	t.mu.Unlock()
	for _, l := range idle {
		for _, pc := range l {
			pc.c.Close()
		}
	}
	t.tls.CloseIdleConnections()
}

// RoundTrip sends req and reads its answer's head; the body is read from
// the connection as the caller reads it. A request that finds a kept
// connection closed by the head before any answer byte is sent again on
// a newly dialled one (its body is replayed through GetBody), and the
// other connections kept to that head are dropped. The request's
// context ending closes the connection: a cancelled client, or a drain's
// cut-off, ends the engine's request.
func (t *laneTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		return t.tls.RoundTrip(req)
	}
	addr := req.URL.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "80")
	}
	req.Header.Del("Expect") // the body is in hand: no 100-continue
	if req.GetBody != nil {
		// Write the body from a reader net/http knows is in memory, so
		// the head and the body go out in one write (the proxy's wrapper
		// of the body would make it flush the head first).
		r2 := *req
		body, err := req.GetBody()
		closeBody(req)
		if err != nil {
			return nil, err
		}
		r2.Body = body
		req = &r2
	}
	for attempt := 0; ; attempt++ {
		pc, reused, err := t.get(req.Context(), addr, attempt > 0)
		if err != nil {
			closeBody(req)
			if errors.Is(err, syscall.ECONNREFUSED) {
				return nil, fmt.Errorf("%w: %v", errRefused, err)
			}
			return nil, err
		}
		resp, err := t.exchange(pc, req)
		if err == nil {
			return resp, nil
		}
		replay := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
		if !reused || !errors.Is(err, errStale) || attempt > 0 || !replay {
			closeBody(req)
			return nil, err
		}
		t.dropIdle(addr)
		if req.GetBody != nil {
			if req.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
	}
}

// errRefused is a head that refused the connection: nothing was sent.
var errRefused = errors.New("the lane's head refused the connection")

// errStale is a kept connection the head had closed.
var errStale = errors.New("kept connection closed by the engine")

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// exchange writes req on pc and reads the answer's head; on error pc is
// closed.
func (t *laneTransport) exchange(pc *laneConn, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { pc.c.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		pc.c.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	if err := req.Write(pc.bw); err != nil {
		return fail(fmt.Errorf("%w: %v", errStale, err))
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(fmt.Errorf("%w: %v", errStale, err))
	}
	if _, err := pc.br.Peek(1); err != nil {
		return fail(fmt.Errorf("%w: %v", errStale, err))
	}
	for {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			if resp.Body == http.NoBody { // nothing to read: the connection is free now
				if stop() && !resp.Close {
					t.put(pc)
				} else {
					pc.c.Close()
				}
				return resp, nil
			}
			resp.Body = &laneBody{rc: resp.Body, pc: pc, t: t, stop: stop, keep: !resp.Close}
			return resp, nil
		}
		resp.Body.Close() // an informational answer: the real one follows
	}
}

// laneBody is an answer's body on a kept connection: read to its end the
// connection goes back to the pool; closed early (or cut) it is closed.
type laneBody struct {
	rc   io.ReadCloser
	pc   *laneConn
	t    *laneTransport
	stop func() bool
	keep bool
	done bool
}

func (b *laneBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish(true)
	} else if err != nil {
		b.finish(false)
	}
	return n, err
}

func (b *laneBody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

// finish releases the connection: to the pool when the body was read to
// its end, the engine keeps it alive and no cancel fired; else closed.
func (b *laneBody) finish(eof bool) {
	b.done = true
	b.rc.Close()
	if b.stop() && eof && b.keep {
		b.t.put(b.pc)
		return
	}
	b.pc.c.Close()
}
