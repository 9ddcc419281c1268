package workflows

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// cutoverFixture: lane "new" on a,b replaces lane "old" that runs on a,b
// and c (c is in the fleet but not in new's plan).
type cutoverFixture struct {
	*fakeFleet
	in      contract.CutoverInput
	oldPlan contract.ResolveLaneResult
}

func newCutover(t *testing.T) *cutoverFixture {
	f := newFakeFleet(t)
	for _, n := range []string{"a", "b", "c"} {
		f.lanesOn[n] = []string{"old"}
	}
	old := contract.ResolveLaneResult{Recipe: testRecipe("old", nil, false), Plan: testPlan("old", "hash-old", "a", "b", "c")}
	f.resolve["old"] = old
	return &cutoverFixture{fakeFleet: f, oldPlan: old, in: contract.CutoverInput{
		Recipe: testRecipe("new", testBlocks(), true), Plan: testPlan("new", "hash-new", "a", "b"),
		Stage: contract.StageAuto, Fleet: []string{"a", "b", "c"},
		// The order these tests pin: the previous lane stopped first
		// (stageahead_test.go has the stage-ahead order).
		StageAhead: contract.StageAheadNever,
	}}
}

// runRollsBack runs the cutover and requires it to fail at step with an
// error containing part (ifOK says what succeeding would mean), the old
// lane rolled back and answering, with no rollback error.
func (c *cutoverFixture) runRollsBack(ifOK, step, part string) {
	c.t.Helper()
	res, err := c.run()
	if err == nil {
		c.t.Fatal(ifOK)
	}
	if res.FailedStep != step || !strings.Contains(res.Error, part) {
		c.t.Errorf("FailedStep %q Error %q, want %s with %q", res.FailedStep, res.Error, step, part)
	}
	if !reflect.DeepEqual(res.RolledBack, []string{"old"}) || !res.OldLaneAnswers || res.RollbackError != "" {
		c.t.Errorf("RolledBack %v OldLaneAnswers %v RollbackError %q, want old back and answering", res.RolledBack, res.OldLaneAnswers, res.RollbackError)
	}
}

func (c *cutoverFixture) run() (contract.CutoverResult, error) {
	c.env.ExecuteWorkflow(Cutover, c.in)
	if !c.env.IsWorkflowCompleted() {
		c.t.Fatal("cutover did not complete")
	}
	var res contract.CutoverResult
	if err := c.env.GetWorkflowError(); err != nil {
		app := appErr(c.t, err)
		if app.Type() != "CutoverFailed" {
			c.t.Fatalf("error type %q, want CutoverFailed: %v", app.Type(), err)
		}
		if derr := app.Details(&res); derr != nil {
			c.t.Fatalf("CutoverFailed details: %v", derr)
		}
		return res, err
	}
	if err := c.env.GetWorkflowResult(&res); err != nil {
		c.t.Fatal(err)
	}
	return res, nil
}

// Phases shared by the tests below.
var (
	probePhase = cat([]string{"CheckSSH a", "CheckSSH b", "CheckSSH c"}, on("NodeStatus", "a", "b", "c"))
	stagePhase = cat(on("StageBlock new/weights", "a", "b"), on("StageBlock new/rows", "a", "b"))
	verifyNew  = cat(on("VerifyBlock new/weights", "a", "b"), on("VerifyBlock new/rows", "a", "b"))
)

func serveNew() [][]string {
	return [][]string{
		on("EnsureImage img-new", "a", "b"), on("BeforeServe new", "a", "b"), on("StartRank new", "a", "b"),
		{"WaitReady new"}, {"Smoke http://new"}, {"DecodeProbe http://new"},
	}
}

// serveOld is the rollback: the old lane's own plan on a, b and c.
func serveOld() [][]string {
	return [][]string{
		on("EnsureImage img-old", "a", "b", "c"), on("StartRank old", "a", "b", "c"),
		{"WaitReady old"}, {"Smoke http://old"}, {"DecodeProbe http://old"},
	}
}

func phases(lists ...[][]string) [][]string {
	var out [][]string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func stepStatus(steps []contract.Step, name, node string) string {
	for _, s := range steps {
		if s.Name == name && s.Node == node {
			return s.Status
		}
	}
	return "(none)"
}

func TestCutoverHappyPath(t *testing.T) {
	c := newCutover(t)
	res, err := c.run()
	if err != nil {
		t.Fatalf("cutover: %v", err)
	}
	if !res.OK || res.FailedStep != "" || res.Error != "" {
		t.Errorf("result %+v, want OK with no failure", res)
	}
	if !reflect.DeepEqual(res.Previous, []string{"old"}) || len(res.RolledBack) != 0 {
		t.Errorf("Previous %v RolledBack %v, want [old] and none", res.Previous, res.RolledBack)
	}
	if res.Probe == nil || len(res.Probe.Nodes) != 3 || len(res.Stage) != 2 || len(res.Verify) != 4 {
		t.Errorf("probe/stage/verify sections incomplete: %+v", res)
	}
	if res.Serve == nil || !res.Serve.Answers || res.Serve.BaseURL != "http://new" || len(res.Serve.Ranks) != 2 {
		t.Errorf("serve %+v, want answering ranks at http://new", res.Serve)
	}
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StopLane old", "a", "b", "c"), stagePhase, verifyNew,
	}, serveNew())...)
	// Within a node, blocks stage in recipe order.
	calls := c.callList()
	idx := func(s string) int {
		for i, x := range calls {
			if x == s {
				return i
			}
		}
		return -1
	}
	for _, n := range []string{"a", "b"} {
		if idx("StageBlock new/weights@"+n) > idx("StageBlock new/rows@"+n) {
			t.Errorf("node %s staged rows before weights", n)
		}
	}
	for _, s := range []struct{ name, node string }{{"probe fleet", ""}, {"stop old", "c"}, {"stage", ""}, {"verify", ""}, {"decode probe", ""}} {
		if got := stepStatus(res.Steps, s.name, s.node); got != contract.StepDone {
			t.Errorf("step %q on %q is %s, want done", s.name, s.node, got)
		}
	}
}

func TestCutoverVerifyMismatchRollsBackBeforeServing(t *testing.T) {
	c := newCutover(t)
	c.verifyBad["new/rows@b"] = []string{"rows/layer7.packed"}
	c.runRollsBack("cutover succeeded over a verify mismatch", "verify", "rows on b: 1 bad, 0 missing (first: rows/layer7.packed)")
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StopLane old", "a", "b", "c"), stagePhase, verifyNew,
		on("StopLane new", "a", "b"),
	}, serveOld())...)
	// The old lane is served from the plan ResolveLane gave, rank by rank.
	if len(c.starts) != 3 {
		t.Fatalf("StartRank inputs %+v, want the old lane's 3 ranks only", c.starts)
	}
	for _, s := range c.starts {
		if s.Lane != "old" || s.RecipeHash != "hash-old" || !reflect.DeepEqual(s.Plan, c.oldPlan.Plan.Nodes[s.Plan.Rank]) {
			t.Errorf("StartRank %+v, want the resolved plan of old", s)
		}
	}
}

func TestCutoverRankExitFailsAtProbeAndRollsBack(t *testing.T) {
	c := newCutover(t)
	c.readyErr["new"] = temporalRankExited()
	c.runRollsBack("cutover succeeded with a dead rank", "probe", "rank 1 on b exited")
	newServe := serveNew()[:4] // up to WaitReady new, which fails once (non-retryable)
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StopLane old", "a", "b", "c"), stagePhase, verifyNew,
	}, newServe, [][]string{on("StopLane new", "a", "b")}, serveOld())...)
}

func TestCutoverNoRollbackStopsNewLaneOnly(t *testing.T) {
	c := newCutover(t)
	c.in.NoRollback = true
	c.readyErr["new"] = temporalRankExited()
	res, err := c.run()
	if err == nil {
		t.Fatal("cutover succeeded with a dead rank")
	}
	if res.FailedStep != "probe" || len(res.RolledBack) != 0 || res.OldLaneAnswers {
		t.Errorf("result %+v, want failed at probe with nothing rolled back", res)
	}
	if got := stepStatus(res.Steps, "rollback", ""); got != contract.StepSkipped {
		t.Errorf("rollback step is %s, want skipped", got)
	}
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StopLane old", "a", "b", "c"), stagePhase, verifyNew,
	}, serveNew()[:4], [][]string{on("StopLane new", "a", "b")})...)
	if n := c.count("StartRank old"); n != 0 {
		t.Errorf("--no-rollback served the old lane (%d StartRank calls)", n)
	}
}

func TestCutoverStageSkip(t *testing.T) {
	c := newCutover(t)
	c.in.Stage = contract.StageSkip
	res, err := c.run()
	if err != nil {
		t.Fatalf("cutover: %v", err)
	}
	if !res.OK || len(res.Stage) != 0 || len(res.Verify) != 4 {
		t.Errorf("result %+v, want OK, no stage results, 4 verified blocks", res)
	}
	if got := stepStatus(res.Steps, "stage", ""); got != contract.StepSkipped {
		t.Errorf("stage step is %s, want skipped", got)
	}
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StopLane old", "a", "b", "c"), verifyNew,
	}, serveNew())...)
}

func TestCutoverStageForce(t *testing.T) {
	c := newCutover(t)
	c.in.Stage = contract.StageForce
	if _, err := c.run(); err != nil {
		t.Fatalf("cutover: %v", err)
	}
	if n := c.count("StageBlock new/weights force@"); n != 2 {
		t.Errorf("%d forced weights stagings, want 2: %v", n, c.callList())
	}
}

func TestCutoverUnresolvedPreviousLaneIsStoppedAndReported(t *testing.T) {
	c := newCutover(t)
	delete(c.resolve, "old")
	c.verifyBad["new/weights@a"] = []string{"hub/model-00001.safetensors"}
	res, err := c.run()
	if err == nil {
		t.Fatal("cutover succeeded over a verify mismatch")
	}
	if res.FailedStep != "verify" || len(res.RolledBack) != 0 || res.OldLaneAnswers {
		t.Errorf("result %+v, want failed at verify, nothing rolled back", res)
	}
	if !strings.Contains(res.RollbackError, "old: no recipe for lane old") {
		t.Errorf("RollbackError %q does not say old could not be resolved", res.RollbackError)
	}
	c.expectPhases(
		probePhase, []string{"ResolveLane old"}, on("StopLane old", "a", "b", "c"), stagePhase, verifyNew,
		on("StopLane new", "a", "b"),
	)
}

func TestCutoverCancelMidServeCleansUp(t *testing.T) {
	c := newCutover(t)
	c.readyDelay = 10 * time.Minute // the new lane is loading...
	c.env.RegisterDelayedCallback(c.env.CancelWorkflow, time.Minute)
	res, err := c.run()
	if err == nil {
		t.Fatal("cancelled cutover succeeded")
	}
	if res.FailedStep != "probe" || !strings.Contains(strings.ToLower(res.Error), "cancel") {
		t.Errorf("FailedStep %q Error %q, want probe cancelled", res.FailedStep, res.Error)
	}
	// The cleanup ran under a disconnected context although the run was
	// cancelled: the new lane is stopped and the old one is back.
	if n := c.count("StopLane new@"); n != 2 {
		t.Errorf("StopLane new ran %d times after cancel, want 2: %v", n, c.callList())
	}
	if !reflect.DeepEqual(res.RolledBack, []string{"old"}) {
		t.Errorf("RolledBack %v, want [old]", res.RolledBack)
	}
	if got := stepStatus(res.Steps, "stop new", "b"); got != contract.StepDone {
		t.Errorf("stop new on b is %s, want done", got)
	}
}

func TestCutoverReprobesOnceBeforeBail(t *testing.T) {
	c := newCutover(t)
	c.notPolling["b"] = true
	res, err := c.run()
	if err == nil {
		t.Fatal("cutover succeeded without node b")
	}
	if res.FailedStep != "probe fleet" || !strings.Contains(res.Error, "attempt 2") || !strings.Contains(res.Error, "node.b") {
		t.Errorf("FailedStep %q Error %q, want probe fleet failing on attempt 2 naming node.b", res.FailedStep, res.Error)
	}
	if n := c.count("NodeStatus@b"); n != 2 {
		t.Errorf("node b probed %d times, want 2 (one re-probe)", n)
	}
	if n := c.count("StopLane"); n != 0 {
		t.Errorf("a failed probe stopped lanes: %v", c.callList())
	}
}

func temporalRankExited() error {
	return newAppErr("rank 1 on b exited with code 137 while loading", fault.RankExited)
}

func TestCutoverLeavesUnrelatedLanesAlone(t *testing.T) {
	c := newCutover(t)
	// "other" runs only on d, a fleet node the new lane does not need.
	c.in.Fleet = append(c.in.Fleet, "d")
	c.lanesOn["d"] = []string{"other"}
	c.resolve["other"] = contract.ResolveLaneResult{Recipe: testRecipe("other", nil, false), Plan: testPlan("other", "hash-other", "d")}
	res, err := c.run()
	if err != nil {
		t.Fatalf("cutover: %v", err)
	}
	if !reflect.DeepEqual(res.Previous, []string{"old"}) {
		t.Errorf("Previous %v, want only [old]: other holds none of a, b", res.Previous)
	}
	if n := c.count("StopLane other"); n != 0 {
		t.Errorf("cutover stopped the unrelated lane other: %v", c.callList())
	}
	if n := c.count("ResolveLane other"); n != 0 {
		t.Errorf("cutover resolved the unrelated lane other: %v", c.callList())
	}
	// old is still stopped wherever it runs, c included.
	if n := c.count("StopLane old@c"); n != 1 {
		t.Errorf("old not stopped on c: %v", c.callList())
	}
}

func TestCutoverStageFailureRollsBack(t *testing.T) {
	c := newCutover(t)
	c.stageErr["new/weights@b"] = newAppErr("node b: /srv/hub: 3 GiB free, block weights needs 100 GiB", fault.NoSpace)
	c.runRollsBack("cutover succeeded although staging failed", "stage", "node b: /srv/hub: 3 GiB free")
	// b stops after weights; a stages both blocks; nothing is verified.
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StopLane old", "a", "b", "c"),
		{"StageBlock new/weights@a", "StageBlock new/rows@a", "StageBlock new/weights@b"},
		on("StopLane new", "a", "b"),
	}, serveOld())...)
}

func TestCutoverStartFailureIsServeStep(t *testing.T) {
	c := newCutover(t)
	c.startErr["new@b"] = newAppErr("node b rank 1: image img-new not found", fault.ImageMissing)
	res, err := c.run()
	if err == nil {
		t.Fatal("cutover succeeded although a rank did not start")
	}
	if res.FailedStep != "serve" || res.Serve == nil || len(res.Serve.Ranks) != 1 {
		t.Errorf("FailedStep %q Serve %+v, want serve with one started rank", res.FailedStep, res.Serve)
	}
	if n := c.count("WaitReady new"); n != 0 {
		t.Errorf("waited for a lane that did not start: %v", c.callList())
	}
	if n := c.count("StopLane new@"); n != 2 || !reflect.DeepEqual(res.RolledBack, []string{"old"}) {
		t.Errorf("new stopped %d times, RolledBack %v; want 2 stops and old back", n, res.RolledBack)
	}
}

func TestCutoverBench(t *testing.T) {
	c := newCutover(t)
	c.in.Bench = true
	var got contract.BenchInput
	c.env.OnActivity("Bench", mock.Anything, mock.Anything).Return(func(ctx context.Context, in contract.BenchInput) (contract.BenchResult, error) {
		c.record(ctx, "Bench "+in.Label)
		got = in
		return contract.BenchResult{ReportID: "r1", Summary: "decode 40 tok/s"}, nil
	})
	res, err := c.run()
	if err != nil {
		t.Fatalf("cutover --bench: %v", err)
	}
	if res.Bench == nil || res.Bench.ReportID != "r1" {
		t.Errorf("Bench %+v, want report r1", res.Bench)
	}
	if got.BaseURL != "http://new" || got.Model != "model-new" || len(got.Staging) != 4 || got.Decode == nil || got.Baseline != "latest" {
		t.Errorf("bench input %+v: want the serving lane's URL, model, 4 staged blocks and the decode probe", got)
	}
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StopLane old", "a", "b", "c"), stagePhase, verifyNew,
	}, serveNew(), [][]string{{"Bench cutover"}})...)
}

func TestCutoverBenchFailureKeepsLane(t *testing.T) {
	c := newCutover(t)
	c.in.Bench = true
	c.env.OnActivity("Bench", mock.Anything, mock.Anything).Return(contract.BenchResult{}, newAppErr("harness exited 2", "Permanent"))
	res, err := c.run()
	if err != nil {
		t.Fatalf("a failed bench must not fail the cutover: %v", err)
	}
	if !res.OK || res.Error != "bench: harness exited 2" || len(res.RolledBack) != 0 || c.count("StopLane new") != 0 {
		t.Errorf("result %+v, want OK, the bench error reported, nothing stopped", res)
	}
}

// A serve failure undoes the steps last first: the new lane is stopped
// (its undo was registered last), then the previous lanes are served again
// in the order they were found and stopped — not reversed.
func TestCutoverServeFailureUndoesLastFirst(t *testing.T) {
	c := newCutover(t)
	c.lanesOn["b"] = []string{"old", "old2"}
	c.resolve["old2"] = contract.ResolveLaneResult{Recipe: testRecipe("old2", nil, false), Plan: testPlan("old2", "hash-old2", "b")}
	c.startErr["new@b"] = newAppErr("node b rank 1: image img-new not found", fault.ImageMissing)
	res, err := c.run()
	if err == nil {
		t.Fatal("cutover succeeded although a rank did not start")
	}
	if res.FailedStep != "serve" || !reflect.DeepEqual(res.Previous, []string{"old", "old2"}) {
		t.Errorf("FailedStep %q Previous %v, want serve and [old old2]", res.FailedStep, res.Previous)
	}
	if !reflect.DeepEqual(res.RolledBack, []string{"old", "old2"}) || !res.OldLaneAnswers || res.RollbackError != "" {
		t.Errorf("RolledBack %v OldLaneAnswers %v RollbackError %q, want both back and answering", res.RolledBack, res.OldLaneAnswers, res.RollbackError)
	}
	c.expectPhases(
		probePhase, []string{"ResolveLane old"}, []string{"ResolveLane old2"},
		on("StopLane old", "a", "b", "c"), on("StopLane old2", "b"), stagePhase, verifyNew,
		on("EnsureImage img-new", "a", "b"), on("BeforeServe new", "a", "b"), on("StartRank new", "a", "b"),
		on("StopLane new", "a", "b"),
		on("EnsureImage img-old", "a", "b", "c"), on("StartRank old", "a", "b", "c"),
		[]string{"WaitReady old"}, []string{"Smoke http://old"}, []string{"DecodeProbe http://old"},
		on("EnsureImage img-old2", "b"), on("StartRank old2", "b"),
		[]string{"WaitReady old2"}, []string{"Smoke http://old2"}, []string{"DecodeProbe http://old2"},
	)
	// The progress shows the undos in the same order.
	var undone []string
	for _, s := range res.Steps {
		if s.Name == "stop new" || strings.HasPrefix(s.Name, "rollback ") {
			undone = append(undone, s.Name+"@"+s.Node)
		}
	}
	if want := []string{"stop new@a", "stop new@b", "rollback old@", "rollback old2@"}; !reflect.DeepEqual(undone, want) {
		t.Errorf("undo steps %v, want %v", undone, want)
	}
}

// Every undo's failure is reported, in the order the undos ran, and the
// later undos still run.
func TestCutoverRollbackErrorsInUndoOrder(t *testing.T) {
	c := newCutover(t)
	c.verifyBad["new/rows@b"] = []string{"rows/layer7.packed"}
	c.readyErr["old"] = newAppErr("rank 0 on a exited with code 1", fault.RankExited)
	c.lanesOn["b"] = []string{"old", "gone"}
	res, err := c.run()
	if err == nil {
		t.Fatal("cutover succeeded over a verify mismatch")
	}
	want := "serving old again: rank 0 on a exited with code 1; gone: no recipe for lane gone"
	if res.FailedStep != "verify" || res.RollbackError != want || len(res.RolledBack) != 0 || res.OldLaneAnswers {
		t.Errorf("FailedStep %q RolledBack %v OldLaneAnswers %v RollbackError %q, want verify, nothing back, %q", res.FailedStep, res.RolledBack, res.OldLaneAnswers, res.RollbackError, want)
	}
	// old, which did not come back, is stopped again on its own nodes.
	if n := c.count("StopLane old@"); n != 6 {
		t.Errorf("StopLane old ran %d times, want 3 (cutover) + 3 (after its failed rollback): %v", n, c.callList())
	}
}
