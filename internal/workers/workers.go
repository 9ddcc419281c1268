package workers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/buildinfo"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/metrics"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/pki"
	"github.com/sparklane/sparklane/internal/tclient"
	"github.com/sparklane/sparklane/internal/tunnel"
	"github.com/sparklane/sparklane/workflows"
)

// Deps are what the workers of one process are built from: the client,
// the config, the logger, the metrics registry and the test seams.
type Deps struct {
	Client client.Client
	Config *config.Config
	Log    *zap.Logger
	// Metrics records the activities' metrics (nil: none).
	Metrics *metrics.Metrics
	// Seams are the activities' fault points, set only by tests (nil in
	// production: see activities.Seams).
	Seams *activities.Seams
}

// deps are the Deps of e's workers.
func (e *Env) deps() Deps {
	return Deps{Client: e.Client, Config: e.Cfg, Log: e.Log, Metrics: e.Metrics, Seams: e.Seams}
}

// NewControlWorker registers every workflow and the control activities on
// the sparklane queue; uiURL is the web UI base for links in reports ("":
// none).
func NewControlWorker(d Deps, uiURL string) worker.Worker {
	c, cfg, log, m := d.Client, d.Config, d.Log, d.Metrics
	// Heartbeats (a fetch's bytes, why it retries) reach the server within
	// ProgressEvery, as a node worker's do.
	w := worker.New(c, contract.ControlQueue, worker.Options{WorkerStopTimeout: 10 * time.Second, MaxHeartbeatThrottleInterval: ProgressEvery})
	for _, wf := range []any{
		workflows.FleetProbe, workflows.StageNode, workflows.Stage, workflows.Verify,
		workflows.Serve, workflows.Probe, workflows.Stop, workflows.Cutover, workflows.Bench, workflows.Power, workflows.Disk, workflows.NodeLease, workflows.Keeper, workflows.Fetch,
	} {
		w.RegisterWorkflow(wf)
	}
	w.RegisterActivity(&activities.ControlActivities{Config: cfg, Log: log.Named("control"), Version: buildinfo.Version, UIURL: uiURL, Temporal: c, Metrics: m, Seams: d.Seams})
	// Hub fetches run here when fetch_node is "control" (the default).
	w.RegisterActivity(&activities.FetchActivities{Where: config.FetchControl, Log: log.Named("fetch"), Metrics: m, Seams: d.Seams})
	seedControlMetrics(c, cfg, m)
	return w
}

// NewNodeWorker registers the node activities of node name on node.NAME;
// d.Metrics records their staging and verify metrics (nil: none).
func NewNodeWorker(d Deps, name string) (worker.Worker, error) {
	c, cfg, log, m := d.Client, d.Config, d.Log, d.Metrics
	var n *config.Node
	for i := range cfg.Nodes {
		if cfg.Nodes[i].Name == name {
			n = &cfg.Nodes[i]
		}
	}
	if n == nil {
		var names []string
		for _, x := range cfg.Nodes {
			names = append(names, x.Name)
		}
		return nil, fmt.Errorf("node %q is not in %s (nodes: %v)", name, cfg.File, names)
	}
	w := worker.New(c, contract.NodeQueue(name), NodeWorkerOptions())
	nlog := log.Named("node." + name)
	// Registry logins a pull never read (this worker died first) go
	// within their TTL; the next pull and write sweep too.
	images.SweepCredentials(n.LocalPath(images.CredentialDir, nil), images.CredentialTTL, time.Now())
	rcv, stop := startRelay(cfg, n, nlog)
	w.RegisterActivity(&activities.NodeActivities{Node: *n, SharedRoots: cfg.SharedRoots, HFCacheDir: cfg.HFCacheDir, Log: nlog, Metrics: m,
		Relay: rcv, RelayAddr: relayAddr(cfg.StateDir), ImageTLS: imageTLS(cfg, n, nlog), ImagePort: cfg.ImagePort, Staging: cfg.Staging, Seams: d.Seams})
	// Hub fetches run here when fetch_node names this node.
	node := *n
	w.RegisterActivity(&activities.FetchActivities{Where: name, Log: nlog.Named("fetch"), Metrics: m, Seams: d.Seams,
		Local: func(p string) string { return node.LocalPath(p, cfg.SharedRoots) }})
	seedNodeMetrics(cfg, name, m)
	return nodeWorker{Worker: w, stopRelay: stop, watch: &rankWatch{c: c, cfg: cfg, node: *n, log: nlog}}, nil
}

// ProgressEvery bounds how long an activity's progress (its heartbeat
// details: bytes staged or fetched, why a fetch retries) waits before it
// reaches the server, where starters read it, on node and control
// workers alike. The SDK's default holds heartbeats for 80% of
// the heartbeat timeout — 48 s for staging — so a starter showed 0 B for
// most of a minute and then a burst.
const ProgressEvery = 5 * time.Second

// NodeWorkerOptions are a node worker's options: heartbeats sent at least
// every ProgressEvery, and a bounded stop.
func NodeWorkerOptions() worker.Options {
	return worker.Options{WorkerStopTimeout: 10 * time.Second, MaxHeartbeatThrottleInterval: ProgressEvery}
}

// runUntilDone starts workers and stops them when ctx ends (SIGTERM).
func runUntilDone(ctx context.Context, ws ...worker.Worker) error {
	var started []worker.Worker
	for _, w := range ws {
		if err := w.Start(); err != nil {
			for _, s := range started {
				s.Stop()
			}
			return err
		}
		started = append(started, w)
	}
	<-ctx.Done()
	for _, w := range started {
		w.Stop()
	}
	return nil
}

// RunControl runs the control worker until ctx ends (e from Connect with
// ConnectOptions.Metrics, so its metrics are served).
func RunControl(ctx context.Context, e *Env) error {
	return runUntilDone(ctx, NewControlWorker(e.deps(), ""))
}

// RunNode runs node name's worker until ctx ends.
func RunNode(ctx context.Context, e *Env, name string) error {
	w, err := NewNodeWorker(e.deps(), name)
	if err != nil {
		return err
	}
	return runUntilDone(ctx, w)
}

// TunnelTargets are the remote nodes (non-empty ssh) the control service
// tunnels its embedded frontend to.
func TunnelTargets(cfg *config.Config) ([]tunnel.Target, error) {
	var out []tunnel.Target
	for _, n := range cfg.Nodes {
		if n.SSH == "" {
			continue
		}
		t, err := node.ParseSSH(n.SSH)
		if err != nil {
			return nil, fmt.Errorf("%s: nodes %s: ssh %q: %w", cfg.File, n.Name, n.SSH, err)
		}
		t.KnownHosts, t.Identity = n.KnownHosts, n.Identity
		out = append(out, tunnel.Target{Node: n.Name, SSH: t})
	}
	return out, nil
}

// LocalNodes are the nodes of this machine (empty ssh).
func LocalNodes(cfg *config.Config) []string {
	var out []string
	for _, n := range cfg.Nodes {
		if n.SSH == "" {
			out = append(out, n.Name)
		}
	}
	return out
}

// Env is a connection to Temporal, plus whatever was started in-process to
// provide it.
type Env struct {
	Cfg    *config.Config
	Log    *zap.Logger
	Client client.Client
	// Server is the embedded server when this process started it.
	Server EmbeddedServer
	// Address is the frontend address dialed.
	Address string
	// UIURL is the web UI base URL, when known.
	UIURL string
	// Metrics is this process's registry when it hosts workers (the SDK's
	// metrics of Client and the activities'); nil otherwise.
	Metrics *metrics.Metrics
	// MetricsAddress is where Metrics is served (/metrics), when it is.
	MetricsAddress string
	// Seams are the fault points of the workers this process starts
	// (ConnectOptions.Seams; nil in production).
	Seams   *activities.Seams
	workers []worker.Worker
}

// EmbeddedServer is an embedded Temporal server (internal/devserver) this
// process started.
type EmbeddedServer interface {
	FrontendAddress() string
	UIURL() string
	Stop() error
}

// EmbeddedOptions say where and how an embedded server runs (the fields of
// devserver.Options that Connect sets).
type EmbeddedOptions struct {
	StateDir  string
	Port      int
	UIPort    int
	Namespace string
	Logger    *zap.Logger
}

// startEmbedded starts the embedded server; nil in programs that do not
// link it in.
var startEmbedded func(context.Context, EmbeddedOptions) (EmbeddedServer, error)

// Embedded makes start the embedded server of this program. Only programs
// that host the control service call it (through a blank import of
// internal/workers/embedded: worker, orchbench, the end-to-end tests):
// the server and its web UI are most of a binary's packages, and the
// starter, a client of the control service, starts in a fifth of the
// time without their initialisation.
func Embedded(start func(context.Context, EmbeddedOptions) (EmbeddedServer, error)) {
	startEmbedded = start
}

// ConnectOptions choose what Connect may start in-process.
type ConnectOptions struct {
	// LocalWorkers starts the control worker and a worker for every local
	// node when this process started the embedded server.
	LocalWorkers bool
	// NoUI starts the embedded server without its web UI.
	NoUI bool
	// NoEmbedded never starts a server: `worker control` and `worker node`
	// join the one `worker dev` (or a cluster) runs, or fail saying so.
	NoEmbedded bool
	// Metrics gives the client the registry's SDK metrics handler and the
	// in-process workers its recorders (worker processes pass
	// ServeMetrics's registry; starter commands none).
	Metrics *metrics.Metrics
	// Seams are the fault points of the workers this process starts
	// (Options.Seams: tests only; nil in production).
	Seams *activities.Seams
}

// Dial connects to the Temporal frontend at address (a running control
// service's), hosting nothing in this process.
func Dial(ctx context.Context, cfg *config.Config, log *zap.Logger, address, uiURL string) (*Env, error) {
	c, err := control.Dial(ctx, cfg, log, address, uiURL)
	if err != nil {
		return nil, err
	}
	return &Env{Cfg: cfg, Log: log, Client: c.Client, Address: c.Address, UIURL: uiURL}, nil
}

// Connect reaches Temporal as the config says. With temporal.address empty
// it first looks for an embedded server already running on this machine
// (worker dev); failing that it starts one over the same SQLite file, so
// runs show in the UI later.
func Connect(ctx context.Context, cfg *config.Config, log *zap.Logger, opt ConnectOptions) (*Env, error) {
	e := &Env{Cfg: cfg, Log: log, Metrics: opt.Metrics, Seams: opt.Seams}
	dial, err := control.DialOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	if opt.Metrics != nil {
		dial.MetricsHandler = opt.Metrics.SDKHandler()
	}
	if cfg.Temporal.Address != "" {
		c, err := tclient.Dial(ctx, dial)
		if err != nil {
			return nil, err
		}
		e.Client, e.Address = c, dial.Address
		return e, nil
	}
	local := net.JoinHostPort(control.LoopbackIP, strconv.Itoa(cfg.Temporal.Port))
	if owner, ok := control.Find(cfg.StateDir); ok && cfg.Temporal.Port == 0 && owner.Frontend != "" {
		// temporal.port = 0: the control service picked a free port and
		// published it in its lock.
		local = owner.Frontend
	}
	if portOpen(local) {
		dial.Address = local
		c, err := tclient.Dial(ctx, dial)
		if err != nil {
			return nil, err
		}
		e.Client, e.Address = c, local
		if cfg.Temporal.UIPort > 0 {
			e.UIURL = fmt.Sprintf("http://%s:%d", control.LoopbackIP, cfg.Temporal.UIPort)
		}
		return e, nil
	}
	if opt.NoEmbedded {
		dial.Address = local
		_, err := tclient.Dial(ctx, dial)
		return nil, err
	}
	uiPort := cfg.Temporal.UIPort
	if opt.NoUI {
		uiPort = -1
	}
	if startEmbedded == nil {
		return nil, fmt.Errorf("no Temporal server answers on %s, and this program does not embed one: start the control service of state_dir %s (starter control start, or worker dev --config %s)", local, cfg.StateDir, cfg.File)
	}
	srv, err := startEmbedded(ctx, EmbeddedOptions{StateDir: cfg.StateDir, Port: cfg.Temporal.Port, UIPort: uiPort, Namespace: cfg.Temporal.Namespace, Logger: log.Named("temporal")})
	if err != nil {
		return nil, fmt.Errorf("start the embedded Temporal server in %s: %w", cfg.StateDir, err)
	}
	e.Server, e.UIURL = srv, srv.UIURL()
	dial.Address = srv.FrontendAddress()
	c, err := tclient.Dial(ctx, dial)
	if err != nil {
		srv.Stop()
		return nil, err
	}
	e.Client, e.Address = c, dial.Address
	if opt.LocalWorkers {
		if err := e.StartLocalWorkers(); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// StartLocalWorkers starts the control worker and every local node's worker
// in this process.
func (e *Env) StartLocalWorkers() error {
	ws := []worker.Worker{NewControlWorker(e.deps(), e.UIURL)}
	// The control issues its local nodes' fleet identities (the relay's
	// and image transfers') from the CA under state_dir/pki (kept when
	// present), whatever the relay setting.
	var local []config.Node
	for _, n := range e.Cfg.Nodes {
		if n.SSH == "" {
			local = append(local, n)
		}
	}
	if _, err := pki.IssueFleetIdentities(pki.FleetDir(e.Cfg.StateDir), config.FleetHosts(local)); err != nil {
		e.Log.Warn("fleet identities for the local nodes not issued: their staging reads the NAS and they move no image", zap.Error(err))
	}
	for _, n := range LocalNodes(e.Cfg) {
		w, err := NewNodeWorker(e.deps(), n)
		if err != nil {
			return err
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		if err := w.Start(); err != nil {
			return err
		}
		e.workers = append(e.workers, w)
	}
	return nil
}

// Close stops in-process workers, the client and the embedded server.
func (e *Env) Close() error {
	for _, w := range e.workers {
		w.Stop()
	}
	e.workers = nil
	if e.Client != nil {
		e.Client.Close()
	}
	var err error
	if e.Server != nil {
		err = e.Server.Stop()
	}
	return err
}

func portOpen(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// RunDev is the control service (`worker dev`, `starter control run`): the
// embedded server and web UI (or the external cluster of temporal.address),
// the control worker and a node worker for every local node, until ctx
// ends. It holds state_dir's control lock for its whole life, so there is
// one per state_dir and every starter finds it (internal/control). o's
// seams reach every worker it starts (none in production). When its fleet
// config file changes and loads, it returns ErrReload once no run is under
// way (configWatch), and Execute starts it again on the new file.
func RunDev(ctx context.Context, cfg *config.Config, log *zap.Logger, o Options) error {
	// Everything this run starts (metrics, tunnels, the gateways' watch)
	// ends with it, before a reload execs the program again.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lock, err := control.Acquire(cfg.StateDir, control.Owner{Config: cfg.File, ConfigHash: control.HashFile(cfg.File), Version: buildinfo.Version, Nodes: LocalNodes(cfg)})
	if err != nil {
		return err
	}
	defer lock.Release()
	m, maddr := ServeMetrics(ctx, cfg, log)
	var e *Env
	if cfg.Temporal.Address != "" {
		if e, err = Connect(ctx, cfg, log, ConnectOptions{NoEmbedded: true, Metrics: m, Seams: o.Seams}); err == nil {
			err = e.StartLocalWorkers()
		}
	} else {
		local := net.JoinHostPort(control.LoopbackIP, strconv.Itoa(cfg.Temporal.Port))
		if cfg.Temporal.Port != 0 && portOpen(local) {
			return errors.New("something else already listens on " + local + " (not the control service of state_dir " + cfg.StateDir + "): stop it, or set [temporal] port and ui_port to free ports")
		}
		e, err = Connect(ctx, cfg, log, ConnectOptions{LocalWorkers: true, Metrics: m, Seams: o.Seams})
	}
	if err != nil {
		if e != nil {
			e.Close()
		}
		return err
	}
	defer e.Close()
	owner := lock.Owner()
	owner.Frontend, owner.UI, owner.Metrics = e.Address, e.UIURL, maddr
	e.MetricsAddress = maddr
	if err := lock.Publish(owner); err != nil {
		return err
	}
	if cfg.Temporal.Address == "" {
		// Remote nodes reach the embedded server (loopback only) through
		// a reverse SSH tunnel to their own 127.0.0.1 (internal/tunnel).
		targets, err := TunnelTargets(cfg)
		if err != nil {
			return err
		}
		if len(targets) > 0 && cfg.Temporal.Port == 0 {
			return fmt.Errorf("%s: temporal.port: 0 (a free port) cannot serve remote node %s: its tunnel forwards a fixed port — give one (the default is %d)", cfg.File, targets[0].Node, config.DefaultPort)
		}
		if len(targets) > 0 {
			k := &tunnel.Keeper{Frontend: e.Address, RemotePort: cfg.Temporal.Port, Log: log.Named("tunnel")}
			go k.Run(ctx, targets)
			log.Info("tunnels to remote nodes", zap.Int("nodes", len(targets)), zap.Int("node_port", cfg.Temporal.Port))
		}
	}
	log.Info("sparklane control service running", zap.String("temporal", e.Address), zap.String("ui", e.UIURL), zap.Strings("local_nodes", LocalNodes(cfg)), zap.String("lock", control.LockPath(cfg.StateDir)))
	if o.Gateways != GatewaysUnits && len(cfg.Gateways()) > 0 {
		go superviseGateways(ctx, cfg, log.Named("gateways"))
	}
	reload := make(chan struct{})
	w := &configWatch{file: cfg.File, loaded: owner.ConfigHash, runs: runsUnderWay(e.Client, cfg.Temporal.Namespace), log: log.Named("config")}
	go w.watch(ctx, func() { close(reload) })
	select {
	case <-reload:
		return ErrReload
	case <-ctx.Done():
	}
	log.Info("sparklane control service stopping")
	return nil
}

// ServeMetrics makes this worker process's Prometheus registry and serves
// it at http://metrics_address/metrics until ctx ends. The registry is
// returned even when it is not served — metrics_address "off", or the
// address taken (say by another worker process of this config on the same
// machine: give each its own, SPARKLANE_METRICS_ADDRESS) — which is logged
// as a warning naming the key rather than keeping the worker from running.
// The address served is returned ("" when none).
func ServeMetrics(ctx context.Context, cfg *config.Config, log *zap.Logger) (*metrics.Metrics, string) {
	m := metrics.New()
	m.BuildInfo(buildinfo.Version, buildinfo.BuildCommit(), runtime.Version())
	addr := cfg.MetricsAddress
	if addr == "off" {
		return m, ""
	}
	if addr == "" {
		addr = config.DefaultMetricsAddress
	}
	if err := config.CheckMetricsAddress(addr); err != nil {
		log.Warn("metrics not served", zap.String("key", "metrics_address"), zap.String("file", cfg.File), zap.Error(err))
		return m, ""
	}
	got, err := m.Serve(ctx, addr)
	if err != nil {
		log.Warn("metrics not served: set metrics_address (or SPARKLANE_METRICS_ADDRESS) to a free loopback port, or \"off\"", zap.String("address", addr), zap.String("file", cfg.File), zap.Error(err))
		return m, ""
	}
	log.Info("serving Prometheus metrics", zap.String("url", "http://"+got+"/metrics"))
	return m, got
}
