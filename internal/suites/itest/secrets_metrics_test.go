package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sparklane/sparklane/internal/devserver"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/syncbuf"
)

// A lane whose recipe takes two secrets from [env_from] — one from the node
// worker's environment, one from a file on each node — is cut over (with a
// bench report) through the real server: both containers got both values
// (docker inspect), and neither value appears in the Temporal SQLite files
// (history, visibility; every byte of the DB and its WAL), in any log line
// of the server, SDK and workers, in the starter's output, in the bench
// report bundle, or in what `recipe render` and `cutover --dry-run` print.
// The engine prints both values at start, and a second cutover's rank
// fails at load: the control service's readiness wait quotes its log
// lines masked.
// Positive controls: the same DB bytes hold the plan's plain [env] value,
// and the logs name the lane, so the scans read what they should.
func TestEnvFromSecretsReachTheContainerAndNothingElse(t *testing.T) {
	const token = "hf_tok-5b1e9c7a3d-secret"
	const apiKey = "sk-file-8f2d6e4c0b-secret"
	t.Setenv("SPARKLANE_TEST_HF_TOKEN", token) // the in-process node workers' environment
	logs := &syncbuf.Buffer{}                  // a log sink the test reads while workers write to it
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zapcore.DebugLevel))
	f, dc := demoFleet(t, 24<<20, func(o *fleetOptions) { o.log = logger })
	addEnvFromSecrets(t, f, apiKey)
	ctx := withTimeout(t, 10*time.Minute)

	var printed strings.Builder
	code, out, errOut := f.starter(ctx, "recipe", "render", "--lane", "demo-2x")
	printed.WriteString(out + errOut)
	if code != 0 || !strings.Contains(out, "HF_TOKEN from env:SPARKLANE_TEST_HF_TOKEN (read on the node)") || !strings.Contains(out, "API_KEY from file:/etc/sparklane/api_key") {
		t.Fatalf("recipe render: exit %d, does not name the secrets' sources:\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = f.starter(ctx, "cutover", "--lane", "demo-2x", "--dry-run")
	printed.WriteString(out + errOut)
	if code != 0 || !strings.Contains(out, "HF_TOKEN from env:SPARKLANE_TEST_HF_TOKEN") {
		t.Fatalf("cutover --dry-run: exit %d, does not name the secret's source:\n%s\n%s", code, out, errOut)
	}
	code, res, errOut := cutover(t, f, "--lane", "demo-2x", "--bench")
	printed.WriteString(errOut)
	if code != 0 || !res.OK || res.Bench == nil {
		t.Fatalf("cutover demo-2x: exit %d, ok %v, bench %v: %s\n%s", code, res.OK, res.Bench, res.Error, errOut)
	}
	resJSON, _ := json.Marshal(res)
	printed.Write(resJSON)

	// The containers got the values.
	all, err := dc.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "sparklane.lane=demo-2x"))})
	var cs []container.Summary
	for _, c := range all {
		if n := c.Labels["sparklane.node"]; n == "n1" || n == "n2" { // the test fleet's, not a demo's
			cs = append(cs, c)
		}
	}
	if err != nil || len(cs) != 2 {
		t.Fatalf("running containers of demo-2x: %d, %v; want 2", len(cs), err)
	}
	for _, c := range cs {
		name := c.Names[0]
		ci, err := dc.ContainerInspect(ctx, c.ID)
		if err != nil {
			t.Fatalf("inspect %s: %v", name, err)
		}
		env := strings.Join(ci.Config.Env, "\n")
		if !strings.Contains(env, "HF_TOKEN="+token) || !strings.Contains(env, "API_KEY="+apiKey) {
			t.Errorf("container %s lacks the resolved secrets; its env names: %v", name, envNames(ci.Config.Env))
		}
	}

	// A rank that exits while loading: the control service's readiness
	// wait quotes its last log lines in the error (history, result,
	// output), masked although the control service never resolved them.
	code, failed, errOut := cutover(t, f, "--lane", "demo-2x", "--stage=skip", "-o", "extra_args=--fail-at=load")
	printed.WriteString(errOut)
	failedJSON, _ := json.Marshal(failed)
	printed.Write(failedJSON)
	if code != 2 || failed.OK || failed.FailedStep != "probe" {
		t.Fatalf("cutover with a rank failing at load: exit %d ok %v step %q; want exit 2 at probe: %s\n%s", code, failed.OK, failed.FailedStep, failed.Error, errOut)
	}
	if !strings.Contains(failed.Error, "env HF_TOKEN=***") || !strings.Contains(failed.Error, "env API_KEY=***") {
		t.Errorf("the failed cutover's error does not quote the rank's masked log lines:\n%s", failed.Error)
	}

	// Nowhere else: the Temporal DB files, the reports, the logs, the output.
	var dbBytes int64
	stateFiles := secretFreeFiles(t, filepath.Dir(f.env.Server.(*devserver.Server).DBPath()), []string{token, apiKey}, func(p string, b []byte) {
		if strings.HasPrefix(filepath.Base(p), "temporal.db") {
			dbBytes += int64(len(b))
		}
	})
	db, err := os.ReadFile(f.env.Server.(*devserver.Server).DBPath())
	if err != nil {
		t.Fatal(err)
	}
	wal, _ := os.ReadFile(f.env.Server.(*devserver.Server).DBPath() + "-wal")
	if !bytes.Contains(append(db, wal...), []byte(`"SIM_LANE":"demo-2x"`)) {
		t.Errorf("positive control: the DB files do not hold the plan's plain env value SIM_LANE; the scan would miss a secret there too")
	}
	reports, err := lane.ReportsDir(f.cfg, "demo-2x")
	if err != nil {
		t.Fatal(err)
	}
	nReports := secretFreeFiles(t, reports, []string{token, apiKey}, nil)
	if nReports == 0 {
		t.Fatalf("report bundle under %s: no files", reports)
	}
	logText := logs.String()
	if !strings.Contains(logText, "demo-2x") {
		t.Errorf("positive control: the captured logs (%d bytes) never name the lane", len(logText))
	}
	for what, text := range map[string]string{"logs": logText, "starter output": printed.String()} {
		for _, s := range []string{token, apiKey} {
			if strings.Contains(text, s) {
				t.Errorf("the %s hold a secret value", what)
			}
		}
	}
	t.Logf("secrets in 2 containers; absent from %d state files (DB and WAL %d bytes), %d report files, %d bytes of logs, %d bytes of starter output",
		stateFiles, dbBytes, nReports, len(logText), printed.Len())
}

// addEnvFromSecrets gives demo-2x an [env_from] HF_TOKEN from the node
// workers' environment and API_KEY from a file on each node, and makes
// the engine print both values when it starts (as engines that log their
// environment do), so every reader of its log is put to the test.
func addEnvFromSecrets(t *testing.T, f *fleet, apiKey string) {
	t.Helper()
	recipe := filepath.Join(f.dir, "recipes", "demo-2x.toml")
	body, err := os.ReadFile(recipe)
	if err != nil {
		t.Fatal(err)
	}
	body = bytes.Replace(body, []byte(`SIM_LANE = "demo-2x"`), []byte(`SIM_LANE = "demo-2x"`+"\nENGINE_SIM_LOG_ENV = \"HF_TOKEN,API_KEY\""), 1)
	if !bytes.Contains(body, []byte("ENGINE_SIM_LOG_ENV")) {
		t.Fatalf("recipe %s: no SIM_LANE line to add ENGINE_SIM_LOG_ENV after", recipe)
	}
	body = append(body, []byte("\n[env_from]\nHF_TOKEN = \"env:SPARKLANE_TEST_HF_TOKEN\"\nAPI_KEY = \"file:/etc/sparklane/api_key\"\n")...)
	if err := os.WriteFile(recipe, body, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		p := filepath.Join(f.dir, "nodes", n, "etc", "sparklane", "api_key")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(apiKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// secretFreeFiles reads every file under root, fails the test for each
// that holds one of secrets, hands each file to seen (when not nil) and
// returns how many files it read.
func secretFreeFiles(t *testing.T, root string, secrets []string, seen func(path string, b []byte)) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		if seen != nil {
			seen(p, b)
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a secret value (%d bytes scanned)", p, len(b))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s for secrets: %v", root, err)
	}
	return n
}

func envNames(env []string) []string {
	var out []string
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		out = append(out, k)
	}
	return out
}

// A real Prometheus (Debian's package) scrapes the workers' /metrics every
// second while a demo cutover runs; afterwards the PromQL query for the
// lane's staged bytes returns exactly the bytes the cutover's stage step
// copied, the probe's decode rate is there, and so are the SDK's own
// metrics (activity latency). The scrape's cost is logged.
func TestPrometheusScrapesStagedBytesDuringACutover(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not installed: apt-get install prometheus (.ci/run does)")
	}
	f, _ := demoFleet(t, 24<<20, func(o *fleetOptions) { o.metrics = true })
	promAddr := startPrometheus(t, bin, f.metricsAddr)

	code, res, errOut := cutover(t, f, "--lane", "demo-2x")
	if code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d: %s\n%s", code, res.Error, errOut)
	}
	var copied int64
	for _, n := range res.Stage {
		for _, b := range n.Blocks {
			copied += b.Result.CopiedBytes
		}
	}
	if copied == 0 {
		t.Fatal("the cutover copied nothing: the staged-bytes query would prove nothing")
	}
	ctx := withTimeout(t, 2*time.Minute)
	q := `sum(sparklane_staging_bytes_total{lane="demo-2x"})`
	got := promQuery(ctx, t, promAddr, q, func(v float64) bool { return int64(v) == copied })
	t.Logf("%s = %.0f (the cutover copied %d bytes)", q, got, copied)
	if tps := promQuery(ctx, t, promAddr, `sparklane_probe_decode_tokens_per_second{lane="demo-2x"}`, func(v float64) bool { return v > 0 }); tps != res.Serve.Decode.DecodeTPS {
		t.Errorf("probe decode tok/s in Prometheus %.2f, the cutover measured %.2f", tps, res.Serve.Decode.DecodeTPS)
	}
	promQuery(ctx, t, promAddr, `sum(sparklane_files_verified_total{lane="demo-2x"})`, func(v float64) bool { return v > 0 })
	promQuery(ctx, t, promAddr, `sparklane_readiness_seconds{lane="demo-2x"}`, func(v float64) bool { return v > 0 })
	promQuery(ctx, t, promAddr, `sum(temporal_activity_execution_latency_seconds_count{activity_type="StageBlock"})`, func(v float64) bool { return v >= 4 })

	// The scrape's cost: Prometheus's own view, and 20 scrapes timed here.
	dur := promQuery(ctx, t, promAddr, `scrape_duration_seconds{job="sparklane"}`, func(v float64) bool { return v > 0 })
	samples := promQuery(ctx, t, promAddr, `scrape_samples_scraped{job="sparklane"}`, func(v float64) bool { return v > 0 })
	var size int
	start := time.Now()
	for i := 0; i < 20; i++ {
		resp, err := http.Get("http://" + f.metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		size = len(b)
	}
	t.Logf("scrape cost: Prometheus saw %.1f ms and %.0f samples a scrape; 20 scrapes here took %.2f ms each, %d bytes",
		dur*1000, samples, float64(time.Since(start).Microseconds())/20/1000, size)
}

// startPrometheus runs Prometheus on a free loopback port with a 1 s
// scrape of target, its data in a temp dir, until the test ends; it
// returns once Prometheus reports ready.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: sparklane\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	ctx := withTimeout(t, time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := http.Get("http://" + addr + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Fatalf("Prometheus on %s never got ready:\n%s", addr, b)
		case <-tick.C:
		}
	}
}

// promQuery polls an instant PromQL query until its single value satisfies
// ok (Prometheus scrapes every second) and returns that value; at ctx's
// end it fails with the last answer.
func promQuery(ctx context.Context, t *testing.T, addr, q string, ok func(float64) bool) float64 {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err == nil {
			var r struct {
				Status string `json:"status"`
				Data   struct {
					Result []struct {
						Value [2]any `json:"value"`
					} `json:"result"`
				} `json:"data"`
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(b)
			if json.Unmarshal(b, &r) == nil && r.Status == "success" && len(r.Data.Result) == 1 {
				if s, isStr := r.Data.Result[0].Value[1].(string); isStr {
					if v, err := strconv.ParseFloat(s, 64); err == nil && ok(v) {
						return v
					}
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("PromQL %s never gave the expected value; last answer: %s", q, last)
		case <-tick.C:
		}
	}
}
