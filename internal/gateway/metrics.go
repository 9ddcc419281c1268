package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sparklane/sparklane/internal/contract"
)

// Reasons of sparklane_gateway_rejected_total: per cluster (a hold's
// bounds, an off cluster, a lane gone) and before any route is known.
var (
	clusterReasons = []string{"max_held", "hold_timeout", "off", "wake_failed", "stopping", "cut_off", "upstream_error"}
	globalReasons  = []string{"unauthorized", "forbidden", "too_large", "unknown_model", "no_model", "bad_request"}
)

// gwMetrics are the gateway's Prometheus metrics, each labelled with the
// gateway's name (several [[gateways]] may share a registry).
type gwMetrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	ttftH     *prometheus.HistogramVec
	heldG     *prometheus.GaugeVec
	holdH     *prometheus.HistogramVec
	drainedC  *prometheus.CounterVec
	rejectedC *prometheus.CounterVec
}

// newMetrics builds the metrics and registers them on reg (nil: none),
// with the series that exist before any route (unknown names, refusals).
func newMetrics(reg prometheus.Registerer, g *Gateway) (*gwMetrics, error) {
	cl := prometheus.Labels{"gateway": g.cfg.Name}
	m := &gwMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sparklane_gateway_requests_total", ConstLabels: cl,
			Help: "Requests the gateway answered, by model name asked (\"(unknown)\" for a name no lane serves, \"\" for none), lane and HTTP status (499: the client went away)."}, []string{"name", "lane", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sparklane_gateway_request_seconds", ConstLabels: cl,
			Help:    "Time from a request's arrival to the end of its answer (a stream's last byte), holds included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"name", "lane"}),
		ttftH: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sparklane_gateway_ttft_seconds", ConstLabels: cl,
			Help:    "Time to first token of streamed answers: from the request's arrival (holds included) to the first byte of the lane's event stream.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"name", "lane"}),
		heldG: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sparklane_gateway_held", ConstLabels: cl,
			Help: "Requests waiting now for a cluster's route (a switch, a heal, a power-on)."}, []string{"cluster"}),
		holdH: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sparklane_gateway_hold_seconds", ConstLabels: cl,
			Help:    "How long requests waited for a held or draining route, whatever ended the wait.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 15)}, []string{"cluster"}),
		drainedC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sparklane_gateway_drained_total", ConstLabels: cl,
			Help: "Requests in flight when a lane was drained: finished within the drain timeout, or cut off past it."}, []string{"cluster", "lane", "outcome"}),
		rejectedC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sparklane_gateway_rejected_total", ConstLabels: cl,
			Help: "Requests the gateway answered itself with an error, by cluster (\"\" before one is known) and reason."}, []string{"cluster", "reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.latency, m.ttftH, m.heldG, m.holdH, m.drainedC, m.rejectedC, &tableCollector{g: g, cl: cl}} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	m.requests.WithLabelValues(labelUnknown, "", "404")
	m.latency.WithLabelValues(labelUnknown, "")
	for _, r := range globalReasons {
		m.rejectedC.WithLabelValues("", r)
	}
	return m, nil
}

// zeroCluster makes a cluster's series exist (at zero) before its first
// hold or refusal.
func (m *gwMetrics) zeroCluster(cluster string) {
	m.heldG.WithLabelValues(cluster)
	m.holdH.WithLabelValues(cluster)
	for _, r := range clusterReasons {
		m.rejectedC.WithLabelValues(cluster, r)
	}
}

// zeroRoute makes a route's series exist before its first request.
func (m *gwMetrics) zeroRoute(r contract.GatewayRoute, names []string) {
	m.zeroCluster(r.Cluster)
	if r.Lane == "" {
		return
	}
	for _, n := range names {
		m.requests.WithLabelValues(n, r.Lane, "200")
		m.latency.WithLabelValues(n, r.Lane)
		m.ttftH.WithLabelValues(n, r.Lane)
	}
	m.drainedC.WithLabelValues(r.Cluster, r.Lane, "finished")
	m.drainedC.WithLabelValues(r.Cluster, r.Lane, "cut_off")
}

func (m *gwMetrics) request(name, lane string, status int, took time.Duration) {
	m.requests.WithLabelValues(name, lane, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(name, lane).Observe(took.Seconds())
}

func (m *gwMetrics) ttft(name, lane string, took time.Duration) {
	m.ttftH.WithLabelValues(name, lane).Observe(took.Seconds())
}

func (m *gwMetrics) heldNow(cluster string, n int) { m.heldG.WithLabelValues(cluster).Set(float64(n)) }

func (m *gwMetrics) holdEnded(cluster string, d time.Duration) {
	m.holdH.WithLabelValues(cluster).Observe(d.Seconds())
}

func (m *gwMetrics) drained(cluster, lane string, finished, cutOff int) {
	m.drainedC.WithLabelValues(cluster, lane, "finished").Add(float64(finished))
	m.drainedC.WithLabelValues(cluster, lane, "cut_off").Add(float64(cutOff))
}

func (m *gwMetrics) rejected(cluster, reason string) {
	m.rejectedC.WithLabelValues(cluster, reason).Inc()
}

// tableCollector exports the route table at each scrape: each route's
// state and the requests in flight on each lane.
type tableCollector struct {
	g  *Gateway
	cl prometheus.Labels
}

func (c *tableCollector) descs() (route, inFlight *prometheus.Desc) {
	return prometheus.NewDesc("sparklane_gateway_route", "1 for each cluster's route, labelled with its lane and state (serving, held, draining, off).", []string{"cluster", "lane", "state"}, c.cl),
		prometheus.NewDesc("sparklane_gateway_in_flight", "Requests forwarded to a lane and not yet answered (streams included).", []string{"cluster", "lane"}, c.cl)
}

func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	r, f := c.descs()
	ch <- r
	ch <- f
}

func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	rd, fd := c.descs()
	type row struct {
		cluster, lane, state string
		inFlight             int
	}
	g := c.g
	g.mu.Lock()
	rows := make([]row, 0, len(g.order))
	for _, cluster := range g.order {
		rt := g.routes[cluster]
		r := row{cluster: cluster, lane: rt.Lane, state: rt.State}
		if lf := g.flights[flightKey{cluster, rt.Lane}]; lf != nil {
			r.inFlight = len(lf.set)
		}
		rows = append(rows, r)
	}
	g.mu.Unlock() // not held while the registry reads: requests route meanwhile
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(rd, prometheus.GaugeValue, 1, r.cluster, r.lane, r.state)
		ch <- prometheus.MustNewConstMetric(fd, prometheus.GaugeValue, float64(r.inFlight), r.cluster, r.lane)
	}
}
