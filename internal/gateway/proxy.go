package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/contract"
)

// Metric label values of requests that name no routed model.
const (
	labelUnknown = "(unknown)" // a name no route claims
	labelNone    = ""          // no model: /v1/models, a GET, or refused before
)

// statusCanceled is the status recorded for a client that went away
// before it was answered (nginx's 499).
const statusCanceled = 499

// call is one client request as the gateway handles it: what the metrics
// record when it ends.
type call struct {
	start  time.Time
	name   string // the metric label of its model
	lane   string
	status int
}

func (g *Gateway) serveHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	c := &call{start: g.now(), name: labelNone}
	defer func() {
		status := sw.status
		if status == 0 {
			status = c.status
		}
		g.m.request(c.name, c.lane, status, g.now().Sub(c.start))
	}()
	path := r.URL.Path
	switch {
	case path == "/health":
		sw.Header().Set("Content-Type", "application/json")
		sw.WriteHeader(http.StatusOK)
		io.WriteString(sw, "{\"status\":\"ok\"}\n")
		return
	case !strings.HasPrefix(path, "/v1/"):
		g.reject(sw, &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "unknown_path",
			msg: fmt.Sprintf("no route for %s: the gateway serves the OpenAI API under /v1/", path)})
		return
	}
	k, aerr := g.authenticate(r)
	if aerr != nil {
		g.reject(sw, aerr)
		return
	}
	if path == "/v1/models" || strings.HasPrefix(path, "/v1/models/") {
		g.serveModels(sw, r, k)
		return
	}
	body, aerr := g.readBody(r)
	if aerr != nil {
		g.reject(sw, aerr)
		return
	}
	name, start, end, found, err := modelField(body)
	if err != nil {
		g.reject(sw, &apiError{status: http.StatusBadRequest, typ: typeInvalid, code: "invalid_json", msg: err.Error(), reason: "bad_request"})
		return
	}
	pick := g.pickOnly(k)
	if found {
		pick = g.pickName(name, k)
		c.name = labelUnknown
	}
	var waited *refusedWait
	defer func() { waited.end() }()
	for {
		rt, f, fk, aerr := g.admit(r.Context(), pick)
		if rt != nil && rt.target != nil {
			c.lane = rt.Lane
			if found {
				c.name = name
			}
		}
		if aerr != nil {
			if aerr == errGone {
				c.status = statusCanceled
				return
			}
			g.reject(sw, aerr)
			return
		}
		out := body
		if found && name != rt.Served {
			out = rewriteModel(body, start, end, rt.Served)
		}
		if !g.forwardOnce(sw, r, out, rt, f, fk, c) {
			return
		}
		// The lane's head refused the connection before anything was
		// sent (its engine died; the keeper has not held it yet): the
		// request waits as a held one and is sent again.
		if waited == nil {
			waited = g.startRefusedWait(rt)
		}
		if aerr := waited.wait(r.Context(), rt); aerr != nil {
			if aerr == errGone {
				c.status = statusCanceled
				return
			}
			g.reject(sw, aerr)
			return
		}
	}
}

// forwardOnce is forward with the request in flight on its lane until it
// returns — or panics: the proxy aborts a broken answer with
// http.ErrAbortHandler, and the flight must end all the same.
func (g *Gateway) forwardOnce(sw *statusWriter, r *http.Request, body []byte, rt *route, f *flight, fk flightKey, c *call) bool {
	defer g.leave(fk, f)
	return g.forward(sw, r, body, rt, f, c)
}

// reject answers with e and counts it.
func (g *Gateway) reject(w http.ResponseWriter, e *apiError) {
	if e.reason != "" {
		g.m.rejected(e.cluster, e.reason)
	}
	e.write(w)
}

// readBody reads the request's body, at most max_body bytes (413 past it).
func (g *Gateway) readBody(r *http.Request) ([]byte, *apiError) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	max := g.cfg.MaxBody
	tooLarge := &apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalid, code: "request_too_large", reason: "too_large",
		msg: fmt.Sprintf("the request body is larger than this gateway's max_body (%d bytes)", max)}
	if r.ContentLength > max {
		return nil, tooLarge
	}
	var b []byte
	var err error
	if r.ContentLength > 0 {
		b = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, b)
	} else {
		b, err = io.ReadAll(io.LimitReader(r.Body, max+1))
		if int64(len(b)) > max {
			return nil, tooLarge
		}
	}
	if err != nil {
		return nil, &apiError{status: http.StatusBadRequest, typ: typeInvalid, code: "body_unreadable", reason: "bad_request",
			msg: "the request body could not be read: " + err.Error()}
	}
	return b, nil
}

// pickName resolves a request for name (called with g.mu held).
func (g *Gateway) pickName(name string, k *key) func() (*route, *apiError) {
	return func() (*route, *apiError) {
		rt := g.names[name]
		if rt == nil {
			return nil, errUnknownModel(name, namesOf(g.modelsLocked(k)))
		}
		if !k.allows(name) {
			return nil, errForbidden(name)
		}
		return rt, nil
	}
}

// pickOnly resolves a request that names no model: the one routed
// cluster, or 400 (g.mu held).
func (g *Gateway) pickOnly(k *key) func() (*route, *apiError) {
	return func() (*route, *apiError) {
		var only *route
		n := 0
		for _, c := range g.order {
			if rt := g.routes[c]; rt.target != nil {
				only, n = rt, n+1
			}
		}
		switch {
		case n == 0:
			return nil, errNothingRouted()
		case n > 1:
			return nil, errNoModel(namesOf(g.modelsLocked(k)))
		}
		for _, name := range routeNames(only.GatewayRoute) {
			if g.names[name] == only && k.allows(name) {
				return only, nil
			}
		}
		return nil, errForbidden(only.Served)
	}
}

// errGone is a client that went away while its request was held.
var errGone = &apiError{status: statusCanceled}

// admit waits while the request's route is held or draining, and
// registers it in flight on the lane once it serves. pick is called with
// g.mu held, again after every change of the table.
func (g *Gateway) admit(ctx context.Context, pick func() (*route, *apiError)) (*route, *flight, flightKey, *apiError) {
	var (
		heldOn string // the cluster this request counts as held on
		since  time.Time
		timer  *time.Timer
	)
	unhold := func() { // g.mu held
		if heldOn != "" {
			g.held[heldOn]--
			g.m.heldNow(heldOn, g.held[heldOn])
			g.m.holdEnded(heldOn, g.now().Sub(since))
			heldOn = ""
		}
	}
	defer func() {
		g.mu.Lock()
		unhold()
		g.mu.Unlock()
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		g.mu.Lock()
		rt, aerr := pick()
		if aerr != nil {
			g.mu.Unlock()
			return rt, nil, flightKey{}, aerr
		}
		switch rt.State {
		case contract.GatewayServing:
			unhold()
			f, k := g.enter(ctx, rt)
			g.mu.Unlock()
			return rt, f, k, nil
		case contract.GatewayDown:
			g.mu.Unlock()
			return rt, nil, flightKey{}, errDown(rt)
		case contract.GatewayOff:
			g.mu.Unlock()
			// A request that waited does not wake the cluster again (a
			// failed wake is not retried by every request it held).
			if !g.cfg.Wake || g.wake == nil || timer != nil {
				return rt, nil, flightKey{}, errOff(rt)
			}
			if err := g.wakeCluster(rt.Cluster); err != nil {
				return rt, nil, flightKey{}, errWake(rt)
			}
			continue
		}
		if heldOn != rt.Cluster {
			unhold()
			if g.held[rt.Cluster] >= g.cfg.MaxHeld {
				g.mu.Unlock()
				return rt, nil, flightKey{}, errHeldTooMany(rt, g.cfg.MaxHeld)
			}
			g.held[rt.Cluster]++
			heldOn, since = rt.Cluster, g.now()
			g.m.heldNow(heldOn, g.held[heldOn])
		}
		if timer == nil {
			timer = time.NewTimer(g.cfg.HoldTimeout)
		}
		changed := rt.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return rt, nil, flightKey{}, errHoldTimeout(rt, g.cfg.HoldTimeout)
		case <-ctx.Done():
			return rt, nil, flightKey{}, errGone
		case <-g.stopping:
			return rt, nil, flightKey{}, errStopping(rt.Cluster)
		}
	}
}

// wakeWhy is the Why of a route a request woke.
const wakeWhy = "powering on: woken by a request"

// wakeCluster turns cluster from off to held and calls Options.Wake; a
// failed wake turns it back off. A cluster already woken is left as it is.
func (g *Gateway) wakeCluster(cluster string) error {
	var nodes []string
	woke := false
	err := g.change(func(t *table) error {
		if i := t.find(cluster); i >= 0 && t.list[i].State == contract.GatewayOff {
			t.list[i].State, t.list[i].Why = contract.GatewayHeld, wakeWhy
			nodes, woke = t.list[i].Nodes, true
		}
		return nil
	})
	if err != nil || !woke {
		return err
	}
	g.log.Info("gateway wake", zap.String("cluster", cluster), zap.Strings("nodes", nodes))
	if err := g.wake(cluster, nodes); err != nil {
		g.log.Error("gateway wake failed", zap.String("cluster", cluster), zap.Error(err))
		if cerr := g.change(func(t *table) error {
			if i := t.find(cluster); i >= 0 && t.list[i].State == contract.GatewayHeld && t.list[i].Why == wakeWhy {
				t.list[i].State, t.list[i].Why = contract.GatewayOff, "off: its power-on could not be started"
			}
			return nil
		}); cerr != nil {
			g.log.Error("gateway wake: keep the table", zap.Error(cerr))
		}
		return err
	}
	return nil
}

// proxied is what the proxy's hooks need of one forwarded request (a
// value of its context).
type proxied struct {
	rt *route
	f  *flight
	c  *call
	// refused: the head refused the connection before anything was sent,
	// and nothing was written to the client (the request may go again).
	refused bool
}

type proxiedKey struct{}

// newProxy is the one reverse proxy of a gateway: each request carries
// its route in its context (forward). Answers of unknown length and event
// streams are flushed after every write (httputil's rule for them);
// answers of known length go out as the server buffers them.
func (g *Gateway) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			p := pr.In.Context().Value(proxiedKey{}).(*proxied)
			pr.SetURL(p.rt.target)
			pr.Out.Header.Del("Authorization") // the client's key never reaches an engine
			pr.SetXForwarded()
		},
		Transport:  g.lanes,
		BufferPool: &g.bufs,
		ModifyResponse: func(resp *http.Response) error {
			return g.upstreamResponse(resp, resp.Request.Context().Value(proxiedKey{}).(*proxied))
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.upstreamError(w, err, r.Context().Value(proxiedKey{}).(*proxied))
		},
		ErrorLog: zap.NewStdLog(g.log.Named("proxy")),
	}
}

// forward sends the request to rt's lane and copies the answer back; it
// reports a head that refused the connection before anything was sent
// (then nothing was written to w).
func (g *Gateway) forward(w *statusWriter, r *http.Request, body []byte, rt *route, f *flight, c *call) bool {
	p := &proxied{rt: rt, f: f, c: c}
	out := r.WithContext(context.WithValue(f.ctx, proxiedKey{}, p))
	out.Body, out.ContentLength = http.NoBody, 0
	if len(body) > 0 {
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	g.proxy.ServeHTTP(w, out)
	return p.refused
}

// upstreamResponse names the lane in the answer's headers, maps an error
// answer to OpenAI's shape naming the lane, and times a stream's first
// byte.
func (g *Gateway) upstreamResponse(resp *http.Response, p *proxied) error {
	rt, c := p.rt, p.c
	resp.Header.Set("Sparklane-Lane", rt.Lane)
	if resp.StatusCode >= 400 {
		return mapUpstreamError(resp, rt)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		name, lane := c.name, c.lane
		first := &firstByte{ReadCloser: resp.Body, fn: func() { g.m.ttft(name, lane, g.now().Sub(c.start)) }}
		resp.Body = &streamEnd{ReadCloser: first, fail: func(err error) []byte { return g.streamBroke(err, p) }}
	}
	return nil
}

// streamBroke is the event that ends a client's stream whose lane stopped
// answering mid-way (its status line went out already): an error event
// in OpenAI's shape naming the lane, which clients report as a stream
// error instead of a cut transfer. A drain's cut-off says so; a client
// that went away gets nothing (nil).
func (g *Gateway) streamBroke(err error, p *proxied) []byte {
	rt, f := p.rt, p.f
	var e *apiError
	switch {
	case context.Cause(f.ctx) == errCutOff:
		e = &apiError{typ: typeServer, code: "lane_stopped", reason: "cut_off", cluster: rt.Cluster,
			msg: fmt.Sprintf("lane %s (cluster %s) stopped mid-answer: it was draining and its drain_timeout passed; retry", rt.Lane, rt.Cluster)}
	case f.ctx.Err() != nil:
		return nil
	default:
		g.log.Warn("gateway: lane stopped mid-stream", zap.String("cluster", rt.Cluster), zap.String("lane", rt.Lane), zap.String("base_url", rt.BaseURL), zap.Error(err))
		why := errClass(err)
		if strings.Contains(err.Error(), "EOF") {
			why = "its connection closed"
		}
		e = &apiError{typ: typeServer, code: "lane_unreachable", reason: "upstream_error", cluster: rt.Cluster,
			msg: fmt.Sprintf("lane %s (cluster %s) stopped mid-answer: %s", rt.Lane, rt.Cluster, why)}
	}
	g.m.rejected(e.cluster, e.reason)
	return append(append([]byte("data: "), bytes.TrimSpace(e.body())...), '\n', '\n')
}

// streamEnd is an event stream's body from a lane: a read error that
// fail turns into a last event is passed on as that event and a clean
// end; fail's nil passes the error on (the proxy aborts the answer).
type streamEnd struct {
	io.ReadCloser
	fail func(error) []byte
	tail []byte
	done bool
}

func (s *streamEnd) Read(p []byte) (int, error) {
	if s.done {
		if len(s.tail) == 0 {
			return 0, io.EOF
		}
		n := copy(p, s.tail)
		s.tail = s.tail[n:]
		return n, nil
	}
	n, err := s.ReadCloser.Read(p)
	if err == nil || err == io.EOF {
		return n, err
	}
	tail := s.fail(err)
	if tail == nil {
		return n, err
	}
	s.done, s.tail = true, tail
	return n, nil
}

// upstreamError answers a request its lane did not answer: cut off by a
// drain (503), the client gone (nothing to write), or the engine
// unreachable (502, the lane named, never its address).
func (g *Gateway) upstreamError(w http.ResponseWriter, err error, p *proxied) {
	rt, f, c := p.rt, p.f, p.c
	switch {
	case context.Cause(f.ctx) == errCutOff:
		g.reject(w, &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "lane_stopped", retryAfter: retryAfter(rt.ETA),
			msg:    fmt.Sprintf("lane %s (cluster %s) stopped before answering: it was draining and its drain_timeout passed; retry", rt.Lane, rt.Cluster),
			reason: "cut_off", cluster: rt.Cluster})
	case f.ctx.Err() != nil:
		c.status = statusCanceled
	case errors.Is(err, errRefused):
		p.refused = true
	default:
		g.log.Warn("gateway: lane did not answer", zap.String("cluster", rt.Cluster), zap.String("lane", rt.Lane), zap.String("base_url", rt.BaseURL), zap.Error(err))
		g.reject(w, &apiError{status: http.StatusBadGateway, typ: typeServer, code: "lane_unreachable",
			msg:    fmt.Sprintf("lane %s (cluster %s) did not answer: %s", rt.Lane, rt.Cluster, errClass(err)),
			reason: "upstream_error", cluster: rt.Cluster})
	}
}

// errClass says what went wrong reaching a lane without its address.
func errClass(err error) string {
	s := err.Error()
	for _, c := range []struct{ in, say string }{
		{"connection refused", "connection refused (is the engine up?)"},
		{"connection reset", "connection reset"},
		{"timeout", "timed out"},
		{"EOF", "the connection closed before an answer"},
		{"no such host", "its address does not resolve"},
	} {
		if strings.Contains(s, c.in) {
			return c.say
		}
	}
	return "the request failed"
}

// firstByte calls fn once, when the first bytes of a body are read.
type firstByte struct {
	io.ReadCloser
	fn   func()
	seen bool
}

func (b *firstByte) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.seen {
		b.seen = true
		b.fn()
	}
	return n, err
}

// statusWriter remembers the status the client was answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flush).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// bufferPool lends the proxy its copy buffers.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
