package itest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/metrics"
	"github.com/sparklane/sparklane/internal/workers"

	// The embedded Temporal server: these tests host control services in-process.
	_ "github.com/sparklane/sparklane/internal/workers/embedded"
)

// fleet is a test fleet of local nodes with their own fs_roots, served by an
// embedded Temporal server started for the test.
type fleet struct {
	t       *testing.T
	dir     string
	cfgFile string
	cfg     *config.Config
	env     *workers.Env
	log     *zap.Logger
	nodeWs  map[string]worker.Worker
	control worker.Worker
	// metricsAddr is where the fleet's workers serve /metrics (with
	// fleetOptions.metrics).
	metricsAddr string
	// seams are the fault points of the workers the test starts.
	seams *activities.Seams
}

// fleetOptions shape a test fleet.
type fleetOptions struct {
	nodes    int
	clusters map[string][]string
	extra    string // root keys added before the tables
	shared   string // the shared root (the NAS); default DIR/nas
	// roots are every node's roots (default ["/srv"]), under its fs_root.
	roots []string
	// nodeExtra is TOML appended inside a node's table (e.g. [nodes.power]).
	nodeExtra map[string]string
	// tail is TOML appended at the end (e.g. [[devices]]).
	tail    string
	recipes map[string]string
	// metrics serves the workers' Prometheus registry (the SDK's and the
	// activities' metrics) on a free loopback port, as worker processes do.
	metrics bool
	// log receives every log line of the server, the SDK and the workers.
	log *zap.Logger
	// seams are the fault points the fleet's in-process workers get
	// (testworker.StagePause, testworker.BootIDs; nil: none).
	seams *activities.Seams
}

// newFleet writes a config, starts the embedded server (no UI) and returns;
// workers are started by the test as it needs them.
func newFleet(t *testing.T, o fleetOptions) *fleet {
	t.Helper()
	dir := t.TempDir()
	f := &fleet{t: t, dir: dir, nodeWs: map[string]worker.Worker{}, seams: o.seams}
	f.log = zap.NewNop()
	if os.Getenv("SPARKLANE_TEST_LOG") != "" {
		f.log, _ = zap.NewDevelopment()
	}
	if o.log != nil {
		f.log = o.log
	}
	var m *metrics.Metrics
	if o.metrics {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		m, f.metricsAddr = workers.ServeMetrics(ctx, &config.Config{MetricsAddress: "127.0.0.1:0"}, f.log)
		if f.metricsAddr == "" {
			t.Fatal("the workers' metrics are not served")
		}
	}
	// The server first, on free ports, to learn its address.
	state := filepath.Join(dir, "state")
	boot := &config.Config{StateDir: state, Temporal: config.Temporal{Namespace: "default", Port: 0, UIPort: -1}}
	env, err := workers.Connect(context.Background(), boot, f.log, workers.ConnectOptions{NoUI: true, Metrics: m})
	if err != nil {
		t.Fatalf("start embedded Temporal: %v", err)
	}
	t.Cleanup(func() { f.stopWorkers(); env.Close() })
	var b strings.Builder
	if o.shared == "" {
		o.shared = filepath.Join(dir, "nas")
	}
	fmt.Fprintf(&b, "state_dir = %q\nrecipes_dir = %q\nshared_roots = [%q]\nprobe_grace = \"1s\"\n%s\n", state, filepath.Join(dir, "recipes"), o.shared, o.extra)
	fmt.Fprintf(&b, "[temporal]\naddress = %q\nnamespace = \"default\"\n\n", env.Address)
	for i := 1; i <= o.nodes; i++ {
		name := fmt.Sprintf("n%d", i)
		root := filepath.Join(dir, "nodes", name)
		roots := o.roots
		if len(roots) == 0 {
			roots = []string{"/srv"}
		}
		for _, r := range roots {
			if err := os.MkdirAll(filepath.Join(root, r), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		fmt.Fprintf(&b, "[[nodes]]\nname = %q\nssh = \"\"\naddress = \"127.0.0.1\"\nroots = [%s]\nfs_root = %q\n%s\n", name, quoteAll(roots), root, o.nodeExtra[name])
	}
	for _, name := range sortedKeys(o.clusters) {
		fmt.Fprintf(&b, "[[clusters]]\nname = %q\nnodes = [%s]\n\n", name, quoteAll(o.clusters[name]))
	}
	b.WriteString(o.tail)
	if !strings.Contains(o.tail, "[staging]") {
		// No memory floor: a stage beside a serving lane must not wait on
		// this machine's MemAvailable (memguard_test.go sets its own
		// through the MemAvailable seam).
		b.WriteString("\n[staging]\nmin_available = \"0\"\n")
	}
	f.cfgFile = filepath.Join(dir, "sparklane.toml")
	if err := os.MkdirAll(filepath.Join(dir, "recipes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.cfgFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, body := range o.recipes {
		if err := os.WriteFile(filepath.Join(dir, "recipes", name+".toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(f.cfgFile)
	if err != nil {
		t.Fatalf("load test config: %v", err)
	}
	f.cfg, f.env = cfg, env
	return f
}

func (f *fleet) startControl() {
	f.t.Helper()
	f.control = workers.NewControlWorker(f.deps(), "")
	if err := f.control.Start(); err != nil {
		f.t.Fatalf("start control worker: %v", err)
	}
}

func (f *fleet) startNode(name string) {
	f.t.Helper()
	w, err := workers.NewNodeWorker(f.deps(), name)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		f.t.Fatalf("start node worker %s: %v", name, err)
	}
	f.nodeWs[name] = w
}

// deps are what the fleet's workers are built from: its client, config,
// logger, metrics and seams.
func (f *fleet) deps() workers.Deps {
	return workers.Deps{Client: f.env.Client, Config: f.cfg, Log: f.log, Metrics: f.env.Metrics, Seams: f.seams}
}

func (f *fleet) stopNode(name string) {
	if w, ok := f.nodeWs[name]; ok {
		w.Stop()
		delete(f.nodeWs, name)
	}
}

func (f *fleet) stopWorkers() {
	for n := range f.nodeWs {
		f.stopNode(n)
	}
	if f.control != nil {
		f.control.Stop()
		f.control = nil
	}
}

// starter runs the real CLI against the fleet and returns exit code,
// stdout and stderr.
func (f *fleet) starter(ctx context.Context, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	all := append([]string{"--config", f.cfgFile}, args...)
	code := cli.Execute(ctx, all, strings.NewReader(""), &out, &errb, nil)
	return code, out.String(), errb.String()
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// reload re-reads the config (after recipes were written).
func (f *fleet) reload() {
	f.t.Helper()
	cfg, err := config.Load(f.cfgFile)
	if err != nil {
		f.t.Fatalf("reload config: %v", err)
	}
	f.cfg = cfg
}

// lanePlan loads the fleet's recipes and renders lane name on its
// cluster: the recipe as a run carries it, and its plan.
func (f *fleet) lanePlan(name string) (*contract.Recipe, *contract.LanePlan) {
	f.t.Helper()
	rs, err := config.LoadRecipes(f.cfg.RecipesDir)
	if err != nil {
		f.t.Fatal(err)
	}
	r, err := config.Resolve(rs, name)
	if err != nil {
		f.t.Fatal(err)
	}
	plan, err := lane.Render(f.cfg, r, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	w := lane.Wire(r)
	return &w, plan
}
