package metrics

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/gateway"
)

func double(_ context.Context, n int) (int, error) { return 2 * n, nil }

func twice(ctx workflow.Context, n int) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var out int
	err := workflow.ExecuteActivity(ctx, double, n).Get(ctx, &out)
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"lane": "demo-4x"}).Counter("cutovers").Inc(1)
	return out, err
}

// Metrics recorded through the SDK's handler (a workflow run by the SDK's
// test environment with SDKHandler, counting through
// workflow.GetMetricsHandler) and sparklane's recorders come out of the
// HTTP endpoint in the Prometheus text format.
func TestSDKAndSparklaneMetricsAreScraped(t *testing.T) {
	m := New()
	var s testsuite.WorkflowTestSuite
	s.SetMetricsHandler(m.SDKHandler())
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(double)
	env.ExecuteWorkflow(twice, 21)
	var got int
	if err := env.GetWorkflowResult(&got); err != nil || got != 42 {
		t.Fatalf("workflow: %d, %v", got, err)
	}
	m.Staged("demo-4x", "n1", "weights", 24<<20, 2*time.Second)
	m.Verified("demo-4x", "n1", "weights", 12, 1)
	m.Ready("demo-4x", 31*time.Second)
	m.Probed("demo-4x", 149.5, 120*time.Millisecond)
	m.NodeOutage("n2", 90*time.Second)
	m.Fetched("demo-4x", "org/m", 3<<20)
	m.Fetched("demo-4x", "org/m", 1<<20)
	m.ImageReceived("demo-4x", "n2", "n1", 5<<20)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := m.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("scrape: %d bytes in %s", len(body), time.Since(start).Round(time.Microsecond))
	text := string(body)
	for _, want := range []string{
		`sparklane_staging_bytes_total{block="weights",lane="demo-4x",node="n1"} 2.5165824e+07`,
		`sparklane_staging_bytes_per_second{block="weights",lane="demo-4x",node="n1"} 1.2582912e+07`,
		`sparklane_files_repaired_total{block="weights",lane="demo-4x",node="n1"} 1`,
		`sparklane_readiness_seconds{lane="demo-4x"} 31`,
		`sparklane_probe_decode_tokens_per_second{lane="demo-4x"} 149.5`,
		`sparklane_node_outage_seconds{node="n2"} 90`,
		`sparklane_fetch_bytes_total{lane="demo-4x",repo="org/m"} 4.194304e+06`,
		`sparklane_image_bytes_total{lane="demo-4x",node="n2",source="n1"} 5.24288e+06`,
		`temporal_cutovers_total{lane="demo-4x"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
}

// The shipped Grafana dashboard parses and every sparklane_ metric it
// queries is one this package exports (a renamed metric fails here, not on
// an operator's blank panel).
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("deploy", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil || len(d.Panels) == 0 {
		t.Fatalf("dashboard: %v (%d panels)", err, len(d.Panels))
	}
	m := New()
	m.Staged("l", "n", "b", 1, time.Second)
	m.Verified("l", "n", "b", 1, 1)
	m.Ready("l", time.Second)
	m.Probed("l", 1, time.Second)
	m.Benched("l", 1)
	m.NodeOutage("n", time.Second)
	m.Fetched("l", "org/m", 1)
	// The gateway's process registers its metrics on the same registry
	// (worker gateway): a route makes every gateway series exist.
	g, err := gateway.New(gateway.Options{Gateway: config.Gateway{Clusters: []string{"c1"}}, Registerer: m.Registerer()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Route(contract.GatewayRoute{Cluster: "c1", Lane: "l", BaseURL: "http://127.0.0.1:1", Served: "org/m"}); err != nil {
		t.Fatal(err)
	}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	re := regexp.MustCompile(`sparklane_[a-z_]+`)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, name := range re.FindAllString(tg.Expr, -1) {
				// A histogram is queried by its series (_bucket, _sum, _count).
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				if !have[name] && !have[base] {
					t.Errorf("panel %q queries %s, which is not exported", p.Title, name)
				}
			}
		}
	}
}
