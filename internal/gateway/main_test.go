package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"github.com/sparklane/sparklane/internal/testkit/loopnet"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// simBin is the engine-sim binary built once for the package's tests.
var simBin string

func TestMain(m *testing.M) {
	if state := os.Getenv("GATEWAY_TEST_CHILD_STATE"); state != "" {
		childGateway(state, os.Getenv("GATEWAY_TEST_CHILD_ENGINE"))
	}
	dir, err := os.MkdirTemp("", "gateway-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	simBin = filepath.Join(dir, "engine-sim")
	_, file, _, _ := runtime.Caller(0)
	build := exec.Command("go", "build", "-o", simBin, "./engine-sim")
	build.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./engine-sim: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// servingLine is what engine-sim prints once its API is open.
var servingLine = regexp.MustCompile(`rank 0 serving .* on (http://\S+) `)

// startSim runs the engine-sim binary serving the model name served on a
// free loopback port (a tiny model tree it really reads) and returns its
// base URL; it is stopped when the test ends. Its pace is fast unless
// args say otherwise (flags given later win).
func startSim(t *testing.T, served string, args ...string) string {
	t.Helper()
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	all := append([]string{model, "--served-model-name", served, "--port", "0",
		"--prefill-tps", "1000000", "--decode-tps", "5000"}, args...)
	cmd := exec.Command(simBin, all...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start engine-sim: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatalf("engine-sim %s exited before serving", served)
		}
		return u
	case <-time.After(30 * time.Second):
		t.Fatalf("engine-sim %s not serving within 30s", served)
	}
	return ""
}

// gw is a gateway under test, serving on a loopback port.
type gw struct {
	*Gateway
	URL   string
	reg   *prometheus.Registry
	logs  *syncbuf.Buffer
	state string
	stop  func()
}

// startGateway builds a gateway from cfg (defaults applied, listen on a
// free loopback port unless cfg says) with its state under dir ("" a
// new temp dir), serves it and stops it when the test ends.
func startGateway(t *testing.T, cfg config.Gateway, dir string, mod ...func(*Options)) *gw {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg = cfg.WithDefaults()
	logs := &syncbuf.Buffer{}
	enc := zap.NewProductionEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(logs), zap.DebugLevel))
	reg := prometheus.NewRegistry()
	o := Options{Gateway: cfg, StateFile: filepath.Join(dir, "gateway.json"), Log: log, Registerer: reg}
	for _, f := range mod {
		f(&o)
	}
	g, err := New(o)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	ln := loopnet.Listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gateway.Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("gateway.Serve did not return within 30s of its context's end")
		}
	}
	t.Cleanup(stop)
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	return &gw{Gateway: g, URL: scheme + "://" + ln.Addr().String(), reg: reg, logs: logs, state: o.StateFile, stop: stop}
}

// client is the OpenAI SDK pointed at the gateway, without retries (a
// 503 must reach the test).
func (g *gw) client(key string) openai.Client {
	if key == "" {
		key = "none"
	}
	return openai.NewClient(option.WithBaseURL(g.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// lane is a route for cluster to the engine at base serving served, also
// reached by aliases.
func lane(cluster, name, base, served string, aliases ...string) contract.GatewayRoute {
	return contract.GatewayRoute{Cluster: cluster, Lane: name, BaseURL: base, Served: served, Names: aliases, Nodes: []string{cluster + "-n1"}}
}

// mustRoute routes r or fails the test.
func mustRoute(t *testing.T, g *gw, r contract.GatewayRoute) contract.GatewayRoute {
	t.Helper()
	out, err := g.Route(r)
	if err != nil {
		t.Fatalf("Route %s: %v", r.Cluster, err)
	}
	return out
}

// chat asks model through the SDK.
func chat(ctx context.Context, c openai.Client, model, prompt string) (*openai.ChatCompletion, error) {
	return c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(16),
	})
}

// waitHeld waits (bounded) until cluster holds n requests.
func waitHeld(t *testing.T, g *gw, cluster string, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("cluster %s to hold %d requests", cluster, n), func() bool {
		r, _ := g.routeOf(cluster)
		return r.Held == n
	})
}

// waitFor polls cond (the state of the code under test, never a
// duration it must meet) until it holds, failing after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// apiErr is the SDK's error for err, failing the test when it is not one.
func apiErr(t *testing.T, err error) *openai.Error {
	t.Helper()
	var e *openai.Error
	if err == nil || !errors.As(err, &e) {
		t.Fatalf("want an OpenAI API error, got %v", err)
	}
	return e
}

// rawGet is a plain GET with an optional bearer key.
func rawDo(t *testing.T, method, url, key string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// family is the gathered metric family name, nil when absent.
func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// sample is the value of the series of family name whose labels include
// want (a counter's, a gauge's, or a histogram's count); -1 when absent.
func sample(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	f := family(t, reg, name)
	if f == nil {
		return -1
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// contains fails the test unless s holds every part.
func contains(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%s: %q lacks %q", what, s, p)
		}
	}
}

// stream asks for a streamed chat answer through the SDK.
func (g *gw) stream(ctx context.Context, p openai.ChatCompletionNewParams) *ssestream.Stream[openai.ChatCompletionChunk] {
	c := g.client("")
	return c.Chat.Completions.NewStreaming(ctx, p)
}
