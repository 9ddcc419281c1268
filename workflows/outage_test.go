package workflows

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
)

// outageEnv runs StageNode on node dgx3 whose worker is gone for the first
// `gone` StageBlock calls (pickup timeouts, the first carrying the last
// heartbeated progress) and polls again after `back` NodePolling answers.
type outageEnv struct {
	env       *testsuite.TestWorkflowEnvironment
	stageRuns []contract.StageBlockInput
	polls     int
}

func newOutageEnv(t *testing.T, gone, back int) *outageEnv {
	var s testsuite.WorkflowTestSuite
	o := &outageEnv{env: s.NewTestWorkflowEnvironment()}
	o.env.RegisterActivity(&activities.NodeActivities{})
	o.env.RegisterActivity(&activities.ControlActivities{})
	o.env.OnActivity("StageBlock", mock.Anything, mock.Anything).Return(func(_ context.Context, in contract.StageBlockInput) (contract.StageBlockResult, error) {
		o.stageRuns = append(o.stageRuns, in)
		switch n := len(o.stageRuns); {
		case n == 1:
			// The worker died mid-copy; its retries found no worker: the
			// server reports the pickup timeout with the last heartbeat.
			details := contract.StageProgress{FilesTotal: 4, BytesTotal: 4 << 30, BytesDone: 3 << 30}
			return contract.StageBlockResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil, details)
		case n <= gone:
			return contract.StageBlockResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
		}
		return contract.StageBlockResult{Node: "dgx3", Block: in.Block.ID, Result: contract.BlockResult{CopiedFiles: 1}}, nil
	})
	o.env.OnActivity("NodePolling", mock.Anything, mock.Anything).Return(func(_ context.Context, in contract.NodePollingInput) (contract.NodePollingResult, error) {
		o.polls++
		return contract.NodePollingResult{Node: in.Node, Polling: o.polls > back}, nil
	})
	return o
}

func outageInput(budget time.Duration) contract.StageNodeInput {
	return contract.StageNodeInput{Lane: "mia", Node: "dgx3", Blocks: []contract.Staging{{Kind: "hub-mirror", ID: "weights"}}, Mode: contract.StageAuto, OutageBudget: contract.Duration(budget)}
}

// A node worker gone for minutes mid-copy (heartbeat lost, then nobody picks
// up) is waited for within the budget, the wait shows in the progress
// query, and the block is run again with the last heartbeated progress.
func TestStageNodeWaitsForANodeThatComesBack(t *testing.T) {
	o := newOutageEnv(t, 3, 6)
	var waiting []string
	o.env.RegisterDelayedCallback(func() {
		v, err := o.env.QueryWorkflow(contract.ProgressQuery)
		if err != nil {
			t.Errorf("query: %v", err)
			return
		}
		var p contract.Progress
		if err := v.Get(&p); err != nil {
			t.Error(err)
			return
		}
		for _, s := range p.Steps {
			if s.Status == contract.StepWaiting {
				waiting = append(waiting, s.Detail)
			}
		}
		if len(p.Waiting) != 1 || p.Waiting[0].Node != "dgx3" {
			t.Errorf("progress.waiting = %+v, want dgx3", p.Waiting)
		}
	}, 30*time.Second)
	o.env.ExecuteWorkflow(StageNode, outageInput(30*time.Minute))
	if err := o.env.GetWorkflowError(); err != nil {
		t.Fatalf("stage with a node back within budget failed: %v", err)
	}
	var res contract.StageNodeResult
	if err := o.env.GetWorkflowResult(&res); err != nil || len(res.Blocks) != 1 {
		t.Fatalf("result %+v, %v", res, err)
	}
	if len(o.stageRuns) != 4 {
		t.Fatalf("StageBlock ran %d times, want 4 (lost, 2 more pickups timed out, done)", len(o.stageRuns))
	}
	last := o.stageRuns[len(o.stageRuns)-1]
	if last.Resume == nil || last.Resume.BytesDone != 3<<30 {
		t.Fatalf("the block was run again without the heartbeated progress: %+v", last.Resume)
	}
	if len(waiting) != 1 || !strings.Contains(waiting[0], "waiting for node dgx3 (down ") {
		t.Fatalf("progress during the outage: %q, want a waiting step naming dgx3", waiting)
	}
}

// A node that never comes back fails the stage after the budget, naming
// the node and how long it was gone.
func TestStageNodeFailsPastTheOutageBudget(t *testing.T) {
	o := newOutageEnv(t, 1000, 1<<30)
	o.env.ExecuteWorkflow(StageNode, outageInput(2*time.Minute))
	err := o.env.GetWorkflowError()
	if err == nil {
		t.Fatal("stage succeeded though the node never came back")
	}
	for _, want := range []string{"node dgx3 was gone for 2m", "outage budget of 2m0s", "node.dgx3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if errType(err) != "NodeUnreachable" {
		t.Errorf("error type %q, want NodeUnreachable", errType(err))
	}
	if o.polls < 2 {
		t.Errorf("NodePolling asked %d times during a 2m budget, want it to keep asking", o.polls)
	}
}

// progressWaiting is the progress query's waiting steps and nodes.
func progressWaiting(t *testing.T, env *testsuite.TestWorkflowEnvironment) (details []string, nodes []string) {
	v, err := env.QueryWorkflow(contract.ProgressQuery)
	if err != nil {
		t.Errorf("query: %v", err)
		return nil, nil
	}
	var p contract.Progress
	if err := v.Get(&p); err != nil {
		t.Error(err)
		return nil, nil
	}
	for _, s := range p.Steps {
		if s.Status == contract.StepWaiting {
			details = append(details, s.Name+"@"+s.Node+": "+s.Detail)
		}
	}
	for _, w := range p.Waiting {
		nodes = append(nodes, w.Node)
	}
	return details, nodes
}

// A node whose worker is gone when the serve phase reaches it (a reboot
// between staging and serve) is waited for within the outage budget while
// the other nodes go on; the wait shows in the progress query, and the
// lane comes up once the node polls again.
func TestServeWaitsForANodeThatComesBack(t *testing.T) {
	f := newFakeFleet(t)
	f.gone["b"] = 2 // its image step's first two pickups time out
	var details, nodes []string
	f.env.RegisterDelayedCallback(func() { details, nodes = progressWaiting(t, f.env) }, 15*time.Second)
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("new", nil, false), Plan: testPlan("new", "h", "a", "b", "c"), OutageBudget: contract.Duration(30 * time.Minute)})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("Serve with node b back within its budget: %v", err)
	}
	var res contract.ServeResult
	if err := f.env.GetWorkflowResult(&res); err != nil || !res.Answers || len(res.Ranks) != 3 {
		t.Fatalf("result %+v (%v), want 3 ranks answering", res, err)
	}
	if len(details) != 1 || !strings.HasPrefix(details[0], "image@b: waiting for node b (down ") || len(nodes) != 1 || nodes[0] != "b" {
		t.Fatalf("progress during the outage: steps %q, waiting %q; want b's image step waiting", details, nodes)
	}
	if f.polls["b"] == 0 || f.gone["b"] != 0 {
		t.Fatalf("NodePolling asked %d times, %d pickups left", f.polls["b"], f.gone["b"])
	}
	f.expectPhases(on("EnsureImage img-new", "a", "b", "c"), on("StartRank new", "a", "b", "c"),
		[]string{"WaitReady new"}, []string{"Smoke http://new"}, []string{"DecodeProbe http://new"})
}

// Past the budget the serve step fails naming the node and how long it
// was gone; the half-started lane's stop waits for that node as long, and
// then says it could not stop there either.
func TestServeFailsPastTheOutageBudgetNamingTheNode(t *testing.T) {
	f := newFakeFleet(t)
	f.gone["c"] = 1 << 30
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("new", nil, false), Plan: testPlan("new", "h", "a", "b", "c"), OutageBudget: contract.Duration(2 * time.Minute)})
	err := f.env.GetWorkflowError()
	if err == nil {
		t.Fatal("Serve succeeded though node c never came back")
	}
	for _, want := range []string{"node c was gone for 2m", "outage budget of 2m0s", "node.c", "stopping the half-started lane failed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n := f.count("StartRank"); n != 0 {
		t.Errorf("StartRank ran %d times though a node had no image", n)
	}
}

// A stop asked for by hand (Stop workflow, no budget) does not wait for a
// node that is gone: a switched-off node must not hold it for half an hour.
func TestStopByHandDoesNotWaitForAGoneNode(t *testing.T) {
	f := newFakeFleet(t)
	f.gone["b"] = 1 << 30
	f.env.ExecuteWorkflow(Stop, contract.StopInput{Lane: "old", Nodes: []string{"a", "b"}})
	err := f.env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "node b") {
		t.Fatalf("stop with node b gone: %v, want a failure naming b", err)
	}
	if f.polls["b"] != 0 {
		t.Errorf("the stop waited for b (NodePolling asked %d times)", f.polls["b"])
	}
	f.expectPhases(on("StopLane old", "a"))
}

// A node whose worker went away between staging and the cutover's verify
// step is waited for within the budget (NodePolling asked until it polls
// again), its blocks are verified then, and the cutover completes. (The
// wait's display is covered by the serve and stage tests: it is the same
// loop.)
func TestCutoverVerifyWaitsForANodeThatComesBack(t *testing.T) {
	c := newCutover(t)
	c.verifyGone["b"] = 2
	c.in.OutageBudget = contract.Duration(30 * time.Minute)
	res, err := c.run()
	if err != nil || !res.OK || len(res.Verify) != 4 {
		t.Fatalf("cutover with b back within its budget: %v %+v", err, res)
	}
	if c.verifyGone["b"] != 0 || c.polls["b"] == 0 || c.polls["a"] != 0 {
		t.Fatalf("VerifyBlock pickups left on b %d, NodePolling asked for b %d times, for a %d", c.verifyGone["b"], c.polls["b"], c.polls["a"])
	}
	if n := c.count("VerifyBlock new/weights@b") + c.count("VerifyBlock new/rows@b"); n != 2 {
		t.Fatalf("b's blocks verified %d times after it came back, want 2", n)
	}
}

// Past the budget the verify step fails naming the node, and the cutover
// rolls back before serving.
func TestCutoverVerifyFailsPastTheOutageBudget(t *testing.T) {
	c := newCutover(t)
	c.verifyGone["b"] = 1 << 30
	c.in.OutageBudget = contract.Duration(2 * time.Minute)
	res, err := c.run()
	if err == nil || res.OK || res.FailedStep != "verify" || !strings.Contains(res.Error, "node b was gone for 2m") {
		t.Fatalf("cutover with b gone: %v %+v", err, res)
	}
	if !reflect.DeepEqual(res.RolledBack, []string{"old"}) {
		t.Fatalf("rolled back %v, want old", res.RolledBack)
	}
	if n := c.count("StartRank new"); n != 0 {
		t.Fatalf("the new lane was started %d times after a failed verify", n)
	}
}
