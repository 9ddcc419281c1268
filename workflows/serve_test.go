package workflows

import (
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

func TestServeStartFailureStopsLaneEverywhere(t *testing.T) {
	f := newFakeFleet(t)
	f.startErr["new@b"] = newAppErr("port 8000 already in use on b", fault.ImageMissing)
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("new", nil, false), Plan: testPlan("new", "h", "a", "b", "c")})
	app := appErr(t, f.env.GetWorkflowError())
	if !strings.Contains(app.Error(), "node b, start: port 8000 already in use") || app.Type() != fault.ImageMissing {
		t.Errorf("error %q type %q, want node b's start failure keeping its type", app.Error(), app.Type())
	}
	f.expectPhases(
		on("EnsureImage img-new", "a", "b", "c"), on("StartRank new", "a", "b", "c"),
		on("StopLane new", "a", "b", "c"),
	)
	if n := f.count("WaitReady"); n != 0 {
		t.Errorf("WaitReady ran %d times after a failed start", n)
	}
}

func TestServeNoWaitReturnsAfterStart(t *testing.T) {
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("new", nil, true), Plan: testPlan("new", "h", "a", "b"), NoWait: true})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("Serve --no-wait: %v", err)
	}
	var res contract.ServeResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if len(res.Ranks) != 2 || res.Ranks[0].Name != "sparklane-new-r0" || res.Ranks[1].Rank != 1 || res.Ready != nil || res.Answers {
		t.Errorf("result %+v, want 2 started ranks, not probed", res)
	}
	f.expectPhases(on("EnsureImage img-new", "a", "b"), on("BeforeServe new", "a", "b"), on("StartRank new", "a", "b"))
	v, err := f.env.QueryWorkflow(contract.ProgressQuery)
	if err != nil {
		t.Fatal(err)
	}
	var p contract.Progress
	if err := v.Get(&p); err != nil {
		t.Fatal(err)
	}
	if got := stepStatus(p.Steps, "probe", ""); got != contract.StepSkipped {
		t.Errorf("probe step %s, want skipped (--no-wait)", got)
	}
}

func TestServeProbesAndAnswers(t *testing.T) {
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("new", nil, false), Plan: testPlan("new", "h", "a")})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	var res contract.ServeResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if !res.Answers || res.BaseURL != "http://new" || res.Smoke == nil || len(res.Smoke.Answers) != 1 || res.Decode == nil || res.Decode.PromptTokens != contract.DefaultDecodePromptTokens || res.Decode.CompletionTokens != contract.DefaultDecodeMaxTokens {
		t.Errorf("result %+v, want an answering lane with smoke and a decode probe of the log's shape (487-token prompt, 400 tokens)", res)
	}
	f.expectPhases(on("EnsureImage img-new", "a"), on("StartRank new", "a"), []string{"WaitReady new"}, []string{"Smoke http://new"}, []string{"DecodeProbe http://new"})
}

func verifyLane() contract.VerifyLane {
	return contract.VerifyLane{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks()}
}

func TestVerifyDriftFailsListingBlocks(t *testing.T) {
	f := newFakeFleet(t)
	f.verifyBad["new/weights@b"] = []string{"hub/model-00002.safetensors"}
	f.env.ExecuteWorkflow(Verify, contract.VerifyInput{Lanes: []contract.VerifyLane{verifyLane()}})
	app := appErr(t, f.env.GetWorkflowError())
	if app.Type() != fault.ContentMismatch || !strings.Contains(app.Message(), "new/weights on b: 1 bad, 0 missing") {
		t.Fatalf("error %q type %q, want ContentMismatch naming new/weights on b", app.Message(), app.Type())
	}
	if strings.Contains(app.Message(), " on a:") || strings.Contains(app.Message(), "rows on b") {
		t.Errorf("message %q lists clean blocks", app.Message())
	}
	var res contract.VerifyWorkflowResult
	if err := app.Details(&res); err != nil {
		t.Fatal(err)
	}
	if !res.Drift || len(res.Blocks) != 4 || len(res.Repaired) != 0 {
		t.Errorf("details %+v, want drift over 4 blocks, nothing repaired", res)
	}
	for _, b := range res.Blocks {
		if b.Lane != "new" {
			t.Errorf("block %+v lacks its lane", b)
		}
	}
	f.expectPhases(cat(on("VerifyBlock new/weights", "a", "b"), on("VerifyBlock new/rows", "a", "b")))
}

// A node whose worker never picks the check up is reported as such, typed
// (NoWorker on its blocks and in the result, error type NoWorker), never as
// drift or a "missing" file.
func TestVerifyNoWorkerIsTypedNotDrift(t *testing.T) {
	f := newFakeFleet(t)
	f.notPolling["b"] = true
	f.env.ExecuteWorkflow(Verify, contract.VerifyInput{Lanes: []contract.VerifyLane{verifyLane()}})
	app := appErr(t, f.env.GetWorkflowError())
	if app.Type() != fault.NoWorker || !strings.Contains(app.Message(), "no worker on node.b") || strings.Contains(app.Message(), "drifted") {
		t.Fatalf("error %q type %q, want NoWorker naming node.b and no drift", app.Message(), app.Type())
	}
	var res contract.VerifyWorkflowResult
	if err := app.Details(&res); err != nil {
		t.Fatal(err)
	}
	if res.Drift || len(res.NoWorker) != 1 || res.NoWorker[0] != "b" || len(res.Blocks) != 4 {
		t.Fatalf("details %+v, want no drift, no_worker [b], 4 blocks", res)
	}
	for _, b := range res.Blocks {
		if b.NoWorker != (b.Node == "b") || len(b.Result.Missing) != 0 {
			t.Errorf("block %+v: want NoWorker only on b and nothing listed missing", b)
		}
	}
	// With drift elsewhere, the drift is the error and node b still says no worker.
	f = newFakeFleet(t)
	f.notPolling["b"] = true
	f.verifyBad["new/weights@a"] = []string{"hub/model-00002.safetensors"}
	f.env.ExecuteWorkflow(Verify, contract.VerifyInput{Lanes: []contract.VerifyLane{verifyLane()}})
	app = appErr(t, f.env.GetWorkflowError())
	if app.Type() != fault.ContentMismatch || !strings.Contains(app.Message(), "new/weights on a: 1 bad") || !strings.Contains(app.Message(), "no worker on node.b") {
		t.Fatalf("error %q type %q, want ContentMismatch naming a's drift and b's missing worker", app.Message(), app.Type())
	}
}

func TestVerifyRepairRestagesOnlyDriftedBlocks(t *testing.T) {
	f := newFakeFleet(t)
	f.verifyBad["new/weights@b"] = []string{"hub/model-00002.safetensors"}
	f.verifyBad["new/rows@a"] = []string{"rows/layer3.packed"}
	f.env.ExecuteWorkflow(Verify, contract.VerifyInput{Lanes: []contract.VerifyLane{verifyLane()}, Repair: true})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("Verify --repair: %v", err)
	}
	var res contract.VerifyWorkflowResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Drift || len(res.Repaired) != 2 {
		t.Errorf("result %+v, want no drift left and 2 repaired blocks", res)
	}
	f.expectPhases(
		cat(on("VerifyBlock new/weights", "a", "b"), on("VerifyBlock new/rows", "a", "b")),
		[]string{"StageBlock new/weights@b", "StageBlock new/rows@a"},
	)
}

func TestVerifyRepairFailureStillFails(t *testing.T) {
	f := newFakeFleet(t)
	f.verifyBad["new/weights@b"] = []string{"hub/model-00002.safetensors"}
	f.stageErr["new/weights@b"] = newAppErr("source /nas/hub/model-00002.safetensors missing", fault.SourceMissing)
	f.env.ExecuteWorkflow(Verify, contract.VerifyInput{Lanes: []contract.VerifyLane{verifyLane()}, Repair: true})
	app := appErr(t, f.env.GetWorkflowError())
	if app.Type() != fault.ContentMismatch || !strings.Contains(app.Message(), "repair weights on b: source /nas/hub/model-00002.safetensors missing") {
		t.Errorf("error %q type %q, want drift plus the failed repair", app.Message(), app.Type())
	}
	if n := f.count("StageBlock"); n != 1 {
		t.Errorf("%d StageBlock calls, want 1 (permanent fault, no retry)", n)
	}
}

func TestVerifyLaneNamesResolvedAtRunTime(t *testing.T) {
	f := newFakeFleet(t)
	f.resolve["new"] = contract.ResolveLaneResult{Recipe: testRecipe("new", testBlocks()[:1], false), Plan: testPlan("new", "h", "a")}
	f.env.ExecuteWorkflow(Verify, contract.VerifyInput{LaneNames: []string{"new"}})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("Verify by lane name: %v", err)
	}
	f.expectPhases([]string{"ResolveLane new"}, []string{"VerifyBlock new/weights@a"})
}

func TestServeStopsOnlyAfterEveryStartEnded(t *testing.T) {
	f := newFakeFleet(t)
	// a fails at once; b is still creating its container when it does.
	f.startErr["new@a"] = newAppErr("image img-new missing on a", fault.ImageMissing)
	f.startDelay["b"] = 300 * time.Millisecond
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("new", nil, false), Plan: testPlan("new", "h", "a", "b")})
	app := appErr(t, f.env.GetWorkflowError())
	if !strings.Contains(app.Error(), "node a, start: image img-new missing on a") {
		t.Errorf("error %q, want node a's start failure", app.Error())
	}
	// A stop racing the still-running start on b would leave b's container
	// running: the stop must come after b's start ended.
	f.expectPhases(on("EnsureImage img-new", "a", "b"), []string{"StartRank new@a"}, []string{"StartRank new@b"}, on("StopLane new", "a", "b"))
}

// A node that does not pick up its check because it is off on purpose
// (relay off, or powered down by sparklane) is "off, not verified": the
// verify passes, naming it; a node that should be up and is not is still
// the NoWorker failure; each node is asked once.
func TestVerifyOffNodeIsNotVerifiedNotAFailure(t *testing.T) {
	f := newFakeFleet(t)
	f.notPolling["b"] = true
	f.offOnPurpose = map[string]string{"b": "relay switch.b_outlet is off"}
	f.env.ExecuteWorkflow(Verify, contract.VerifyInput{Lanes: []contract.VerifyLane{verifyLane()}})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("a night with node b off failed: %v", err)
	}
	var res contract.VerifyWorkflowResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Drift || len(res.NoWorker) != 0 || len(res.Off) != 1 || res.Off[0] != "b" || res.OffWhy[0] != "relay switch.b_outlet is off" {
		t.Fatalf("result %+v, want b off, not verified, and no failure", res)
	}
	for _, b := range res.Blocks {
		if b.Off != (b.Node == "b") || b.NoWorker {
			t.Errorf("block %+v: want Off only on b", b)
		}
	}
	if n := f.count("NodeOff"); n != 1 {
		t.Errorf("NodeOff asked %d times, want once for b", n)
	}

	// Not off on purpose: still the NoWorker failure.
	f = newFakeFleet(t)
	f.notPolling["b"] = true
	f.env.ExecuteWorkflow(Verify, contract.VerifyInput{Lanes: []contract.VerifyLane{verifyLane()}})
	if app := appErr(t, f.env.GetWorkflowError()); app.Type() != fault.NoWorker {
		t.Fatalf("a node that should be up: error type %q, want NoWorker", app.Type())
	}
}

// Post hooks run once the lane answers: post_exec in the head's
// container, post_commands on the control queue, then stop_after_post
// stops the lane. A failing post_exec is HookFailed: Serve stops the lane
// and post_commands never run.
func TestServePostHooks(t *testing.T) {
	plan := testPlan("new", "h", "a", "b")
	plan.PostExec, plan.PostCommands, plan.StopAfterPost = []string{"echo in"}, []string{"echo out"}, true
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("new", nil, false), Plan: plan})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("Serve with post hooks: %v", err)
	}
	var res contract.ServeResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.PostExec == nil || res.PostExec.Node != "a" || res.PostCommands == nil || !res.StoppedAfterPost {
		t.Errorf("result %+v, want post_exec on a, post_commands, stopped after", res)
	}
	f.expectPhases(on("EnsureImage img-new", "a", "b"), on("StartRank new", "a", "b"), []string{"WaitReady new"}, []string{"Smoke http://new"},
		[]string{"DecodeProbe http://new"}, on("PostExec sparklane-new-r0", "a"), []string{"PostCommands new"}, on("StopLane new", "a", "b"))

	f = newFakeFleet(t)
	f.postErr["PostExec"] = newAppErr("post_exec 1 (\"exit 3\"): exited 3", fault.HookFailed)
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("new", nil, false), Plan: plan})
	app := appErr(t, f.env.GetWorkflowError())
	if app.Type() != fault.HookFailed || !strings.Contains(app.Error(), "post_exec") {
		t.Errorf("error %q type %q, want HookFailed naming post_exec", app.Error(), app.Type())
	}
	if f.count("PostCommands") != 0 || f.count("StopLane") != 2 {
		t.Errorf("calls after a failed post_exec: %v", f.callList())
	}
}

// A pinned repo:tag@sha256:D that the stage's image step moved to a node
// is there under its tag only (`docker load` sets no repo digest): serve
// accepts it with the ID the node carrying the digest has, and creates
// every rank from the ID its node resolved; another ID is refused, and
// nothing starts.
func TestServeStartsAPinnedImageMovedToANode(t *testing.T) {
	pin := "reg/eng:1@sha256:" + strings.Repeat("ab", 32)
	pinned := func(lane string) (contract.Recipe, contract.LanePlan) {
		rc, p := testRecipe(lane, nil, false), testPlan(lane, "h", "a", "b")
		rc.Image = pin
		for i := range p.Nodes {
			p.Nodes[i].Image = contract.MustImageRef(pin)
		}
		return rc, p
	}
	f := newFakeFleet(t)
	f.imageUnpinned = map[string]string{"b": "sha256:" + pin}
	rc, p := pinned("new")
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: rc, Plan: p, NoWait: true})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("Serve of a pinned image moved to b: %v", err)
	}
	if len(f.starts) != 2 {
		t.Fatalf("%d ranks started, want 2", len(f.starts))
	}
	for _, s := range f.starts {
		if s.ImageID != "sha256:"+pin {
			t.Errorf("rank %d started with image ID %q, want the resolved %q", s.Plan.Rank, s.ImageID, "sha256:"+pin)
		}
	}

	f = newFakeFleet(t)
	f.imageUnpinned = map[string]string{"b": "sha256:other"}
	rc, p = pinned("new")
	f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: rc, Plan: p, NoWait: true})
	app := appErr(t, f.env.GetWorkflowError())
	if app.Type() != "ImageDigestMismatch" || !strings.Contains(app.Error(), "node b") || !strings.Contains(app.Error(), "sha256:other") {
		t.Errorf("a wrong image under the pinned tag: %q (%s), want ImageDigestMismatch naming node b and what it has", app.Error(), app.Type())
	}
	if n := f.count("StartRank"); n != 0 {
		t.Errorf("StartRank ran %d times with a wrong pinned image", n)
	}
}
