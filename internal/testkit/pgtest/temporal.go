package pgtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	serverlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/persistence"
	"go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	"go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/common/resolver"
	dbschemas "go.temporal.io/server/schema"
	v12 "go.temporal.io/server/schema/postgresql/v12"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sparklane/sparklane/internal/devserver/searchattr"
	"github.com/sparklane/sparklane/internal/tclient"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// The databases and the module's embedded schemas applied to them, as
// docker-compose.temporal.yml's temporal-schema job does.
var databases = []struct{ name, schema, version string }{
	{"temporal", "postgresql/v12/temporal", v12.Version},
	{"temporal_visibility", "postgresql/v12/visibility", v12.VisibilityVersion},
}

// TLS is the frontend's mutual TLS: the server's identity, the CA whose
// client certificates it accepts, and the client identity of the server's
// own system worker (which dials the frontend like any client).
type TLS struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// TemporalOptions configure StartTemporal.
type TemporalOptions struct {
	// IP is the frontend's address (default 127.0.0.1). Any other address
	// requires TLS: nothing unauthenticated listens beyond loopback. The
	// history, matching and worker services always bind 127.0.0.1.
	IP string
	// Port is the frontend's port (0: a free one; FreePort picks one
	// ahead, for configs written before the server starts).
	Port int
	// TLS turns the frontend's mutual TLS on.
	TLS *TLS
	// Namespace is registered at start (default "default"), with
	// sparklane's search attributes.
	Namespace string
}

// Temporal is a running Temporal server on a test's PostgreSQL.
type Temporal struct {
	// Address is the frontend (IP:PORT): what temporal.address names.
	Address string
	// Log is the server's log file (warnings and errors), under the
	// PostgreSQL's directory.
	Log       string
	Namespace string
	srv       temporal.Server
}

// Stop stops the server (also done when the test ends).
func (s *Temporal) Stop() error { return s.srv.Stop() }

// StartTemporal sets the schemas up on pg, starts a Temporal server on it
// and returns once the frontend answers, the namespace exists and the
// search attributes are registered; the server stops when the test ends.
func StartTemporal(t testing.TB, pg *Postgres, opt TemporalOptions) *Temporal {
	t.Helper()
	if opt.IP == "" {
		opt.IP = "127.0.0.1"
	}
	if opt.Namespace == "" {
		opt.Namespace = "default"
	}
	if opt.IP != "127.0.0.1" && opt.TLS == nil {
		t.Fatalf("pgtest: a Temporal frontend on %s needs TLS (nothing unauthenticated listens beyond loopback)", opt.IP)
	}
	nolog := serverlog.NewNoopLogger()
	stores := map[string]config.DataStore{}
	for _, db := range databases {
		conf := pg.sqlConfig(db.name)
		if err := setupSchema(conf, db.schema, db.version, nolog); err != nil {
			t.Fatalf("pgtest: schema %s in database %s on %s: %v", db.schema, db.name, pg.Addr(), err)
		}
		stores[db.name] = config.DataStore{SQL: pg.sqlConfig(db.name)}
	}
	if opt.Port == 0 {
		opt.Port = FreePort(t, opt.IP)
	}
	frontend := net.JoinHostPort(opt.IP, strconv.Itoa(opt.Port))
	loop := func() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(sshdtest.FreePort(t))) }
	hosts := map[primitives.ServiceName]string{
		primitives.FrontendService: frontend,
		primitives.HistoryService:  loop(),
		primitives.MatchingService: loop(),
		primitives.WorkerService:   loop(),
	}
	conf := serverConfig(hosts, loop(), stores, opt.TLS)
	logPath := filepath.Join(pg.Dir, "temporal.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("pgtest: server log %s: %v", logPath, err)
	}
	// Warnings and errors; dropped once the file closes (the server's
	// goroutines log on their way out after Stop returns).
	w := &logWriter{f: logFile}
	t.Cleanup(w.close)
	logger := serverlog.NewZapLogger(zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(w), zap.WarnLevel)))
	authorizer, _ := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	claims, _ := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	members := map[primitives.ServiceName]static.Hosts{}
	for svc, h := range hosts {
		members[svc] = static.SingleLocalHost(h)
	}
	srv, err := temporal.NewServer(
		temporal.WithConfig(conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(members),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claims }),
		temporal.WithDynamicConfigClient(dynamicconfig.StaticClient{
			dynamicconfig.MatchingNumTaskqueueReadPartitions.Key():      1,
			dynamicconfig.MatchingNumTaskqueueWritePartitions.Key():     1,
			dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
		}),
	)
	if err != nil {
		t.Fatalf("pgtest: build the Temporal server (frontend %s, PostgreSQL %s): %v", frontend, pg.Addr(), err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("pgtest: start the Temporal server (frontend %s, PostgreSQL %s): %v", frontend, pg.Addr(), err)
	}
	s := &Temporal{Address: frontend, Namespace: opt.Namespace, Log: logPath, srv: srv}
	t.Cleanup(func() { _ = srv.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.register(ctx, opt.TLS); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

// logWriter writes the server's log file until it is closed, then drops.
type logWriter struct {
	mu sync.Mutex
	f  *os.File
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return len(p), nil
	}
	return w.f.Write(p)
}

func (w *logWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.f.Close()
	w.f = nil
}

// sqlConfig is the postgres12 plugin's connection to database db.
func (pg *Postgres) sqlConfig(db string) *config.SQL {
	return &config.SQL{
		PluginName:      postgresql.PluginName,
		DatabaseName:    db,
		ConnectAddr:     pg.Addr(),
		ConnectProtocol: "tcp",
		User:            pg.User,
		Password:        pg.Password,
		MaxConns:        20,
		MaxIdleConns:    20,
	}
}

// setupSchema creates database conf.DatabaseName and sets up the module's
// embedded schema name (schema.sql, the full schema at version) in it,
// what `temporal-sql-tool create` and `setup-schema --schema-name NAME -v
// VERSION` do (the tool's own package would add a CLI dependency).
func setupSchema(conf *config.SQL, name, version string, logger serverlog.Logger) error {
	admin := *conf
	admin.DatabaseName = "postgres"
	adb, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, &admin, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return err
	}
	err = adb.CreateDatabase(conf.DatabaseName)
	adb.Close()
	if err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, conf, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.CreateSchemaVersionTables(); err != nil {
		return fmt.Errorf("schema version tables: %w", err)
	}
	file := path.Join(name, "schema.sql")
	buf, err := fs.ReadFile(dbschemas.Assets(), file)
	if err != nil {
		return fmt.Errorf("embedded %s: %w", file, err)
	}
	stmts, err := persistence.LoadAndSplitQueryFromReaders([]io.Reader{bytes.NewReader(buf)})
	if err != nil {
		return fmt.Errorf("parse %s: %w", file, err)
	}
	for _, stmt := range stmts {
		if err := db.Exec(stmt); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	if err := db.UpdateSchemaVersion(conf.DatabaseName, version, version); err != nil {
		return err
	}
	return db.WriteSchemaUpdateLog("0", version, "", "initial version")
}

// serverConfig is one cluster of every service in this process: the
// frontend at hosts[frontend] (behind mutual TLS when tls is set), the
// rest on loopback, persistence and visibility in stores.
func serverConfig(hosts map[primitives.ServiceName]string, frontendHTTP string, stores map[string]config.DataStore, tls *TLS) *config.Config {
	svc := func(hostport, httpHostport string) config.Service {
		var c config.Service
		h, p, _ := net.SplitHostPort(hostport)
		c.RPC.BindOnIP = h
		c.RPC.GRPCPort, _ = strconv.Atoi(p)
		if httpHostport != "" {
			_, hp, _ := net.SplitHostPort(httpHostport)
			c.RPC.HTTPPort, _ = strconv.Atoi(hp)
		}
		return c
	}
	frontend := hosts[primitives.FrontendService]
	var conf config.Config
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = "127.0.0.1"
	conf.Persistence.DefaultStore = databases[0].name
	conf.Persistence.VisibilityStore = databases[1].name
	conf.Persistence.NumHistoryShards = 4
	conf.Persistence.DataStores = stores
	conf.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        "active",
		CurrentClusterName:       "active",
		ClusterInformation: map[string]cluster.ClusterInformation{
			"active": {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontend, HTTPAddress: frontendHTTP},
		},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	conf.Services = map[string]config.Service{
		string(primitives.FrontendService): svc(frontend, frontendHTTP),
		string(primitives.HistoryService):  svc(hosts[primitives.HistoryService], ""),
		string(primitives.MatchingService): svc(hosts[primitives.MatchingService], ""),
		string(primitives.WorkerService):   svc(hosts[primitives.WorkerService], ""),
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = frontend
	if tls != nil {
		conf.Global.TLS.Frontend.Server = config.ServerTLS{CertFile: tls.ServerCert, KeyFile: tls.ServerKey,
			ClientCAFiles: []string{tls.CA}, RequireClientAuth: true}
		conf.Global.TLS.SystemWorker = config.WorkerTLS{CertFile: tls.ClientCert, KeyFile: tls.ClientKey,
			Client: config.ClientTLS{RootCAFiles: []string{tls.CA}}}
	}
	return &conf
}

// register waits for the frontend, registers the namespace (one week's
// retention, as the compose setup job) and sparklane's search attributes.
func (s *Temporal) register(ctx context.Context, tls *TLS) error {
	dial := tclient.DialOptions{Address: s.Address, Namespace: "temporal-system", Timeout: 10 * time.Second}
	if tls != nil {
		dial.TLSCA, dial.TLSCert, dial.TLSKey = tls.CA, tls.ClientCert, tls.ClientKey
	}
	var last error
	for {
		c, err := tclient.Dial(ctx, dial)
		if err == nil {
			_, err = c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
				Namespace: s.Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(7 * 24 * time.Hour)})
			if _, exists := err.(*serviceerror.NamespaceAlreadyExists); exists {
				err = nil
			}
			if err == nil {
				err = searchattr.Ensure(ctx, c, s.Namespace)
			}
			c.Close()
		}
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("Temporal frontend %s: namespace %s and search attributes not registered: %v", s.Address, s.Namespace, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// FreePort is a port on ip that nothing listens on now.
func FreePort(t testing.TB, ip string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("pgtest: find a free port on %s: %v", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
