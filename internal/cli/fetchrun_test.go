package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/lane"
)

// runningClient is a client double (no server) whose workflow ID is
// already running with the recorded input: ExecuteWorkflow is refused as
// the server refuses it, the history's first event carries that input.
type runningClient struct {
	client.Client
	input    *commonpb.Payloads
	followed string
}

func (c *runningClient) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "req", "run-7")
}

func (c *runningClient) GetWorkflowHistory(_ context.Context, id, runID string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	return &oneEvent{e: &historypb.HistoryEvent{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: c.input}}}}
}

func (c *runningClient) GetWorkflow(_ context.Context, id, runID string) client.WorkflowRun {
	c.followed = id + "@" + runID
	return fakeRun{id: id}
}

type oneEvent struct {
	e    *historypb.HistoryEvent
	done bool
}

func (o *oneEvent) HasNext() bool { return !o.done }
func (o *oneEvent) Next() (*historypb.HistoryEvent, error) {
	o.done = true
	return o.e, nil
}

func fetchInput(rev string) contract.FetchInput {
	return contract.FetchInput{Plan: contract.FetchPlan{Lane: "l", Endpoint: "http://mirror", Repos: []contract.FetchRepo{{Block: "w", Repo: "org/m", Revision: rev, CacheDir: "/nas/hub"}}}}
}

// `starter fetch` (stage, verify) repeated while its run goes on: with
// the same input it follows that run, saying so in one line; with another
// it refuses (exit 3), saying how the inputs differ; a command that does
// not ask for it refuses as before.
func TestRepeatedCommandFollowsTheSameRun(t *testing.T) {
	running, err := converter.GetDefaultDataConverter().ToPayloads(fetchInput("main"))
	if err != nil {
		t.Fatal(err)
	}
	fc := &runningClient{input: running}
	var out bytes.Buffer
	a := &App{Out: &out, Err: &bytes.Buffer{}, env: &control.Conn{Client: fc}}
	ctx := context.Background()

	run, err := a.start(ctx, runSpec{ID: "fetch/l", Input: fetchInput("main"), FollowSame: true})
	if err != nil || run == nil || fc.followed != "fetch/l@run-7" {
		t.Fatalf("the same input: run %v, %v (followed %q)", run, err, fc.followed)
	}
	if got := strings.TrimSpace(out.String()); got != "fetch/l is already running with the same input (run run-7): following it" {
		t.Fatalf("said %q", got)
	}

	fc.followed = ""
	_, err = a.start(ctx, runSpec{ID: "fetch/l", Input: fetchInput("v2"), FollowSame: true})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 3 || fc.followed != "" || !strings.Contains(err.Error(), `plan.repos[0].revision: "main" → "v2"`) || !strings.Contains(err.Error(), "starter attach fetch/l") {
		t.Fatalf("another input: %v (followed %q)", err, fc.followed)
	}
	if _, err = a.start(ctx, runSpec{ID: "fetch/l", Input: fetchInput("main")}); !errors.As(err, &ee) || ee.code != 3 || fc.followed != "" || !strings.Contains(err.Error(), "already running (run run-7)") {
		t.Fatalf("without FollowSame: %v (followed %q)", err, fc.followed)
	}
}

// The progress of a fetch that retries says why: its heartbeat's reason
// (the engine retrying a request) or, on a later attempt, the last
// attempt's failure — on the "still running" line and as a line of its
// own off a terminal, under the bar on one.
func TestProgressSaysWhyAFetchRetries(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	beat, err := dc.ToPayloads(contract.FetchProgress{Repo: "org/m", BytesTotal: 100 << 20, BytesDone: 10 << 20,
		Retry: "try 2 of 5 failed, retrying: list repo org/m: the answer is not the Hub's JSON (HTTP 200, Content-Type \"text/html\")"})
	if err != nil {
		t.Fatal(err)
	}
	d := &workflowservice.DescribeWorkflowExecutionResponse{PendingActivities: []*workflowpb.PendingActivityInfo{
		{ActivityType: &commonpb.ActivityType{Name: "FetchRepo"}, HeartbeatDetails: beat, Attempt: 1},
	}}
	pr, ok := pendingProgress(d)
	if !ok || pr.BytesDone != 10<<20 || !strings.Contains(pr.Retry, "not the Hub's JSON") {
		t.Fatalf("heartbeat reason: %+v, %v", pr, ok)
	}
	// A later attempt that has not heartbeat yet: its last failure.
	d.PendingActivities[0] = &workflowpb.PendingActivityInfo{ActivityType: &commonpb.ActivityType{Name: "FetchRepo"}, Attempt: 3,
		LastFailure: &failurepb.Failure{Message: "list repo org/m: gave up after 5 tries in a row: connection refused"}}
	last, ok := pendingProgress(d)
	if !ok || last.Retry != "attempt 3; the last one failed: list repo org/m: gave up after 5 tries in a row: connection refused" {
		t.Fatalf("last failure: %+v, %v", last, ok)
	}

	var buf bytes.Buffer
	r := newRenderer(&buf, false, false)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	p := contract.Progress{Steps: []contract.Step{{Name: "fetch org/m@main", Node: "control", Status: contract.StepRunning}}}
	r.draw(p, map[string]progressSample{"fetch/l": pr})
	if !strings.Contains(buf.String(), "  l retrying: try 2 of 5 failed, retrying: list repo org/m: the answer is not the Hub's JSON") {
		t.Fatalf("plain output does not say why:\n%s", buf.String())
	}
	now = now.Add(plainEvery + time.Second)
	r.draw(p, map[string]progressSample{"fetch/l": last})
	if !strings.Contains(buf.String(), "  l retrying: attempt 3; the last one failed") {
		t.Fatalf("a new reason is not printed:\n%s", buf.String())
	}
	now = now.Add(plainEvery + time.Second)
	r.draw(p, map[string]progressSample{"fetch/l": last})
	if !strings.Contains(buf.String(), "still running: fetch org/m@main [control], l (retrying: attempt 3; the last one failed") {
		t.Fatalf("the still-running line does not say why:\n%s", buf.String())
	}

	buf.Reset()
	live := newRenderer(&buf, true, false)
	live.draw(p, map[string]progressSample{"fetch/l": pr})
	if !strings.Contains(buf.String(), "    retrying: try 2 of 5 failed") {
		t.Fatalf("the live bars do not say why:\n%s", buf.String())
	}
}

// The fetch plan takes this shell's HF_ENDPOINT when the config sets no
// hf_endpoint, and the starter says which endpoint the fetch uses before
// anything starts; hf_endpoint comes first, and a shadowed HF_ENDPOINT is
// named; with neither, it says what the worker will use.
func TestFetchPlanTakesAndPrintsTheEndpoint(t *testing.T) {
	cfg := &config.Config{File: "/etc/sparklane.toml"}
	r := &contract.Recipe{File: "l.toml", Name: "l", Staging: []contract.Staging{{Kind: "hub-mirror", ID: "w", Src: "/nas/hub", Repos: []string{"org/m"}}}}
	for _, c := range []struct{ config, env, endpoint, says string }{
		{"", "http://mirror.lan:8080/", "http://mirror.lan:8080", "fetch endpoint: http://mirror.lan:8080 (this shell's HF_ENDPOINT, sent with the run; the token is not), fetching on control"},
		{"https://hub.example", "http://mirror.lan:8080", "https://hub.example", "fetch endpoint: https://hub.example (hf_endpoint in /etc/sparklane.toml), fetching on control; this shell's HF_ENDPOINT=http://mirror.lan:8080 is not used: hf_endpoint comes first"},
		{"", "", "", "fetch endpoint: control's HF_ENDPOINT if its service sets one, else the public Hub https://huggingface.co (neither hf_endpoint nor HF_ENDPOINT is set here)"},
	} {
		var out bytes.Buffer
		a := &App{Out: &out, getenv: func(k string) string {
			if k == "HF_ENDPOINT" {
				return c.env
			}
			return ""
		}}
		cfg.HFEndpoint = c.config
		fp, err := a.fetchPlan(cfg, r, lane.FetchOptions{})
		if err != nil || fp.Endpoint != c.endpoint || strings.TrimSpace(out.String()) != c.says {
			t.Errorf("hf_endpoint %q, HF_ENDPOINT %q: plan endpoint %q (%v), said %q\nwant %q, %q", c.config, c.env, fp.Endpoint, err, out.String(), c.endpoint, c.says)
		}
	}
}
