package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdkmetrics "go.temporal.io/sdk/client"
)

// Metrics is one process's registry: the SDK's metrics and sparklane's.
type Metrics struct {
	reg *prometheus.Registry

	stagingBytes  *prometheus.CounterVec
	stagingRate   *prometheus.GaugeVec
	stagingDone   *prometheus.GaugeVec
	filesVerified *prometheus.CounterVec
	filesRepaired *prometheus.CounterVec
	readiness     *prometheus.GaugeVec
	probeTPS      *prometheus.GaugeVec
	probeTTFT     *prometheus.GaugeVec
	benchTG       *prometheus.GaugeVec
	nodeOutage    *prometheus.GaugeVec
	keeperRestart *prometheus.CounterVec
	laneUp        *prometheus.GaugeVec
	fetchBytes    *prometheus.CounterVec
	imageBytes    *prometheus.CounterVec

	mu  sync.Mutex
	sdk map[string]*sdkVec // SDK metric name → its collector

	nodes *nodeUp
}

// New builds a registry with the Go runtime and process collectors and
// sparklane's metrics, all prefixed sparklane_.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{reg: reg, sdk: map[string]*sdkVec{}}
	block := []string{"lane", "node", "block"}
	m.stagingBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sparklane_staging_bytes_total", Help: "Bytes staged (copied) onto a node's disk, per lane, node and staging block."}, block)
	m.stagingRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sparklane_staging_bytes_per_second", Help: "Copy rate of the last staging pass, per lane, node and block."}, block)
	m.stagingDone = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sparklane_staging_pass_bytes", Help: "Bytes done so far by the running (or last) staging pass, copied or checked, per lane, node and block: live progress of an hours-long copy."}, block)
	m.filesVerified = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sparklane_files_verified_total", Help: "Staged files checked against the ledger."}, block)
	m.filesRepaired = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sparklane_files_repaired_total", Help: "Files a staging pass copied again into a destination it had staged before (content no longer matched, or gone)."}, block)
	m.readiness = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sparklane_readiness_seconds", Help: "Seconds from container start to the lane answering, last cutover."}, []string{"lane"})
	m.probeTPS = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sparklane_probe_decode_tokens_per_second", Help: "Decode tok/s measured by the last probe of a lane."}, []string{"lane"})
	m.probeTTFT = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sparklane_probe_ttft_seconds", Help: "Time to first token measured by the last probe of a lane."}, []string{"lane"})
	m.benchTG = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sparklane_bench_decode_tokens_per_second", Help: "Aggregate decode tok/s of the last bench of a lane."}, []string{"lane"})
	m.nodeOutage = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sparklane_node_outage_seconds", Help: "How long a run has been waiting for a node whose worker is gone (0 when back)."}, []string{"node"})
	m.keeperRestart = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sparklane_keeper_restarts_total", Help: "Whole-lane restarts a cluster's keeper made after a failed check."}, []string{"cluster", "lane"})
	m.laneUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sparklane_lane_up", Help: "1 when the kept lane passed its keeper's last check, 0 when it failed (or was stopped as a crash loop)."}, []string{"cluster", "lane"})
	m.fetchBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sparklane_fetch_bytes_total", Help: "Bytes downloaded from the Hub into the NAS (starter fetch), per lane and repo."}, []string{"lane", "repo"})
	m.imageBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sparklane_image_bytes_total", Help: "Bytes of a lane's engine image a node received from another node (the source) in an image transfer: only the layers it lacked."}, []string{"lane", "node", "source"})
	m.nodes = &nodeUp{checks: map[string]nodeCheck{}, desc: prometheus.NewDesc("sparklane_node_up",
		"1 when the node's worker is up: 1 for the nodes this process serves, else whether a worker polled the node's task queue in the last 90 s (asked at each scrape).", []string{"node"}, nil)}
	reg.MustRegister(m.stagingBytes, m.stagingRate, m.stagingDone, m.filesVerified, m.filesRepaired, m.readiness, m.probeTPS, m.probeTTFT, m.benchTG, m.nodeOutage, m.keeperRestart, m.laneUp, m.fetchBytes, m.imageBytes, m.nodes)
	return m
}

// BuildInfo exports sparklane_build_info{version, commit, go_version} 1,
// so a dashboard shows which build runs from the first scrape.
func (m *Metrics) BuildInfo(version, commit, goVersion string) {
	if m == nil {
		return
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sparklane_build_info", Help: "The running sparklane build (always 1).",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "go_version": goVersion}})
	g.Set(1)
	if err := m.reg.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
	}
}

// NodeServed marks node as served by this process: sparklane_node_up is 1
// for it whatever NodeCheck says.
func (m *Metrics) NodeServed(node string) {
	if m == nil {
		return
	}
	m.nodes.set(node, nodeCheck{local: true})
}

// NodeCheck makes sparklane_node_up{node} the answer of up, asked at
// each scrape (bounded to a few seconds), unless this process serves node.
func (m *Metrics) NodeCheck(node string, up func(ctx context.Context) bool) {
	if m == nil {
		return
	}
	m.nodes.set(node, nodeCheck{up: up})
}

// ZeroLane exports the per-lane series of the control service
// (readiness, probe and bench) for lane at zero when it has none yet, so
// a dashboard's panels have a series before the lane's first cutover.
func (m *Metrics) ZeroLane(lane string) {
	if m == nil {
		return
	}
	for _, g := range []*prometheus.GaugeVec{m.readiness, m.probeTPS, m.probeTTFT, m.benchTG} {
		g.WithLabelValues(lane) // creates the child at 0, keeps a value
	}
}

// ZeroBlocks exports the staging and verify series of lane's blocks on
// node at zero when they have none yet (counters start at 0 anyway).
func (m *Metrics) ZeroBlocks(lane, node string, blocks []string) {
	if m == nil {
		return
	}
	for _, b := range blocks {
		m.stagingBytes.WithLabelValues(lane, node, b)
		m.stagingRate.WithLabelValues(lane, node, b)
		m.stagingDone.WithLabelValues(lane, node, b)
		m.filesVerified.WithLabelValues(lane, node, b)
		m.filesRepaired.WithLabelValues(lane, node, b)
	}
}

// ZeroNode exports sparklane_node_outage_seconds{node} at 0 when it has
// no value yet (no run waits for the node).
func (m *Metrics) ZeroNode(node string) {
	if m == nil {
		return
	}
	m.nodeOutage.WithLabelValues(node)
}

// nodeCheck is how one node's sparklane_node_up is found.
type nodeCheck struct {
	local bool
	up    func(ctx context.Context) bool
}

// nodeUp is the sparklane_node_up collector: a series per node known,
// computed at scrape time.
type nodeUp struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	checks map[string]nodeCheck
}

func (n *nodeUp) set(node string, c nodeCheck) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if old, ok := n.checks[node]; ok && old.local && !c.local {
		return // served here: up as long as this process runs
	}
	n.checks[node] = c
}

func (n *nodeUp) Describe(ch chan<- *prometheus.Desc) { ch <- n.desc }

func (n *nodeUp) Collect(ch chan<- prometheus.Metric) {
	n.mu.Lock()
	checks := make(map[string]nodeCheck, len(n.checks))
	for k, v := range n.checks {
		checks[k] = v
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for node, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := 0.0
			if c.local || (c.up != nil && c.up(ctx)) {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(n.desc, prometheus.GaugeValue, v, node)
		}()
	}
	wg.Wait()
}

// Staged records a staging pass: bytes copied and how fast. Every
// recorder is a no-op on a nil *Metrics, so code built without metrics
// (unit tests, the CLI) needs no checks.
func (m *Metrics) Staged(lane, node, block string, bytes int64, took time.Duration) {
	if m == nil {
		return
	}
	m.stagingBytes.WithLabelValues(lane, node, block).Add(float64(bytes))
	if took > 0 {
		m.stagingRate.WithLabelValues(lane, node, block).Set(float64(bytes) / took.Seconds())
	}
}

// StagingProgress records a running pass's bytes done (copied or checked).
func (m *Metrics) StagingProgress(lane, node, block string, bytesDone int64) {
	if m == nil {
		return
	}
	m.stagingDone.WithLabelValues(lane, node, block).Set(float64(bytesDone))
}

// Verified records a verify pass: files checked and files re-copied.
func (m *Metrics) Verified(lane, node, block string, checked, repaired int) {
	if m == nil {
		return
	}
	m.filesVerified.WithLabelValues(lane, node, block).Add(float64(checked))
	m.filesRepaired.WithLabelValues(lane, node, block).Add(float64(repaired))
}

// Ready records how long a lane took to answer after its containers started.
func (m *Metrics) Ready(lane string, took time.Duration) {
	if m == nil {
		return
	}
	m.readiness.WithLabelValues(lane).Set(took.Seconds())
}

// Probed records a lane's decode probe.
func (m *Metrics) Probed(lane string, decodeTPS float64, ttft time.Duration) {
	if m == nil {
		return
	}
	m.probeTPS.WithLabelValues(lane).Set(decodeTPS)
	m.probeTTFT.WithLabelValues(lane).Set(ttft.Seconds())
}

// Benched records a lane's bench result.
func (m *Metrics) Benched(lane string, decodeTPS float64) {
	if m == nil {
		return
	}
	m.benchTG.WithLabelValues(lane).Set(decodeTPS)
}

// NodeOutage records how long a node has been gone (0 when it is back).
func (m *Metrics) NodeOutage(node string, down time.Duration) {
	if m == nil {
		return
	}
	m.nodeOutage.WithLabelValues(node).Set(down.Seconds())
}

// KeeperRestart counts one whole-lane restart by a cluster's keeper.
func (m *Metrics) KeeperRestart(cluster, lane string) {
	if m == nil {
		return
	}
	m.keeperRestart.WithLabelValues(cluster, lane).Inc()
}

// LaneUp records whether a kept lane passed its keeper's last check.
func (m *Metrics) LaneUp(cluster, lane string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.laneUp.WithLabelValues(cluster, lane).Set(v)
}

// Fetched counts bytes downloaded from the Hub for a lane's repo.
func (m *Metrics) Fetched(lane, repo string, bytes int64) {
	if m == nil || bytes <= 0 {
		return
	}
	m.fetchBytes.WithLabelValues(lane, repo).Add(float64(bytes))
}

// ImageReceived counts bytes of lane's image node received from source.
func (m *Metrics) ImageReceived(lane, node, source string, bytes int64) {
	if m == nil || bytes <= 0 {
		return
	}
	m.imageBytes.WithLabelValues(lane, node, source).Add(float64(bytes))
}

// ZeroImages exports sparklane_image_bytes_total of lane on node at zero
// for each node of its cluster it may receive the image from.
func (m *Metrics) ZeroImages(lane, node string, sources []string) {
	if m == nil {
		return
	}
	for _, s := range sources {
		if s != node {
			m.imageBytes.WithLabelValues(lane, node, s)
		}
	}
}

// Registerer is the registry, for metrics another package keeps (the
// gateway's sparklane_gateway_*), served with these.
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Serve serves /metrics on addr (host:port; port 0 picks one) until ctx
// ends, and returns the address it listens on. Metrics carry no secrets,
// but bind it to loopback or the fleet's network, not the world.
func (m *Metrics) Serve(ctx context.Context, addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = l.Close()
		}
	}()
	return l.Addr().String(), nil
}

// SDKHandler is the Temporal SDK's metrics handler over this registry
// (client.Options.MetricsHandler): SDK counters, gauges and timers become
// Prometheus counters, gauges and histograms named temporal_…
func (m *Metrics) SDKHandler() sdkmetrics.MetricsHandler { return &sdkHandler{m: m} }

// sdkVec is one SDK metric: its label names are fixed by its first use
// (Prometheus needs one label set per name); a later use with other tags
// maps them onto those names (missing ones empty, extra ones dropped)
// rather than failing.
type sdkVec struct {
	labels  []string
	counter *prometheus.CounterVec
	gauge   *prometheus.GaugeVec
	hist    *prometheus.HistogramVec
}

type sdkHandler struct {
	m    *Metrics
	tags map[string]string
}

func (h *sdkHandler) WithTags(tags map[string]string) sdkmetrics.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &sdkHandler{m: h.m, tags: merged}
}

func (h *sdkHandler) vec(name, kind string) (*sdkVec, []string) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	key := kind + " " + name
	v, ok := h.m.sdk[key]
	if !ok {
		v = &sdkVec{}
		for k := range h.tags {
			v.labels = append(v.labels, sanitize(k))
		}
		sort.Strings(v.labels)
		pname := sanitize(name)
		if !strings.HasPrefix(pname, "temporal_") {
			pname = "temporal_" + pname
		}
		var c prometheus.Collector
		switch kind {
		case "counter":
			v.counter = prometheus.NewCounterVec(prometheus.CounterOpts{Name: pname + "_total", Help: "Temporal SDK counter " + name + "."}, v.labels)
			c = v.counter
		case "gauge":
			v.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: pname, Help: "Temporal SDK gauge " + name + "."}, v.labels)
			c = v.gauge
		default:
			v.hist = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: pname + "_seconds", Help: "Temporal SDK timer " + name + ".", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, v.labels)
			c = v.hist
		}
		if err := h.m.reg.Register(c); err != nil {
			// A name clash with another kind: keep the metric unexported
			// rather than break the worker.
			v.counter, v.gauge, v.hist = nil, nil, nil
		}
		h.m.sdk[key] = v
	}
	vals := make([]string, len(v.labels))
	for k, val := range h.tags {
		sk := sanitize(k)
		if i := sort.SearchStrings(v.labels, sk); i < len(v.labels) && v.labels[i] == sk {
			vals[i] = val
		}
	}
	return v, vals
}

func (h *sdkHandler) Counter(name string) sdkmetrics.MetricsCounter {
	v, vals := h.vec(name, "counter")
	if v.counter == nil {
		return nopMetric{}
	}
	c := v.counter.WithLabelValues(vals...)
	return counterFunc(func(d int64) { c.Add(float64(d)) })
}

func (h *sdkHandler) Gauge(name string) sdkmetrics.MetricsGauge {
	v, vals := h.vec(name, "gauge")
	if v.gauge == nil {
		return nopMetric{}
	}
	g := v.gauge.WithLabelValues(vals...)
	return gaugeFunc(g.Set)
}

func (h *sdkHandler) Timer(name string) sdkmetrics.MetricsTimer {
	v, vals := h.vec(name, "timer")
	if v.hist == nil {
		return nopMetric{}
	}
	o := v.hist.WithLabelValues(vals...)
	return timerFunc(func(d time.Duration) { o.Observe(d.Seconds()) })
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }

type nopMetric struct{}

func (nopMetric) Inc(int64)            {}
func (nopMetric) Update(float64)       {}
func (nopMetric) Record(time.Duration) {}

// sanitize makes a Prometheus name: letters, digits and underscores.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' && i > 0) {
			b[i] = '_'
		}
	}
	return string(b)
}
