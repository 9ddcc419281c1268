package workers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/buildinfo"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/engine/probe"
	"github.com/sparklane/sparklane/internal/gateway"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/metrics"
)

// The gateway's table satisfies the gateway activities'.
var _ activities.GatewayTable = gateway.Steps{}

// RunGateway runs gateway name of cfg (`worker gateway`) until ctx ends:
// its HTTP front door, serving from the table it keeps on disk at once —
// with or without the control service — and, once Temporal answers, the
// gateway activities on its queue (contract.GatewayQueue) and a reconcile
// with the keepers. It holds STATE_DIR/gateway/NAME.lock: one process per
// gateway. SIGHUP reloads its api_keys_file.
func RunGateway(ctx context.Context, cfg *config.Config, log *zap.Logger, name string) error {
	g := cfg.FindGateway(name)
	if g == nil {
		return fmt.Errorf("%s has no gateway %q: give the name of one of its [[gateways]], or none for its [gateway]", cfg.File, name)
	}
	lockPath := control.GatewayLockPath(cfg.StateDir, name)
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o700); err != nil {
		return fmt.Errorf("gateway %s: %w", label(name), err)
	}
	lock, err := control.AcquireFile(lockPath, control.Owner{Config: cfg.File, ConfigHash: control.HashFile(cfg.File), Version: buildinfo.Version})
	if err != nil {
		var held *control.HeldError
		if errors.As(err, &held) {
			return fmt.Errorf("gateway %s already runs (pid %d, %s): one process per gateway", label(name), held.Owner.PID, held.Path)
		}
		return err
	}
	defer lock.Release()
	m, maddr := serveGatewayMetrics(ctx, *g, log)
	var conn atomic.Pointer[client.Client]
	gw, err := gateway.New(gateway.Options{
		Gateway: *g, StateFile: lane.GatewayStateFile(cfg, *g), Log: log.Named("gateway"), Registerer: m.Registerer(),
		Wake: wake(ctx, &conn, cfg),
	})
	if err != nil {
		return err
	}
	ln, err := gw.Listen()
	if err != nil {
		return err
	}
	owner := lock.Owner()
	owner.Listen, owner.Metrics = ln.Addr().String(), maddr
	if err := lock.Publish(owner); err != nil {
		ln.Close()
		return err
	}
	go reloadKeysOnHUP(ctx, gw, log)
	go gatewayWorker(ctx, cfg, log, name, gw, &conn, m)
	return gw.Serve(ctx, ln)
}

// label names a gateway in errors.
func label(name string) string {
	if name == "" {
		return "[gateway]"
	}
	return name
}

// serveGatewayMetrics is the gateway process's registry, served at its
// metrics_address ("off": not served; an address taken is a warning).
func serveGatewayMetrics(ctx context.Context, g config.Gateway, log *zap.Logger) (*metrics.Metrics, string) {
	m := metrics.New()
	m.BuildInfo(buildinfo.Version, buildinfo.BuildCommit(), "")
	if g.MetricsAddress == "off" {
		return m, ""
	}
	got, err := m.Serve(ctx, g.MetricsAddress)
	if err != nil {
		log.Warn("gateway metrics not served: set [gateway] metrics_address to a free loopback port, or \"off\"", zap.String("address", g.MetricsAddress), zap.Error(err))
		return m, ""
	}
	log.Info("serving the gateway's Prometheus metrics", zap.String("url", "http://"+got+"/metrics"))
	return m, got
}

// reloadKeysOnHUP reloads the gateway's keys on every SIGHUP until ctx
// ends (systemctl reload).
func reloadKeysOnHUP(ctx context.Context, gw *gateway.Gateway, log *zap.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := gw.ReloadKeys(); err != nil {
				log.Error("gateway: reload api_keys_file (the keys loaded before stay)", zap.Error(err))
				continue
			}
			log.Info("gateway: api_keys_file reloaded")
		}
	}
}

// gatewayReconnectEvery is how often a gateway retries Temporal while it
// does not answer (the control service is down or restarting).
const gatewayReconnectEvery = 2 * time.Second

// gatewayWorker connects to Temporal (retrying while it does not answer),
// then runs the gateway activities on the gateway's queue and reconciles
// the table with the keepers, until ctx ends. The front door serves from
// its table all along.
func gatewayWorker(ctx context.Context, cfg *config.Config, log *zap.Logger, name string, gw *gateway.Gateway, conn *atomic.Pointer[client.Client], m *metrics.Metrics) {
	var env *Env
	for attempt := 0; ; attempt++ {
		var err error
		if env, err = Connect(ctx, cfg, log, ConnectOptions{NoEmbedded: true, Metrics: m}); err == nil {
			break
		}
		if attempt%30 == 0 { // once a minute
			log.Warn("gateway: Temporal does not answer yet; serving from the table meanwhile", zap.Int("attempt", attempt+1), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(gatewayReconnectEvery):
		}
	}
	defer env.Close()
	c := env.Client
	conn.Store(&c)
	w := worker.New(c, contract.GatewayQueue(name), worker.Options{WorkerStopTimeout: 10 * time.Second, MaxHeartbeatThrottleInterval: ProgressEvery})
	w.RegisterActivity(&activities.GatewayActivities{Name: name, Table: gateway.Steps{G: gw}, Log: log.Named("gateway")})
	if err := w.Start(); err != nil {
		log.Error("gateway: the worker of queue "+contract.GatewayQueue(name)+" did not start; the front door serves from its table", zap.Error(err))
		return
	}
	defer w.Stop()
	gw.Reconcile(keeperRoutes(ctx, c, cfg, name, log))
	<-ctx.Done()
}

// wake starts the power-on of a cluster off by schedule ([gateway] wake):
// the Power workflow on its nodes (one per node set; a second request
// finds it running). The keeper routes and releases the cluster once its
// lane answers again.
func wake(ctx context.Context, conn *atomic.Pointer[client.Client], cfg *config.Config) func(cluster string, nodes []string) error {
	return func(cluster string, nodes []string) error {
		c := conn.Load()
		if c == nil {
			return errors.New("not connected to Temporal yet")
		}
		if len(nodes) == 0 {
			return fmt.Errorf("cluster %s: its route names no nodes to power on", cluster)
		}
		_, err := (*c).ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: contract.PowerID(contract.PowerOn, strings.Join(nodes, ",")), TaskQueue: contract.ControlQueue,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		}, contract.WorkflowPower, contract.PowerInput{Action: contract.PowerOn, Targets: nodes, Gateways: lane.GatewayQueues(cfg, cluster)})
		return err
	}
}

// keeperRoutes is what the keepers of the clusters gateway name fronts
// say serves where (the table a gateway reconciles with at start): each
// running keeper's lane, head and served name, in the state its health
// gives — up: serving; healing or waiting for a node: held; off by
// schedule: off; a crash loop: down. A cluster without a keeper is left as
// the table has it.
func keeperRoutes(ctx context.Context, c client.Client, cfg *config.Config, name string, log *zap.Logger) []contract.GatewayRoute {
	g := cfg.FindGateway(name)
	var out []contract.GatewayRoute
	for _, cl := range cfg.Clusters {
		if !g.Fronts(cl.Name) {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := c.QueryWorkflow(qctx, contract.KeeperID(cl.Name), "", contract.KeeperStatusQuery)
		var st contract.KeeperStatus
		if err == nil {
			err = v.Get(&st)
		}
		cancel()
		if err != nil || st.Input == nil || st.State == contract.KeeperEnded {
			continue
		}
		r, err := keeperRoute(ctx, cfg, st)
		if err != nil {
			log.Warn("gateway reconcile: cluster "+cl.Name+" left as the table has it", zap.Error(err))
			continue
		}
		out = append(out, r)
	}
	return out
}

// keeperRoute is the route a keeper's status says: its lane at its head
// (asked for its served name when the keeper predates recording it).
func keeperRoute(ctx context.Context, cfg *config.Config, st contract.KeeperStatus) (contract.GatewayRoute, error) {
	in := *st.Input
	base := in.BaseURL
	if base == "" {
		base = lane.BaseURL(cfg, in.Plan)
	}
	served := in.Served
	if served == "" {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		m, err := probe.ModelName(qctx, base)
		if err != nil {
			return contract.GatewayRoute{}, fmt.Errorf("lane %s: ask %s for its served name: %w", in.Plan.Lane, base, err)
		}
		served = m
	}
	state, why := contract.GatewayServing, ""
	switch st.State {
	case contract.KeeperHealing, contract.KeeperWaiting:
		state = contract.GatewayHeld
	case contract.KeeperOff:
		state = contract.GatewayOff
	case contract.KeeperCrashLoop:
		state = contract.GatewayDown
	}
	if state != contract.GatewayServing {
		why = st.LastReason
	}
	return contract.GatewayRoute{
		Cluster: in.Cluster, Lane: in.Plan.Lane, BaseURL: base, Served: served,
		Names: contract.GatewayNames(served, in.Recipe.Gateway.Aliases), Nodes: planNodesOf(in.Plan), State: state, Why: why,
	}, nil
}

func planNodesOf(p contract.LanePlan) []string {
	out := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		out[i] = n.Node
	}
	return out
}

// gatewayCheckEvery is how often the control service looks whether each
// gateway's process runs (its lock held).
const gatewayCheckEvery = 2 * time.Second

// superviseGateways (the control service, `worker dev`) starts each of
// the config's gateways as its own process — this program's `gateway`
// mode, in its own session, logging to STATE_DIR/gateway/NAME.log — and
// again whenever its lock is free (it died), until ctx ends. A gateway
// outlives the control service: a restart of either leaves the other
// serving, and the next control service finds it running.
func superviseGateways(ctx context.Context, cfg *config.Config, log *zap.Logger) {
	exe, err := os.Executable()
	if err != nil {
		log.Error("gateways not started: this program's path is unknown", zap.Error(err))
		return
	}
	tick := time.NewTicker(gatewayCheckEvery)
	defer tick.Stop()
	for {
		for _, g := range cfg.Gateways() {
			if _, running := control.FindFile(control.GatewayLockPath(cfg.StateDir, g.Name)); running {
				continue
			}
			args := []string{"gateway", "--config", cfg.File, "--log", "json"}
			if g.Name != "" {
				args = append(args, "--name", g.Name)
			}
			logPath := control.GatewayLogPath(cfg.StateDir, g.Name)
			pid, err := control.Spawn(exe, args, logPath)
			if err != nil {
				log.Error("gateway "+label(g.Name)+" not started", zap.Error(err))
				continue
			}
			log.Info("started gateway "+label(g.Name), zap.Int("pid", pid), zap.String("listen", g.Listen), zap.String("log", logPath))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
