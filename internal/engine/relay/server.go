package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/pki"
)

// Server serves a node's Registry to its peers over mTLS. It binds the
// node's fleet address and requires a client certificate from the fleet CA
// on every connection, so it is never an unauthenticated listener.
type Server struct {
	// Registry is what the node can serve.
	Registry *Registry
	// RegisterTimeout bounds how long a request waits for this node to
	// register the block (its stage of it not begun yet; default 2 min);
	// StartTimeout how long for this node to begin the file (default 10
	// min: it works through its files in plan order). The peer then reads
	// the NAS.
	RegisterTimeout, StartTimeout time.Duration
	// StallTimeout bounds how long a stream waits for this node's copy to
	// advance before it ends with an error.
	StallTimeout time.Duration
	// Log may be nil.
	Log *zap.Logger

	srv    *http.Server
	ln     net.Listener
	served atomic.Int64
}

// Listen binds addr (host:port of the node's fleet address) with tlsConf,
// which must require and verify client certificates (ServerTLS makes one).
func (s *Server) Listen(addr string, tlsConf *tls.Config) error {
	if tlsConf == nil || tlsConf.ClientAuth != tls.RequireAndVerifyClientCert || tlsConf.ClientCAs == nil {
		return errors.New("relay server: a TLS config requiring verified client certificates is mandatory (use relay.ServerTLS)")
	}
	if s.StartTimeout <= 0 {
		s.StartTimeout = 10 * time.Minute
	}
	if s.RegisterTimeout <= 0 {
		s.RegisterTimeout = min(2*time.Minute, s.StartTimeout)
	}
	if s.StallTimeout <= 0 {
		s.StallTimeout = time.Minute
	}
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("relay server: listen on %s (the node's fleet address and relay port): %w", addr, err)
	}
	s.ln = tls.NewListener(ln, tlsConf)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/file", s.file)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second, ErrorLog: zap.NewStdLog(s.Log)}
	go s.srv.Serve(s.ln)
	return nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Served is how many file bytes this server has sent to peers.
func (s *Server) Served() int64 { return s.served.Load() }

// Close stops the server and its streams.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Close()
}

// Shutdown stops accepting and waits for streams until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Shutdown(ctx)
}

const streamBuf = 1 << 20

// file streams GET /v1/file?block=KEY&path=REL&off=N: the bytes of REL
// from N on, up to what this node has fsynced, waiting for more while its
// own copy advances. A stream that cannot continue (the copy restarted,
// failed or stalled) is aborted, so the peer sees an error, never a short
// clean body.
func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || !strings.HasPrefix(r.TLS.PeerCertificates[0].Subject.CommonName, pki.FleetPeerPrefix) {
		http.Error(w, "relay: a fleet node's relay certificate is required", http.StatusForbidden)
		return
	}
	q := r.URL.Query()
	key, rel := q.Get("block"), q.Get("path")
	off, err := strconv.ParseInt(q.Get("off"), 10, 64)
	if key == "" || rel == "" || err != nil || off < 0 {
		http.Error(w, "relay: block, path and off are required", http.StatusBadRequest)
		return
	}
	reg := time.NewTimer(s.RegisterTimeout)
	defer reg.Stop()
	e, ok := s.Registry.lookup(key, rel, reg.C, r.Context().Done())
	if !ok {
		http.Error(w, fmt.Sprintf("relay: block %s file %s is not planned on this node (or not registered within %s)", key, rel, s.RegisterTimeout), http.StatusNotFound)
		return
	}
	deadline := time.NewTimer(s.StartTimeout)
	defer deadline.Stop()
	// Wait for the copy to begin.
	for {
		e.mu.Lock()
		st, wake, size := e.state, e.wake, e.size
		e.mu.Unlock()
		if st == stateFailed {
			http.Error(w, "relay: this node's copy of "+rel+" failed", http.StatusConflict)
			return
		}
		if off > size {
			http.Error(w, "relay: offset past the end of "+rel, http.StatusRequestedRangeNotSatisfiable)
			return
		}
		if st != statePending {
			break
		}
		select {
		case <-wake:
		case <-deadline.C:
			http.Error(w, "relay: "+rel+" not begun on this node within "+s.StartTimeout.String(), http.StatusServiceUnavailable)
			return
		case <-r.Context().Done():
			return
		}
	}
	e.mu.Lock()
	gen := e.gen
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	buf := make([]byte, streamBuf)
	stall := time.NewTimer(s.StallTimeout)
	defer stall.Stop()
	for {
		e.mu.Lock()
		st, f, avail, size, wake, g := e.state, e.f, e.synced, e.size, e.wake, e.gen
		e.mu.Unlock()
		if g != gen || st == stateFailed || f == nil {
			panic(http.ErrAbortHandler) // the peer must see an error, not EOF
		}
		if off >= size {
			return
		}
		if off < avail {
			n := min(int64(len(buf)), avail-off)
			m, err := f.ReadAt(buf[:n], off)
			if int64(m) < n {
				s.Log.Warn("relay: read for a peer failed", zap.String("block", key), zap.String("path", rel), zap.Error(err))
				panic(http.ErrAbortHandler)
			}
			if _, err := w.Write(buf[:m]); err != nil {
				return
			}
			off += int64(m)
			s.served.Add(int64(m))
			if fl != nil && off >= avail {
				fl.Flush()
			}
			stall.Reset(s.StallTimeout) // Go ≥ 1.23: no stale tick survives a Reset
			continue
		}
		select {
		case <-wake:
		case <-stall.C:
			s.Log.Warn("relay: this node's copy stalled; ending a peer's stream", zap.String("block", key), zap.String("path", rel), zap.Int64("offset", off))
			panic(http.ErrAbortHandler)
		case <-r.Context().Done():
			return
		}
	}
}
