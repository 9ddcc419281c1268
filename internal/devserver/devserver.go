package devserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uiserveroptions "github.com/temporalio/ui-server/v2/server/server_options"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	serverlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/common/primitives/timestamp"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
	"github.com/sparklane/sparklane/internal/logging"
)

// Defaults callers use when the config leaves a port unset (temporal.port,
// temporal.ui_port): the same ports as `temporal server start-dev`, so the
// `temporal` CLI and browser bookmarks work unchanged.
const (
	DefaultPort      = 7233
	DefaultUIPort    = 8233
	DefaultNamespace = "default"
	// LoopbackIP is the only address the embedded server binds: it has no
	// authentication, so it must never be reachable from the network.
	LoopbackIP = control.LoopbackIP
	// DBFile is the SQLite file name under StateDir.
	DBFile = "temporal.db"
	// Retention is how long closed runs stay listable: a week covers the
	// "what happened in Tuesday's cutover" question.
	Retention = 7 * 24 * time.Hour
)

// Search attribute names, re-exported from searchattr for callers that
// already import devserver.
const (
	SearchAttrLane    = searchattr.Lane
	SearchAttrCluster = searchattr.Cluster
)

const (
	clusterName = "active"
	lockFile    = "temporal.lock"
)

// Options configure Start. Zero values pick the documented defaults except
// the ports, where 0 means "any free port" (tests run several servers).
type Options struct {
	// StateDir holds the SQLite file (StateDir/temporal.db), its backup
	// (StateDir/temporal.db.bak, see Start) and a lock file; created with
	// its parents. Required.
	StateDir string
	// IP is the bind address of every service; only 127.0.0.1 (or empty,
	// meaning 127.0.0.1) is accepted.
	IP string
	// Port is the frontend gRPC port (DefaultPort in config); 0 picks a free one.
	Port int
	// UIPort is the web UI port (DefaultUIPort in config); 0 picks a free
	// one, -1 runs no UI.
	UIPort int
	// Namespace is created at each start if missing (default "default").
	Namespace string
	// Logger receives the server's logs at ServerLogLevel and above; nil
	// discards them.
	Logger *zap.Logger
	// ServerLogLevel is the lowest level of server log lines let through;
	// empty means "warn", so the terminal shows what goes wrong, not the
	// server's routine chatter.
	ServerLogLevel string
}

// Server is a running embedded Temporal server (and web UI).
type Server struct {
	srv       temporal.Server
	ui        *uiserver.Server
	frontend  string
	uiURL     string
	namespace string
	dbPath    string
	lock      *os.File
	logLevel  zap.AtomicLevel

	stopOnce sync.Once
	stopErr  error
}

// FrontendAddress is the gRPC address clients dial ("127.0.0.1:PORT").
func (s *Server) FrontendAddress() string { return s.frontend }

// UIURL is the web UI's base URL ("http://127.0.0.1:PORT"), or "" when the
// server runs without UI.
func (s *Server) UIURL() string { return s.uiURL }

// Namespace is the namespace created at start.
func (s *Server) Namespace() string { return s.namespace }

// DBPath is the SQLite file holding the server's state.
func (s *Server) DBPath() string { return s.dbPath }

// Start brings up the server and the UI and returns once the frontend
// answers and the search attributes are registered. ctx bounds the wait for
// readiness; the server itself runs until Stop.
//
// An existing SQLite store is checked first (PRAGMA quick_check: one read
// of the file) and refused with a *StoreDamagedError when damaged, so
// damage is found at start rather than as failing requests later. A store
// that passes is copied to StateDir/temporal.db.bak (VACUUM INTO a temporary
// name, fsynced, renamed: never a torn copy), the backup that error offers
// to restore. The copy costs one more read and a compacted write of the
// store at each start, and its size in disk space.
func Start(ctx context.Context, opt Options) (*Server, error) {
	if err := opt.normalize(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opt.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("devserver: create state dir %s (state_dir): %w", opt.StateDir, err)
	}
	lock, err := acquireLock(opt.StateDir)
	if err != nil {
		return nil, err
	}
	s, err := start(ctx, opt, lock)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	return s, nil
}

func (opt *Options) normalize() error {
	if opt.IP == "" {
		opt.IP = LoopbackIP
	}
	if opt.IP != LoopbackIP {
		return fmt.Errorf("devserver: refusing to bind the embedded Temporal server to %q: it has no authentication, so it only binds %s; for a server other machines reach, run docker-compose.temporal.yml and set temporal.address", opt.IP, LoopbackIP)
	}
	if opt.StateDir == "" {
		return errors.New("devserver: state_dir is empty: set state_dir in the config, the SQLite file of the embedded server lives there")
	}
	abs, err := filepath.Abs(opt.StateDir)
	if err != nil {
		return fmt.Errorf("devserver: state dir %q: %w", opt.StateDir, err)
	}
	opt.StateDir = abs
	if opt.Port < 0 || opt.Port > 65535 {
		return fmt.Errorf("devserver: temporal.port %d out of range (0 picks a free port)", opt.Port)
	}
	if opt.UIPort < -1 || opt.UIPort > 65535 {
		return fmt.Errorf("devserver: temporal.ui_port %d out of range (0 picks a free port, -1 disables the UI)", opt.UIPort)
	}
	if opt.Namespace == "" {
		opt.Namespace = DefaultNamespace
	}
	if opt.Logger == nil {
		opt.Logger = zap.NewNop()
	}
	if opt.ServerLogLevel != "" {
		if _, err := logging.ParseLevel(opt.ServerLogLevel); err != nil {
			return fmt.Errorf("devserver: server log level: %w", err)
		}
	}
	return nil
}

func start(ctx context.Context, opt Options, lock *os.File) (*Server, error) {
	ports, err := opt.pickPorts()
	if err != nil {
		return nil, err
	}
	dbPath := filepath.Join(opt.StateDir, DBFile)
	sqlConf, err := prepareDB(ctx, dbPath, opt.Namespace, opt.Logger)
	if err != nil {
		return nil, err
	}
	frontend := net.JoinHostPort(opt.IP, strconv.Itoa(ports.frontend))
	slog, logLevel, err := serverLogger(opt.Logger, opt.ServerLogLevel)
	if err != nil {
		return nil, err
	}
	srvOpts, err := serverOptions(opt, ports, sqlConf, slog)
	if err != nil {
		return nil, err
	}
	srv, err := temporal.NewServer(srvOpts...)
	if err != nil {
		return nil, fmt.Errorf("devserver: build Temporal server on %s (state %s): %w", frontend, dbPath, err)
	}
	if err := srv.Start(); err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("devserver: start Temporal server on %s (state %s): %w", frontend, dbPath, err)
	}
	if _, err := lock.WriteAt([]byte(frontend+"\n"), 0); err == nil {
		_ = lock.Truncate(int64(len(frontend) + 1))
	}
	s := &Server{srv: srv, frontend: frontend, namespace: opt.Namespace, dbPath: dbPath, lock: lock, logLevel: logLevel}
	fail := func(err error) (*Server, error) {
		_ = s.stopServices()
		return nil, err
	}

	if err := registerSearchAttributes(ctx, frontend, opt.Namespace); err != nil {
		return fail(err)
	}
	if ports.ui > 0 {
		if err := s.startUI(ctx, opt, ports.ui); err != nil {
			return fail(err)
		}
	}
	opt.Logger.Debug("embedded Temporal server started",
		zap.String("frontend", frontend), zap.String("ui", s.uiURL), zap.String("db", dbPath))
	return s, nil
}

// Stop shuts the UI and the server down and releases the state dir; the
// SQLite file can be opened by the next Start right after. Safe to call
// more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.stopErr = s.stopServices()
	})
	return s.stopErr
}

func (s *Server) stopServices() error {
	var errs []error
	s.logLevel.SetLevel(zapcore.ErrorLevel)
	if s.ui != nil {
		s.ui.Stop()
	}
	if err := s.srv.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("devserver: stop Temporal server %s: %w", s.frontend, err))
	}
	if s.lock != nil {
		_ = s.lock.Truncate(0)
		if err := s.lock.Close(); err != nil {
			errs = append(errs, fmt.Errorf("devserver: release lock %s: %w", s.lock.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// ports are the listen ports of one server.
type ports struct {
	frontend, frontendHTTP, history, matching, worker, ui int
}

// pickPorts checks the requested ports are free (a clear error now beats a
// bind failure deep inside fx, or the UI library's os.Exit) and picks free
// ones for the internal services.
func (opt *Options) pickPorts() (ports, error) {
	var p ports
	var err error
	if p.frontend, err = checkOrPick(opt.IP, opt.Port, "temporal.port"); err != nil {
		return p, err
	}
	if opt.UIPort >= 0 {
		if p.ui, err = checkOrPick(opt.IP, opt.UIPort, "temporal.ui_port"); err != nil {
			return p, err
		}
	}
	taken := map[int]bool{p.frontend: true, p.ui: true}
	for _, dst := range []*int{&p.frontendHTTP, &p.history, &p.matching, &p.worker} {
		for {
			port, err := checkOrPick(opt.IP, 0, "internal service port")
			if err != nil {
				return p, err
			}
			if !taken[port] {
				taken[port] = true
				*dst = port
				break
			}
		}
	}
	return p, nil
}

// checkOrPick returns port when it can be bound on ip, or a free port when
// port is 0.
func checkOrPick(ip string, port int, key string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return 0, fmt.Errorf("devserver: %s:%d (%s) is not free: %w; another `worker dev` or `temporal server start-dev` may hold it: stop it, point temporal.address at it, or choose another %s", ip, port, key, err, key)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// prepareDB sets the schema up when the file is new, checks it and backs
// it up when it exists (checkStore: a damaged store is refused before the
// server opens it), and creates the namespace when missing. The schema
// goes into a temporary file that is renamed into place, so a crash
// mid-setup never leaves a half-made database that later starts would
// trust.
func prepareDB(ctx context.Context, dbPath, namespace string, log *zap.Logger) (*config.SQL, error) {
	conf := &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: dbPath,
		// WAL lets readers (visibility queries, the UI) run beside the writer.
		ConnectAttributes: map[string]string{"mode": "rwc", "journal_mode": "wal"},
	}
	if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
		if err := setupSchema(dbPath); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("devserver: stat %s: %w", dbPath, err)
	} else {
		rep, err := checkStore(ctx, dbPath)
		if err != nil {
			return nil, err
		}
		log.Debug("embedded Temporal store checked and backed up",
			zap.String("db", dbPath), zap.Int64("bytes", rep.size),
			zap.Duration("quick_check", rep.check), zap.Duration("backup", rep.backup),
			zap.Int64("backup_bytes", rep.backupSize))
		if rep.backupErr != nil {
			log.Warn("embedded Temporal store is healthy but its backup failed; the previous backup, if any, is kept",
				zap.String("db", dbPath), zap.Error(rep.backupErr))
		}
	}
	ns, err := sqliteschema.NewNamespaceConfig(clusterName, namespace, false, searchattr.Definitions())
	if err != nil {
		return nil, fmt.Errorf("devserver: namespace %s config: %w", namespace, err)
	}
	ns.Detail.Config.Retention = timestamp.DurationPtr(Retention)
	if err := sqliteschema.CreateNamespaces(conf, ns); err != nil {
		return nil, fmt.Errorf("devserver: create namespace %s in %s: %w; if the file is damaged, move it aside and start again (history in it is lost)", namespace, dbPath, err)
	}
	return conf, nil
}

func setupSchema(dbPath string) error {
	tmp := dbPath + ".setup"
	for _, leftover := range []string{tmp, tmp + "-journal"} {
		if err := os.Remove(leftover); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("devserver: remove leftover %s: %w", leftover, err)
		}
	}
	// Rollback journal (no WAL) for the setup file, so everything is in the
	// one file when it is renamed. No fsync per statement: the file is
	// fsynced once before the rename, and a crash before that leaves only
	// the .setup file, removed on the next start.
	conf := &config.SQL{
		PluginName:        sqliteplugin.PluginName,
		DatabaseName:      tmp,
		ConnectAttributes: map[string]string{"mode": "rwc", "synchronous": "off"},
	}
	if err := sqliteschema.SetupSchema(conf); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("devserver: set up SQLite schema in %s: %w", tmp, err)
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dbPath); err != nil {
		return fmt.Errorf("devserver: rename %s to %s: %w", tmp, dbPath, err)
	}
	return syncFile(filepath.Dir(dbPath))
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("devserver: open %s for fsync: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("devserver: fsync %s: %w", path, err)
	}
	return nil
}

// serverLogger turns the zap logger into the server's logger, filtered at
// level (default warn). The returned level is raised at Stop: shutting
// down makes the server's internal workers log a burst of "failed to poll"
// warnings that say nothing to the operator.
func serverLogger(l *zap.Logger, level string) (serverlog.Logger, zap.AtomicLevel, error) {
	lvl := zapcore.WarnLevel
	if level != "" {
		var err error
		if lvl, err = logging.ParseLevel(level); err != nil {
			return nil, zap.AtomicLevel{}, fmt.Errorf("devserver: server log level: %w", err)
		}
	}
	atom := zap.NewAtomicLevelAt(lvl)
	zl := l.Named("server").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &levelCore{Core: c, level: atom}
	}))
	return serverlog.NewZapLogger(zl), atom, nil
}

// levelCore filters a core by a level that can change while it runs.
type levelCore struct {
	zapcore.Core
	level zap.AtomicLevel
}

func (c *levelCore) Enabled(l zapcore.Level) bool {
	return c.level.Enabled(l) && c.Core.Enabled(l)
}

func (c *levelCore) With(fields []zapcore.Field) zapcore.Core {
	return &levelCore{Core: c.Core.With(fields), level: c.level}
}

func (c *levelCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.level.Enabled(e.Level) {
		return ce
	}
	return c.Core.Check(e, ce)
}

func serverOptions(opt Options, p ports, sqlConf *config.SQL, logger serverlog.Logger) ([]temporal.ServerOption, error) {
	host := func(port int) string { return net.JoinHostPort(opt.IP, strconv.Itoa(port)) }
	svc := func(port, httpPort int) config.Service {
		var c config.Service
		c.RPC.GRPCPort = port
		c.RPC.BindOnIP = opt.IP
		c.RPC.HTTPPort = httpPort
		return c
	}

	var conf config.Config
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = opt.IP
	conf.Persistence.DefaultStore = "sqlite-default"
	conf.Persistence.VisibilityStore = "sqlite-default"
	conf.Persistence.NumHistoryShards = 1
	conf.Persistence.DataStores = map[string]config.DataStore{"sqlite-default": {SQL: sqlConf}}
	conf.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             host(p.frontend),
				HTTPAddress:            host(p.frontendHTTP),
			},
		},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	conf.Services = map[string]config.Service{
		string(primitives.FrontendService): svc(p.frontend, p.frontendHTTP),
		string(primitives.HistoryService):  svc(p.history, 0),
		string(primitives.MatchingService): svc(p.matching, 0),
		string(primitives.WorkerService):   svc(p.worker, 0),
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = host(p.frontend)

	authorizer, err := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("devserver: authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("devserver: claim mapper: %w", err)
	}

	dyn := dynamicconfig.StaticClient{
		// A small host: a modest mutable-state cache, and visibility
		// (the UI's lists, the fleet probe) not throttled by the default RPS.
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                 8096,
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		// One partition per task queue: the per-node queues see a handful
		// of tasks, and DescribeTaskQueue (is node X's worker polling?)
		// then sees every poller.
		dynamicconfig.MatchingNumTaskqueueReadPartitions.Key():  1,
		dynamicconfig.MatchingNumTaskqueueWritePartitions.Key(): 1,
		// Every hop of a run (a workflow or activity task dispatched, a
		// child started, a signal delivered) is a transfer task read by
		// the history service's queue reader, whose default rate is 20
		// reads/s: once its burst is spent, back-to-back runs wait ~50 ms
		// at every hop (a verify-only `starter stage` took 0.75 s, 0.12 s
		// without the wait). The queues here are small; let them be read
		// as fast as they fill.
		dynamicconfig.TransferProcessorMaxPollRPS.Key():   1000,
		dynamicconfig.TimerProcessorMaxPollRPS.Key():      1000,
		dynamicconfig.VisibilityProcessorMaxPollRPS.Key(): 1000,
		// Search attributes registered at start are usable at once.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
	}

	return []temporal.ServerOption{
		temporal.WithConfig(&conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(map[primitives.ServiceName]static.Hosts{
			primitives.FrontendService: static.SingleLocalHost(host(p.frontend)),
			primitives.HistoryService:  static.SingleLocalHost(host(p.history)),
			primitives.MatchingService: static.SingleLocalHost(host(p.matching)),
			primitives.WorkerService:   static.SingleLocalHost(host(p.worker)),
		}),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(dyn),
	}, nil
}

// registerSearchAttributes waits for the frontend to answer and makes sure
// the sparklane search attributes exist (already present is fine).
func registerSearchAttributes(ctx context.Context, frontend, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  frontend,
		Namespace: namespace,
		Logger:    logging.SDK(nil),
	})
	if err != nil {
		return fmt.Errorf("devserver: embedded server on %s does not answer: %w", frontend, err)
	}
	defer c.Close()
	var lastErr error
	for {
		if lastErr = searchattr.Ensure(ctx, c, namespace); lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devserver: register search attributes on %s: %w", frontend, lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startUI serves the embedded web UI and waits until it answers.
func (s *Server) startUI(ctx context.Context, opt Options, port int) error {
	ui := uiserver.NewServer(uiserveroptions.WithConfigProvider(&uiconfig.Config{
		Host:                opt.IP,
		Port:                port,
		TemporalGRPCAddress: s.frontend,
		EnableUI:            true,
		DefaultNamespace:    opt.Namespace,
		// Plain HTTP on loopback: the CSRF cookie must not require HTTPS.
		CORS:             uiconfig.CORS{CookieInsecure: true},
		HideLogs:         true,
		DisableNewsFetch: true,
	}))
	s.ui = ui
	errc := make(chan error, 1)
	go func() { errc <- ui.Start() }()

	url := "http://" + net.JoinHostPort(opt.IP, strconv.Itoa(port))
	deadline := time.Now().Add(15 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.uiURL = url
				return nil
			}
			err = fmt.Errorf("GET /healthz: %s", resp.Status)
		}
		select {
		case uerr := <-errc:
			return fmt.Errorf("devserver: web UI on %s stopped: %v", url, uerr)
		case <-ctx.Done():
			return fmt.Errorf("devserver: web UI on %s: %w (last: %v)", url, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("devserver: web UI on %s does not answer: %v", url, err)
		}
	}
}

// acquireLock takes an exclusive lock on StateDir/temporal.lock so two
// embedded servers never share one SQLite file (both would own the same
// history shard and fight over it).
func acquireLock(stateDir string) (*os.File, error) {
	path := filepath.Join(stateDir, lockFile)
	var addr string
	f, err := control.TryLock(path, func(f *os.File) { addr = readAddr(f) })
	if err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if addr == "" {
				return nil, fmt.Errorf("devserver: state dir %s is in use by another embedded Temporal server that is still starting (no frontend published yet): wait for it, or stop it ('starter control stop')", stateDir)
			}
			return nil, fmt.Errorf("devserver: state dir %s is in use by another embedded Temporal server (frontend %s): stop it ('starter control stop'), or set temporal.address = %q to use it", stateDir, addr, addr)
		}
		return nil, fmt.Errorf("devserver: %w", err)
	}
	return f, nil
}

func readAddr(f *os.File) string {
	buf := make([]byte, 64)
	n, _ := f.ReadAt(buf, 0)
	return strings.TrimSpace(string(buf[:n]))
}

// Running reports whether an embedded server holds stateDir and, if so, its
// frontend address, so `starter` can use a running `worker dev` instead of
// failing to start a second server on the same file.
func Running(stateDir string) (frontend string, ok bool) {
	f, err := os.Open(filepath.Join(stateDir, lockFile))
	if err != nil {
		return "", false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return "", false
	}
	addr := readAddr(f)
	if addr == "" {
		return "", false
	}
	return addr, true
}
