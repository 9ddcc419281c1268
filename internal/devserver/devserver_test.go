package devserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sparklane/sparklane/internal/devserver/searchattr"
	"github.com/sparklane/sparklane/internal/logging"
	"github.com/sparklane/sparklane/internal/tclient"
)

// logSink collects log entries; the server logs from its own goroutines,
// possibly after a test returns, so testing.T cannot be the sink.
type logSink struct {
	mu      sync.Mutex
	entries []string
}

func (s *logSink) logger() *zap.Logger {
	core := zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.AddSync(s), zapcore.DebugLevel)
	return zap.New(core)
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = append(s.entries, string(p))
	return len(p), nil
}

func (s *logSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.entries...)
}

// EchoInput / EchoResult: one struct in, one struct out.
type EchoInput struct{ Text string }
type EchoResult struct{ Text string }

// Echo is the trivial workflow the tests run: one activity, one result.
func Echo(ctx workflow.Context, in EchoInput) (EchoResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out EchoResult
	err := workflow.ExecuteActivity(ctx, Upper, in).Get(ctx, &out)
	return out, err
}

// Upper is Echo's activity.
func Upper(_ context.Context, in EchoInput) (EchoResult, error) {
	return EchoResult{Text: strings.ToUpper(in.Text)}, nil
}

func startServer(t *testing.T, stateDir string, sink *logSink) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	begin := time.Now()
	s, err := Start(ctx, Options{StateDir: stateDir, IP: "127.0.0.1", Port: 0, UIPort: 0, Logger: sink.logger()})
	if err != nil {
		t.Fatalf("Start(%s): %v", stateDir, err)
	}
	t.Logf("server up in %s: frontend %s, UI %s", time.Since(begin).Round(time.Millisecond), s.FrontendAddress(), s.UIURL())
	return s
}

func dial(t *testing.T, s *Server) client.Client {
	t.Helper()
	c, err := tclient.Dial(context.Background(), tclient.DialOptions{
		Address: s.FrontendAddress(), Namespace: s.Namespace(), Logger: logging.SDK(nil),
	})
	if err != nil {
		t.Fatalf("tclient.Dial(%s): %v", s.FrontendAddress(), err)
	}
	return c
}

// listUntil lists query until it holds exactly want ("ID=STATUS", any
// order) or 20 s pass, and returns the last answer. Visibility is
// eventually consistent: a closed run is listed Running until its close
// record is written.
func listUntil(t *testing.T, c client.Client, query string, want ...string) []string {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatalf("ListWorkflow(%q): %v", query, err)
		}
		var ids []string
		for _, e := range resp.GetExecutions() {
			ids = append(ids, e.GetExecution().GetWorkflowId()+"="+e.GetStatus().String())
		}
		slices.Sort(ids)
		if slices.Equal(ids, want) || time.Now().After(deadline) {
			return ids
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestRestartKeepsHistoryAndSearchAttributes(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state", "nested") // parents created by Start
	leaveHalfMadeSchema(t, stateDir)
	sink := &logSink{}
	s1 := startServer(t, stateDir, sink)
	if _, err := os.Stat(filepath.Join(stateDir, DBFile+".setup")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover %s.setup still there after Start: %v", DBFile, err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = s1.Stop()
		}
	}()

	if !strings.HasPrefix(s1.FrontendAddress(), "127.0.0.1:") || !strings.HasPrefix(s1.UIURL(), "http://127.0.0.1:") {
		t.Fatalf("addresses not on loopback: %s %s", s1.FrontendAddress(), s1.UIURL())
	}
	checkSecondStartRefused(t, stateDir, s1)

	c := dial(t, s1)
	w := worker.New(c, "devserver-test", worker.Options{})
	w.RegisterWorkflow(Echo)
	w.RegisterActivity(Upper)
	if err := w.Start(); err != nil {
		t.Fatalf("worker start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runLaneEchoes(ctx, t, c)

	// Filter by lane, the way the UI and `temporal workflow list --query` do.
	q := fmt.Sprintf("%s = %q", SearchAttrLane, "x")
	if got := listUntil(t, c, q, "echo-x=Completed"); len(got) != 1 || got[0] != "echo-x=Completed" {
		t.Fatalf("ListWorkflow(%s) = %v, want [echo-x=Completed]", q, got)
	}
	q2 := fmt.Sprintf("%s = %q AND %s = %q", SearchAttrLane, "y", SearchAttrCluster, "c-y")
	if got := listUntil(t, c, q2, "echo-y=Completed"); len(got) != 1 || got[0] != "echo-y=Completed" {
		t.Fatalf("ListWorkflow(%s) = %v, want [echo-y=Completed]", q2, got)
	}

	checkUI(t, s1)

	w.Stop()
	c.Close()
	if err := s1.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped = true
	if _, ok := Running(stateDir); ok {
		t.Fatalf("Running(%s) still true after Stop", stateDir)
	}

	// Restart on the same file: the previous runs are listed and their
	// history can be read.
	s2 := startServer(t, stateDir, sink)
	defer s2.Stop()
	c2 := dial(t, s2)
	defer c2.Close()
	checkRunsAfterRestart(ctx, t, s2, c2, q)
	checkQuietByDefault(t, sink)
}

// leaveHalfMadeSchema writes what a crash during first setup leaves: a
// half-made schema file, which Start must discard, not trust.
func leaveHalfMadeSchema(t *testing.T, stateDir string) {
	t.Helper()
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, DBFile+".setup"), []byte("half-made"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkSecondStartRefused: a second server on the same state dir is
// refused, naming the first, and Running finds the first.
func checkSecondStartRefused(t *testing.T, stateDir string, s1 *Server) {
	t.Helper()
	if _, err := Start(context.Background(), Options{StateDir: stateDir, UIPort: -1}); err == nil ||
		!strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), s1.FrontendAddress()) {
		t.Fatalf("second Start on %s: err = %v, want 'in use' naming %s", stateDir, err, s1.FrontendAddress())
	}
	if addr, ok := Running(stateDir); !ok || addr != s1.FrontendAddress() {
		t.Fatalf("Running(%s) = %q, %v; want %s, true", stateDir, addr, ok, s1.FrontendAddress())
	}
}

// runLaneEchoes runs echo-x and echo-y to completion, each with its lane
// and cluster search attributes.
func runLaneEchoes(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	runs := map[string]string{"echo-x": "x", "echo-y": "y"}
	for id, lane := range runs {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: id, TaskQueue: "devserver-test",
			TypedSearchAttributes: temporal.NewSearchAttributes(
				searchattr.LaneKey.ValueSet(lane),
				searchattr.ClusterKey.ValueSet("c-"+lane),
			),
		}, Echo, EchoInput{Text: "lane " + lane})
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		var out EchoResult
		if err := run.Get(ctx, &out); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if out.Text != strings.ToUpper("lane "+lane) {
			t.Fatalf("%s returned %q", id, out.Text)
		}
	}
}

// checkRunsAfterRestart: the restarted server lists both runs, filters
// by lane (query q), serves echo-x's history and search attributes, and
// its namespace check names a missing namespace.
func checkRunsAfterRestart(ctx context.Context, t *testing.T, s2 *Server, c2 client.Client, q string) {
	t.Helper()
	all := listUntil(t, c2, "", "echo-x=Completed", "echo-y=Completed")
	if len(all) != 2 || !contains(all, "echo-x=Completed") || !contains(all, "echo-y=Completed") {
		t.Fatalf("after restart ListWorkflow = %v, want echo-x and echo-y completed", all)
	}
	if got := listUntil(t, c2, q, "echo-x=Completed"); len(got) != 1 || got[0] != "echo-x=Completed" {
		t.Fatalf("after restart ListWorkflow(%s) = %v", q, got)
	}
	iter := c2.GetWorkflowHistory(ctx, "echo-x", "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var types []string
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatalf("history of echo-x after restart: %v", err)
		}
		types = append(types, ev.GetEventType().String())
	}
	if len(types) < 5 || types[0] != "WorkflowExecutionStarted" || types[len(types)-1] != "WorkflowExecutionCompleted" ||
		!contains(types, "ActivityTaskCompleted") {
		t.Fatalf("history of echo-x after restart = %v", types)
	}
	// tclient names a namespace the server does not have.
	if _, err := tclient.Dial(ctx, tclient.DialOptions{Address: s2.FrontendAddress(), Namespace: "nope"}); err == nil ||
		!strings.Contains(err.Error(), `namespace "nope" does not exist on `+s2.FrontendAddress()) {
		t.Fatalf("Dial to missing namespace: err = %v", err)
	}
	desc, err := c2.DescribeWorkflowExecution(ctx, "echo-x", "")
	if err != nil {
		t.Fatalf("describe echo-x: %v", err)
	}
	if sa := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[SearchAttrLane]; sa == nil || !strings.Contains(string(sa.GetData()), `"x"`) {
		t.Fatalf("echo-x search attribute %s after restart = %v", SearchAttrLane, sa)
	}
}

// checkQuietByDefault: no server line below warn reached the logger.
func checkQuietByDefault(t *testing.T, sink *logSink) {
	t.Helper()
	for _, l := range sink.lines() {
		if strings.Contains(l, `"logger":"server`) && (strings.Contains(l, `"level":"info"`) || strings.Contains(l, `"level":"debug"`)) {
			t.Errorf("server logged below warn: %s", l)
		}
	}
	t.Logf("log lines (server at warn+, ours at debug): %d", len(sink.lines()))
	for _, l := range sink.lines() {
		t.Log(strings.TrimSpace(l))
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// checkUI fetches the web app and the namespaces API from the embedded UI.
func checkUI(t *testing.T, s *Server) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (string, string) {
		resp, err := hc.Get(s.UIURL() + path)
		if err != nil {
			t.Fatalf("GET %s%s: %v", s.UIURL(), path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s: %.300s", path, resp.Status, body)
		}
		return resp.Header.Get("Content-Type"), string(body)
	}
	ct, body := get("/")
	if !strings.HasPrefix(ct, "text/html") || !strings.Contains(strings.ToLower(body), "<html") {
		t.Fatalf("GET / = %s, %.200s; want the HTML app", ct, body)
	}
	ct, body = get("/api/v1/namespaces")
	var ns struct {
		Namespaces []struct {
			NamespaceInfo struct{ Name string } `json:"namespaceInfo"`
		} `json:"namespaces"`
	}
	if err := json.Unmarshal([]byte(body), &ns); err != nil {
		t.Fatalf("GET /api/v1/namespaces (%s) is not JSON: %v: %.300s", ct, err, body)
	}
	var names []string
	for _, n := range ns.Namespaces {
		names = append(names, n.NamespaceInfo.Name)
	}
	if !contains(names, s.Namespace()) {
		t.Fatalf("UI namespaces = %v, want %s listed", names, s.Namespace())
	}

	// The UI's run list filtered by lane, as its search box sends it.
	q := url.QueryEscape(fmt.Sprintf("%s = %q", SearchAttrLane, "x"))
	_, body = get("/api/v1/namespaces/" + s.Namespace() + "/workflows?query=" + q)
	var runs struct {
		Executions []struct {
			Execution struct {
				WorkflowID string `json:"workflowId"`
			} `json:"execution"`
		} `json:"executions"`
	}
	if err := json.Unmarshal([]byte(body), &runs); err != nil {
		t.Fatalf("UI workflows list is not JSON: %v: %.300s", err, body)
	}
	if len(runs.Executions) != 1 || runs.Executions[0].Execution.WorkflowID != "echo-x" {
		t.Fatalf("UI workflows filtered by lane x = %.500s, want only echo-x", body)
	}
}

func TestRefusesNonLoopbackIP(t *testing.T) {
	for _, ip := range []string{"0.0.0.0", "192.168.1.10", "localhost", "::1"} {
		_, err := Start(context.Background(), Options{StateDir: t.TempDir(), IP: ip})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", ip)) || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("Start(IP %s): err = %v, want a refusal naming %q", ip, err, ip)
		}
	}
}

func TestPortInUseIsNamed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	_, err = Start(context.Background(), Options{StateDir: dir, Port: port, UIPort: -1})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) || !strings.Contains(err.Error(), "temporal.port") {
		t.Fatalf("Start on busy port %d: err = %v", port, err)
	}
	_, err = Start(context.Background(), Options{StateDir: dir, Port: 0, UIPort: port})
	if err == nil || !strings.Contains(err.Error(), "temporal.ui_port") {
		t.Fatalf("Start with busy UI port %d: err = %v", port, err)
	}
	// The failed starts released the state dir.
	if _, ok := Running(dir); ok {
		t.Fatalf("Running(%s) true after failed starts", dir)
	}
}

func TestMissingStateDirIsNamed(t *testing.T) {
	_, err := Start(context.Background(), Options{})
	if err == nil || !strings.Contains(err.Error(), "state_dir") {
		t.Fatalf("Start without state dir: err = %v", err)
	}
}

// The server's logs do reach the logger (named "server") when asked for;
// the default run above shows they are filtered to warn+.
func TestServerLogLevelLetsInfoThrough(t *testing.T) {
	sink := &logSink{}
	s, err := Start(context.Background(), Options{StateDir: t.TempDir(), UIPort: -1, Logger: sink.logger(), ServerLogLevel: "info"})
	if err != nil {
		t.Fatal(err)
	}
	if s.UIURL() != "" {
		t.Errorf("UIPort -1 still gave a UI at %s", s.UIURL())
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range sink.lines() {
		if strings.Contains(l, `"logger":"server"`) && strings.Contains(l, `"level":"info"`) {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no server info lines with ServerLogLevel info; got %d lines total", len(sink.lines()))
	}
	if _, err := Start(context.Background(), Options{StateDir: t.TempDir(), ServerLogLevel: "chatty"}); err == nil || !strings.Contains(err.Error(), "chatty") {
		t.Fatalf("bad ServerLogLevel: err = %v", err)
	}
}
