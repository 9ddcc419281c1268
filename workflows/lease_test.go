package workflows

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// leaseTrial is a test workflow standing for two mutating runs in one
// environment: run A (a cutover of 2nodes-dac) holds dgx1 and dgx2; run B
// (a stage reached through 4nodes-switch) asks for dgx0 and dgx1 and must
// be refused at dgx1, naming A, after releasing dgx0; once A releases, C
// takes dgx0, dgx1 and dgx2.
func leaseTrial(ctx workflow.Context) ([]string, error) {
	t := newTracker(ctx, "trial", "")
	var out []string
	a, err := holdNodes(ctx, t, contract.NodeLeaseHolder{Kind: contract.LeaseCutover, Lane: "mia", Cluster: "2nodes-dac"}, []string{"dgx2", "dgx1"})
	if err != nil {
		return nil, err
	}
	out = append(out, "A holds")
	if _, err := holdNodes(ctx, t, contract.NodeLeaseHolder{Kind: contract.LeaseStage, Lane: "kimi", Cluster: "4nodes-switch"}, []string{"dgx1", "dgx0"}); err != nil {
		if !temporal.IsApplicationError(err) {
			return out, err
		}
		out = append(out, "B refused: "+errMessage(err)+" ["+errType(err)+"]")
	} else {
		out = append(out, "B admitted")
	}
	a.release()
	c, err := holdNodes(ctx, t, contract.NodeLeaseHolder{Kind: contract.LeaseStage, Lane: "kimi", Cluster: "4nodes-switch"}, []string{"dgx0", "dgx1", "dgx2"})
	if err != nil {
		return out, err
	}
	out = append(out, "C holds")
	c.release()
	return out, nil
}

// leaseEnv is a test environment recording node lease starts and ends in
// order, beside the fake fleet's activity calls.
type leaseLog struct {
	mu     sync.Mutex
	events []string
}

func (l *leaseLog) add(s string) {
	l.mu.Lock()
	l.events = append(l.events, s)
	l.mu.Unlock()
}

func (l *leaseLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

func watchLeases(env *testsuite.TestWorkflowEnvironment, l *leaseLog, also func(string)) {
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, _ converter.EncodedValues) {
		if strings.HasPrefix(info.WorkflowExecution.ID, "node-lease.") {
			l.add("start " + info.WorkflowExecution.ID)
			if also != nil {
				also("start " + info.WorkflowExecution.ID)
			}
		}
	})
	env.SetOnChildWorkflowCompletedListener(func(info *workflow.Info, _ converter.EncodedValue, _ error) {
		if strings.HasPrefix(info.WorkflowExecution.ID, "node-lease.") {
			l.add("end " + info.WorkflowExecution.ID)
			if also != nil {
				also("end " + info.WorkflowExecution.ID)
			}
		}
	})
}

func TestNodeLeaseRefusesSecondRunNamingHolder(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(NodeLease)
	env.RegisterWorkflow(leaseTrial)
	env.RegisterActivity(&activities.ControlActivities{})
	// Test double of LeaseHolder: the test environment has no server to
	// query; it answers what run A's lease carries (the real query is
	// proved by the itest TestOverlappingClustersOneMutatingRunPerNode).
	var asked []string
	env.OnActivity("LeaseHolder", mock.Anything, mock.Anything).Return(func(_ context.Context, in contract.NodeLeaseHolderInput) (contract.NodeLeaseHolder, error) {
		asked = append(asked, in.Node)
		return contract.NodeLeaseHolder{Node: in.Node, WorkflowID: "default-test-workflow-id", Kind: contract.LeaseCutover, Lane: "mia", Cluster: "2nodes-dac"}, nil
	})
	var l leaseLog
	watchLeases(env, &l, nil)
	env.ExecuteWorkflow(leaseTrial)
	if !env.IsWorkflowCompleted() {
		t.Fatal("trial did not complete")
	}
	var out []string
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatalf("trial: %v (so far %v)", err, l.list())
	}
	want := "B refused: node dgx1 is held by cutover default-test-workflow-id (lane mia, cluster 2nodes-dac); one mutating run per node: wait for it to finish and retry this stage, follow it with `starter attach default-test-workflow-id`, or cancel it with `starter cancel default-test-workflow-id` [NodeHeld]"
	if len(out) != 3 || out[0] != "A holds" || out[1] != want || out[2] != "C holds" {
		t.Fatalf("trial said\n%q\nwant A holds, %q, C holds", out, want)
	}
	if len(asked) != 1 || asked[0] != "dgx1" {
		t.Errorf("holder asked for %v, want [dgx1]", asked)
	}
	// Leases in node order; B's dgx0 released before A's; every lease ended.
	wantEvents := []string{
		"start node-lease.dgx1", "start node-lease.dgx2", // A, in node order
		"start node-lease.dgx0", "end node-lease.dgx0", // B took dgx0, refused at dgx1, gave dgx0 back
		"end node-lease.dgx1", "end node-lease.dgx2", // A released
		"start node-lease.dgx0", "start node-lease.dgx1", "start node-lease.dgx2",
		"end node-lease.dgx0", "end node-lease.dgx1", "end node-lease.dgx2",
	}
	if got := l.list(); strings.Join(got, ",") != strings.Join(wantEvents, ",") {
		t.Errorf("lease events\n%v\nwant\n%v", got, wantEvents)
	}
}

// leasesEnded checks that every node's lease started once and ended, and
// that it ended after the last activity of the run (the lease is held
// through cleanup and rollback).
func leasesEnded(t *testing.T, l *leaseLog, order []string, nodes ...string) {
	t.Helper()
	ev := l.list()
	for _, n := range nodes {
		id := "node-lease." + n
		var starts, ends int
		for _, e := range ev {
			switch e {
			case "start " + id:
				starts++
			case "end " + id:
				ends++
			}
		}
		if starts != 1 || ends != 1 {
			t.Errorf("lease %s started %d and ended %d times, want 1 and 1: %v", id, starts, ends, ev)
		}
	}
	// order interleaves activity calls and lease events: the plan's nodes
	// are held before any activity, and no activity runs after the first
	// lease end.
	if len(order) < 2 || order[0] != "start node-lease.a" || order[1] != "start node-lease.b" {
		t.Errorf("the run did not hold a and b first: %v", order)
	}
	firstEnd := -1
	for i, e := range order {
		if strings.HasPrefix(e, "end node-lease.") && firstEnd < 0 {
			firstEnd = i
		}
		if firstEnd >= 0 && !strings.HasPrefix(e, "end node-lease.") {
			t.Errorf("%q ran after a lease was released: %v", e, order)
		}
	}
}

func newLeasedCutover(t *testing.T) (*cutoverFixture, *leaseLog, func() []string) {
	c := newCutover(t)
	var l leaseLog
	var mu sync.Mutex
	var order []string
	watchLeases(c.env, &l, func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() })
	snapshot := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), order...)
	}
	c.onCall = func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	return c, &l, snapshot
}

func TestCutoverHoldsItsNodesAndReleasesThemOnEveryExit(t *testing.T) {
	t.Run("ok", func(t *testing.T) {
		c, l, order := newLeasedCutover(t)
		if _, err := c.run(); err != nil {
			t.Fatal(err)
		}
		// a and b are the plan's; c runs the previous lane, which is stopped there too.
		leasesEnded(t, l, order(), "a", "b", "c")
	})
	t.Run("rolled back", func(t *testing.T) {
		c, l, order := newLeasedCutover(t)
		c.stageErr["new/weights@b"] = newAppErr("node b: /srv/hub: 3 GiB free, block weights needs 100 GiB", fault.NoSpace)
		if _, err := c.run(); err == nil {
			t.Fatal("cutover succeeded")
		}
		if c.count("StartRank old@") == 0 {
			t.Fatalf("no rollback ran: %v", c.callList())
		}
		leasesEnded(t, l, order(), "a", "b", "c")
	})
	t.Run("cancelled", func(t *testing.T) {
		c, l, order := newLeasedCutover(t)
		c.readyDelay = 10 * time.Minute
		c.env.RegisterDelayedCallback(c.env.CancelWorkflow, time.Minute)
		if _, err := c.run(); err == nil {
			t.Fatal("cancelled cutover succeeded")
		}
		if c.count("StopLane new@") != 2 {
			t.Fatalf("no cleanup ran after cancel: %v", c.callList())
		}
		leasesEnded(t, l, order(), "a", "b", "c")
	})
}

func TestChildRunsTakeNoLeaseOfTheirOwn(t *testing.T) {
	// A cutover's StageNode children run on nodes their parent holds: only
	// the parent's leases exist (a child asking would be refused by its
	// own parent).
	c, l, _ := newLeasedCutover(t)
	if _, err := c.run(); err != nil {
		t.Fatal(err)
	}
	if n := len(l.list()); n != 6 {
		t.Errorf("%d lease events, want 6 (a, b, c started and ended once): %v", n, l.list())
	}
}

// up (Serve), stop and stage hold exactly the nodes they touch, before
// their first activity, and release them before they return; a dry-run
// stage writes nothing and holds nothing.
func TestUpStopStageHoldTheirNodes(t *testing.T) {
	cases := []struct {
		name  string
		run   func(f *fakeFleet)
		nodes []string
	}{
		{"up", func(f *fakeFleet) {
			f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("new", nil, false), Plan: testPlan("new", "h", "b", "a")})
		}, []string{"a", "b"}},
		{"stop", func(f *fakeFleet) {
			f.env.ExecuteWorkflow(Stop, contract.StopInput{Lane: "old", Nodes: []string{"c", "a"}})
		}, []string{"a", "c"}},
		{"stage", func(f *fakeFleet) {
			f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks()})
		}, []string{"a", "b"}},
		{"stage --node b", func(f *fakeFleet) {
			f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Only: "b"})
		}, []string{"b"}},
		{"stage --dry-run", func(f *fakeFleet) {
			f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), DryRun: true})
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeFleet(t)
			f.env.RegisterWorkflow(Stage)
			var l leaseLog
			var mu sync.Mutex
			var order []string
			watchLeases(f.env, &l, func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() })
			f.onCall = func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
			tc.run(f)
			if !f.env.IsWorkflowCompleted() {
				t.Fatal("run did not complete")
			}
			if err := f.env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, n := range tc.nodes {
				want = append(want, "start node-lease."+n)
			}
			if len(order) < len(want) || strings.Join(order[:len(want)], ",") != strings.Join(want, ",") {
				t.Fatalf("run began %v, want the leases %v first", order, want)
			}
			if len(want) > 0 {
				leasesEndedAfterWork(t, &l, order, tc.nodes)
			} else if ev := l.list(); len(ev) != 0 {
				t.Errorf("a dry run took leases: %v", ev)
			}
		})
	}
}

func leasesEndedAfterWork(t *testing.T, l *leaseLog, order, nodes []string) {
	t.Helper()
	if got := len(l.list()); got != 2*len(nodes) {
		t.Errorf("%d lease events, want %d: %v", got, 2*len(nodes), l.list())
	}
	seenEnd := false
	for _, e := range order {
		if strings.HasPrefix(e, "end node-lease.") {
			seenEnd = true
		} else if seenEnd {
			t.Errorf("%q ran after a lease was released: %v", e, order)
		}
	}
	if !seenEnd {
		t.Errorf("no lease released: %v", order)
	}
}

// A verify holds nothing while it reads; its repair holds the drifted
// nodes (and only those) while it re-stages.
func TestVerifyRepairHoldsTheDriftedNodes(t *testing.T) {
	f := newFakeFleet(t)
	f.verifyBad["new/weights@b"] = []string{"hub/model-00002.safetensors"}
	var l leaseLog
	var mu sync.Mutex
	var order []string
	watchLeases(f.env, &l, func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() })
	f.onCall = func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	f.env.ExecuteWorkflow(Verify, contract.VerifyInput{Lanes: []contract.VerifyLane{verifyLane()}, Repair: true})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("Verify --repair: %v", err)
	}
	want := []string{"start node-lease.b", "StageBlock new/weights@b", "end node-lease.b"}
	var got []string
	for _, e := range order {
		if !strings.HasPrefix(e, "VerifyBlock") {
			got = append(got, e)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || !strings.HasPrefix(order[0], "VerifyBlock") {
		t.Errorf("verify --repair ran %v, want the verify, then %v", order, want)
	}
}
