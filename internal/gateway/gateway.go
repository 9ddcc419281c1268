package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// Options is what a gateway is built from: its [gateway] table and what the
// process around it provides.
type Options struct {
	// Gateway is the [gateway] table (New applies WithDefaults to what
	// the caller did not).
	Gateway config.Gateway
	// StateFile is where the route table is kept (written atomically on
	// every change, read by New); "" keeps it in memory only (tests).
	StateFile string
	// Log receives the gateway's lines (never a key); nil discards them.
	Log *zap.Logger
	// Registerer gets the sparklane_gateway_* metrics; nil registers none
	// (they are still counted).
	Registerer prometheus.Registerer
	// Wake starts the power-on of a cluster off by schedule (with
	// [gateway] wake = true); nil: no wake, an off cluster answers 503.
	Wake func(cluster string, nodes []string) error
	// Now is the clock of durations the gateway reports (drain seconds,
	// hold and request latency); nil: time.Now.
	Now func() time.Time
}

// Gateway is one running front door: its route table, the requests it
// holds and those in flight per lane.
type Gateway struct {
	cfg       config.Gateway
	stateFile string
	log       *zap.Logger
	now       func() time.Time
	wake      func(cluster string, nodes []string) error
	tlsConf   *tls.Config
	keys      atomic.Pointer[keyring] // nil: anonymous (no api_keys_file)
	m         *gwMetrics
	transport *http.Transport // to https heads
	lanes     *laneTransport
	proxy     *httputil.ReverseProxy
	bufs      bufferPool

	stopping chan struct{} // closed when Serve shuts down: held requests get 503
	stopOnce sync.Once

	wmu sync.Mutex // serializes table changes, so the file's order is the memory's

	mu      sync.Mutex
	order   []string          // clusters, in the order their routes were set
	routes  map[string]*route // by cluster
	names   map[string]*route // every name a route claims (the last set wins)
	held    map[string]int    // requests waiting, by cluster
	flights map[flightKey]*laneFlights
	// ready is each lane's last ready time (a hold's ETA for it); written,
	// the held counts the state file says (refreshHeld; under wmu).
	ready   map[string]contract.Duration
	written string
}

// New builds a gateway from o: it refuses a listen address beyond loopback
// without api_keys_file (unless allow_anonymous), loads the keys file, the
// TLS pair and the route table in StateFile (when present).
func New(o Options) (*Gateway, error) {
	g := &Gateway{
		cfg: o.Gateway.WithDefaults(), stateFile: o.StateFile, log: o.Log, now: o.Now, wake: o.Wake,
		stopping: make(chan struct{}),
		routes:   map[string]*route{}, names: map[string]*route{},
		held: map[string]int{}, flights: map[flightKey]*laneFlights{},
	}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	if g.now == nil {
		g.now = time.Now
	}
	if err := checkExposure(g.cfg); err != nil {
		return nil, err
	}
	if g.cfg.APIKeysFile != "" {
		if err := g.ReloadKeys(); err != nil {
			return nil, err
		}
	}
	if (g.cfg.TLSCert == "") != (g.cfg.TLSKey == "") {
		return nil, fmt.Errorf("gateway %s: tls_cert and tls_key go together: give both, or neither", g.label())
	}
	if g.cfg.TLSCert != "" {
		pair, err := tls.LoadX509KeyPair(g.cfg.TLSCert, g.cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("gateway %s: tls_cert %s and tls_key %s: %v", g.label(), g.cfg.TLSCert, g.cfg.TLSKey, err)
		}
		g.tlsConf = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	g.transport = newTransport()
	g.lanes = newLaneTransport(g.transport)
	g.proxy = g.newProxy()
	m, err := newMetrics(o.Registerer, g)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: metrics: %w", g.label(), err)
	}
	g.m = m
	if g.stateFile != "" {
		if err := os.MkdirAll(filepath.Dir(g.stateFile), 0o700); err != nil {
			return nil, fmt.Errorf("gateway %s: state file %s: %w", g.label(), g.stateFile, err)
		}
	}
	sf, err := loadTable(g.stateFile)
	if err != nil {
		return nil, err
	}
	g.ready = sf.Ready
	if g.ready == nil {
		g.ready = map[string]contract.Duration{}
	}
	g.install(sf.Routes)
	for _, c := range g.cfg.Clusters {
		g.m.zeroCluster(c)
	}
	return g, nil
}

// label names the gateway in errors and logs.
func (g *Gateway) label() string {
	if g.cfg.Name == "" {
		return "[gateway]"
	}
	return fmt.Sprintf("%q", g.cfg.Name)
}

// checkExposure refuses a listen address beyond loopback that anyone
// could call without a key.
func checkExposure(c config.Gateway) error {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("gateway listen %q is not host:port: write it like \"127.0.0.1:8080\"", c.Listen)
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && c.APIKeysFile == "" && !c.AllowAnonymous {
		return fmt.Errorf("gateway listen %s is beyond loopback and no api_keys_file is set: give api_keys_file (sha256 hashes of the keys), or allow_anonymous = true to serve anyone who reaches it", c.Listen)
	}
	return nil
}

// newTransport is the client side to the lanes: many idle connections per
// head (a burst of held requests is released at once), no compression
// (bodies pass through as the engine wrote them), no response timeout (a
// long prefill is not an error; the client's cancel ends it).
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}

// Listen opens the gateway's listen address (the caller passes the
// listener to Serve).
func (g *Gateway) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: listen %s: %w (is another process on the port? change [gateway] listen)", g.label(), g.cfg.Listen, err)
	}
	return ln, nil
}

// Handler is the gateway's HTTP handler: /v1/* and /health.
func (g *Gateway) Handler() http.Handler { return http.HandlerFunc(g.serveHTTP) }

// Serve answers on ln (over TLS when tls_cert is set) until ctx ends, then
// shuts down: held requests get 503, requests in flight get up to
// drain_timeout to finish. A gateway serves once.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(g.log.Named("http")),
		TLSConfig:         g.tlsConf,
	}
	errc := make(chan error, 1)
	go func() {
		if g.tlsConf != nil {
			errc <- srv.ServeTLS(ln, "", "")
			return
		}
		errc <- srv.Serve(ln)
	}()
	g.log.Info("gateway serving", zap.String("gateway", g.cfg.Name), zap.Stringer("addr", ln.Addr()), zap.Bool("tls", g.tlsConf != nil))
	go g.refreshEvery(ctx, time.Second)
	select {
	case <-ctx.Done():
	case err := <-errc:
		g.stop()
		return fmt.Errorf("gateway %s on %s: %w", g.label(), ln.Addr(), err)
	}
	g.stop()
	sctx, cancel := context.WithTimeout(context.Background(), g.cfg.DrainTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	srv.Close()
	<-errc
	g.lanes.CloseIdleConnections()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("gateway %s: shutdown: %w", g.label(), err)
	}
	return nil
}

// refreshEvery refreshes the held counts in the state file every d until
// ctx ends.
func (g *Gateway) refreshEvery(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.refreshHeld()
		}
	}
}

// etaOf is lane's last ready time, when the gateway has one, else eta.
func (g *Gateway) etaOf(lane string, eta contract.Duration) contract.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.ready[lane]; r > 0 && lane != "" {
		return r
	}
	return eta
}

func nonEmpty(s, dflt string) string {
	if s != "" {
		return s
	}
	return dflt
}

// stop ends every hold (held requests answer 503).
func (g *Gateway) stop() { g.stopOnce.Do(func() { close(g.stopping) }) }

// parseBase reads a route's base_url: http or https with a host.
func parseBase(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("base_url %q is not http(s)://HOST:PORT", s)
	}
	return u, nil
}
