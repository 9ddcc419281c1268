package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The rank protocol is line-based over one TCP connection per worker:
//
//	worker → rank 0: HELLO <rank> <nnodes>
//	rank 0 → worker: OK | ERR <why>
//	worker → rank 0: LOADED (once its weights are read)
//	both ways:       HB every heartbeat interval
//
// A peer silent for six intervals, or a closed connection, is gone.

type mesh struct {
	cfg    *Config
	logf   func(string, ...any)
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	ln       net.Listener
	conns    map[int]net.Conn
	loadedBy map[int]bool
	changed  chan struct{}
	closed   bool

	// worker side
	connected   chan struct{}
	conn        net.Conn
	workerWrite func(string) error
}

func startMesh(ctx context.Context, cancel context.CancelCauseFunc, cfg *Config, logf func(string, ...any)) (*mesh, error) {
	m := &mesh{cfg: cfg, logf: logf, cancel: cancel, conns: map[int]net.Conn{}, loadedBy: map[int]bool{}, changed: make(chan struct{}, 1), connected: make(chan struct{})}
	if cfg.NodeRank == 0 {
		ln, err := net.Listen("tcp", cfg.DistInitAddr)
		if err != nil && errors.Is(err, syscall.EADDRNOTAVAIL) {
			// The head address is not on this host's interfaces (NAT,
			// a name resolving elsewhere): listen on the port everywhere,
			// as the engines' rendezvous stores do.
			_, port, _ := net.SplitHostPort(cfg.DistInitAddr)
			ln, err = net.Listen("tcp", ":"+port)
		}
		if err != nil {
			return nil, fmt.Errorf("rank 0: listen on --dist-init-addr %s: %v: is another engine using the port?", cfg.DistInitAddr, err)
		}
		m.ln = ln
		if cfg.OnDistListen != nil {
			cfg.OnDistListen(ln.Addr())
		}
		logf("rank 0 waiting for %d other ranks at %s", cfg.NNodes-1, ln.Addr())
		go m.accept(ctx)
		return m, nil
	}
	go m.dial(ctx)
	return m, nil
}

func (m *mesh) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.ln != nil {
		m.ln.Close()
	}
	for _, c := range m.conns {
		c.Close()
	}
	if m.conn != nil {
		m.conn.Close()
	}
}

func (m *mesh) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// timeout is how long a peer may stay silent before it counts as gone: six
// heartbeats, and never under 30 s. A peer that dies closes its socket and
// is seen at once; the timeout is for a peer that hangs or a link that
// drops, and a real engine's collective timeout is minutes. Three seconds
// (six default heartbeats) was short enough for a loaded 2-core CI
// machine to starve a rank's heartbeat and stop a healthy head right after
// it turned ready.
func (m *mesh) timeout() time.Duration { return max(6*m.cfg.Heartbeat, minPeerTimeout) }

const minPeerTimeout = 30 * time.Second

// lineWriter returns the one way to write to c: writers take turns, and
// each write is bounded by the heartbeat timeout.
func (m *mesh) lineWriter(c net.Conn) func(string) error {
	var mu sync.Mutex
	return func(s string) error {
		mu.Lock()
		defer mu.Unlock()
		c.SetWriteDeadline(time.Now().Add(m.timeout()))
		_, err := c.Write([]byte(s))
		return err
	}
}

func (m *mesh) accept(ctx context.Context) {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if !m.isClosed() && ctx.Err() == nil {
				m.cancel(fmt.Errorf("rank 0: accept on %s: %v", m.ln.Addr(), err))
			}
			return
		}
		go m.serveRank(ctx, c)
	}
}

func (m *mesh) serveRank(ctx context.Context, c net.Conn) {
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(m.timeout()))
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return
	}
	f := strings.Fields(line)
	rank, nn := -1, -1
	if len(f) == 3 && f[0] == "HELLO" {
		rank, _ = strconv.Atoi(f[1])
		nn, _ = strconv.Atoi(f[2])
	}
	reject := func(why string) {
		fmt.Fprintf(c, "ERR %s\n", why)
		c.Close()
		m.logf("rank 0 refused a rank from %s: %s", c.RemoteAddr(), why)
	}
	switch {
	case rank < 1 || rank >= m.cfg.NNodes:
		reject(fmt.Sprintf("rank %d outside 1..%d (rank 0 has --nnodes %d)", rank, m.cfg.NNodes-1, m.cfg.NNodes))
		return
	case nn != m.cfg.NNodes:
		reject(fmt.Sprintf("rank %d has --nnodes %d, rank 0 has %d", rank, nn, m.cfg.NNodes))
		return
	}
	m.mu.Lock()
	if _, dup := m.conns[rank]; dup {
		m.mu.Unlock()
		reject(fmt.Sprintf("rank %d already joined", rank))
		return
	}
	m.conns[rank] = c
	m.mu.Unlock()
	write := m.lineWriter(c)
	if err := write("OK\n"); err != nil {
		m.lost(ctx, rank, c, err)
		return
	}
	m.logf("rank %d joined from %s", rank, c.RemoteAddr())
	go m.heartbeat(ctx, write)
	for {
		c.SetReadDeadline(time.Now().Add(m.timeout()))
		line, err := r.ReadString('\n')
		if err != nil {
			m.lost(ctx, rank, c, err)
			return
		}
		if strings.TrimSpace(line) == "LOADED" {
			m.mu.Lock()
			m.loadedBy[rank] = true
			m.mu.Unlock()
			m.logf("rank %d loaded", rank)
			select {
			case m.changed <- struct{}{}:
			default:
			}
		}
	}
}

func (m *mesh) lost(ctx context.Context, rank int, c net.Conn, err error) {
	if m.isClosed() || ctx.Err() != nil {
		return
	}
	why := "connection closed"
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		why = fmt.Sprintf("no heartbeat for %s", m.timeout())
	} else if err != nil && !errors.Is(err, net.ErrClosed) && err.Error() != "EOF" {
		why = err.Error()
	}
	m.cancel(fmt.Errorf("rank 0: rank %d (%s) left the group: %s; exiting like a real engine whose peer died", rank, c.RemoteAddr(), why))
}

func (m *mesh) heartbeat(ctx context.Context, write func(string) error) {
	t := time.NewTicker(m.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if write("HB\n") != nil {
				return
			}
		}
	}
}

// dial connects a worker to rank 0, retrying until rank 0 is up.
func (m *mesh) dial(ctx context.Context) {
	addr := m.cfg.DistInitAddr
	m.logf("rank %d connecting to rank 0 at %s", m.cfg.NodeRank, addr)
	var c net.Conn
	for {
		d := net.Dialer{Timeout: 2 * time.Second}
		var err error
		c, err = d.DialContext(ctx, "tcp", addr)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	write := m.lineWriter(c)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		c.Close()
		return
	}
	m.conn = c
	m.mu.Unlock()
	if err := write(fmt.Sprintf("HELLO %d %d\n", m.cfg.NodeRank, m.cfg.NNodes)); err != nil {
		m.cancel(fmt.Errorf("rank %d: join rank 0 at %s: %v", m.cfg.NodeRank, addr, err))
		return
	}
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(m.timeout()))
	line, err := r.ReadString('\n')
	if err != nil {
		m.cancel(fmt.Errorf("rank %d: join rank 0 at %s: no answer: %v", m.cfg.NodeRank, addr, err))
		return
	}
	if line = strings.TrimSpace(line); line != "OK" {
		m.cancel(fmt.Errorf("rank %d: rank 0 at %s refused the join: %s", m.cfg.NodeRank, addr, strings.TrimPrefix(line, "ERR ")))
		return
	}
	m.workerWrite = write
	close(m.connected)
	m.logf("rank %d joined rank 0 at %s", m.cfg.NodeRank, addr)
	go m.heartbeat(ctx, write)
	for {
		c.SetReadDeadline(time.Now().Add(m.timeout()))
		if _, err := r.ReadString('\n'); err != nil {
			if !m.isClosed() && ctx.Err() == nil {
				m.cancel(fmt.Errorf("rank %d: rank 0 at %s went away (%v); exiting", m.cfg.NodeRank, addr, err))
			}
			return
		}
	}
}

// loaded tells rank 0 this worker is loaded, or on rank 0 waits until
// every worker is.
func (m *mesh) loaded(ctx context.Context) error {
	if m.cfg.NodeRank != 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.connected:
		}
		if err := m.workerWrite("LOADED\n"); err != nil {
			return fmt.Errorf("rank %d: tell rank 0 at %s it is loaded: %v", m.cfg.NodeRank, m.cfg.DistInitAddr, err)
		}
		return nil
	}
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		m.mu.Lock()
		var missing []string
		for r := 1; r < m.cfg.NNodes; r++ {
			if !m.loadedBy[r] {
				missing = append(missing, strconv.Itoa(r))
			}
		}
		m.mu.Unlock()
		if len(missing) == 0 {
			m.logf("all %d ranks joined and loaded", m.cfg.NNodes)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.changed:
		case <-tick.C:
			m.logf("rank 0 still waiting for ranks %s", strings.Join(missing, ","))
		}
	}
}
