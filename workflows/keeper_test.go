package workflows

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

func keeperInput(lane string, pol contract.KeepPolicy, nodes ...string) contract.KeeperInput {
	return contract.KeeperInput{Cluster: "c1", Recipe: testRecipe(lane, nil, false), Plan: testPlan(lane, "h", nodes...), Policy: pol, StartedBy: "cutover/c1"}
}

// control sends the keeper an update at workflow time after and returns
// where its answer lands.
func control(f *fakeFleet, after time.Duration, action string) *contract.KeeperStatus {
	var st contract.KeeperStatus
	f.env.RegisterDelayedCallback(func() {
		f.env.UpdateWorkflow(contract.KeeperControlUpdate, action, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { f.t.Errorf("%s rejected: %v", action, err) },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				if err != nil {
					f.t.Errorf("%s: %v", action, err)
					return
				}
				st = v.(contract.KeeperStatus)
			},
		}, contract.KeeperControl{Action: action, By: "test", Reason: "test says " + action})
	}, after)
	return &st
}

func keeperStatus(t *testing.T, f *fakeFleet) contract.KeeperStatus {
	t.Helper()
	v, err := f.env.QueryWorkflow(contract.KeeperStatusQuery)
	if err != nil {
		t.Fatal(err)
	}
	var st contract.KeeperStatus
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func keeperResult(t *testing.T, f *fakeFleet) contract.KeeperResult {
	t.Helper()
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("keeper: %v", err)
	}
	var res contract.KeeperResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

var healthy2 = []string{"CheckRanks k@a", "CheckRanks k@b", "CheckHead k /v1/models"}

// A rank that is down at one look but up at the re-probe (the retry
// policy, after the grace) is no reason to restart anything.
func TestKeeperReprobeSavesARestart(t *testing.T) {
	f := newFakeFleet(t)
	f.rankDown["b"] = 1
	control(f, 75*time.Second, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{}, "a", "b"))
	res := keeperResult(t, f)
	if res.Restarts != 0 || res.Ended != "test says end" {
		t.Errorf("result %+v, want no restart, ended by the update", res)
	}
	f.expectPhases(healthy2, []string{"CheckRanks k@b"}, []string{"KeeperMark up=true"}, healthy2)
}

// A rank still down at the re-probe: the whole lane is restarted (stop
// every rank, image, start all, wait ready, probe), each step an activity.
func TestKeeperRestartsTheWholeLane(t *testing.T) {
	f := newFakeFleet(t)
	f.rankDown["b"] = 2
	control(f, 45*time.Second, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{}, "a", "b"))
	res := keeperResult(t, f)
	if res.Restarts != 1 || !strings.Contains(res.LastReason, "restarted after: lane k on node b: rank exited") {
		t.Errorf("result %+v, want one restart naming rank b", res)
	}
	f.expectPhases(healthy2, []string{"CheckRanks k@b"}, []string{"KeeperMark up=false"}, []string{"KeeperMark restart"},
		on("StopLane k", "a", "b"), on("EnsureImage img-k", "a", "b"), on("StartRank k", "a", "b"),
		[]string{"WaitReady k"}, []string{"Smoke http://k"}, []string{"DecodeProbe http://k"}, []string{"KeeperMark up=true"})
}

// A lane that keeps failing is restarted as often as the budget allows,
// then stopped as a crash loop; the keeper stays open and says why.
func TestKeeperStopsACrashLoopAfterTheBudget(t *testing.T) {
	f := newFakeFleet(t)
	f.rankDown["a"] = 1000
	f.readyErr["k"] = newAppErr("rank 0 exited with code 1", fault.RankExited)
	var st contract.KeeperStatus
	f.env.RegisterDelayedCallback(func() { st = keeperStatus(t, f) }, 20*time.Minute)
	control(f, 21*time.Minute, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{Interval: contract.Duration(time.Minute), Restarts: 2}, "a"))
	res := keeperResult(t, f)
	if res.Restarts != 2 || f.count("StartRank") != 2 {
		t.Errorf("result %+v, %d starts, want exactly the 2 restarts the budget allows", res, f.count("StartRank"))
	}
	if st.State != contract.KeeperCrashLoop || !strings.Contains(st.LastReason, "stopped: crash loop: 2 restarts within 1h0m0s") || st.Restarts24h != 2 {
		t.Errorf("status %+v, want stopped: crash loop with the reason and 2 restarts", st)
	}
	// The last StopLane is the crash loop's stop, then its notice; no
	// check after them.
	calls := f.callList()
	if last := strings.Join(calls[len(calls)-2:], ", "); last != "StopLane k@a, KeeperNotify "+contract.KeeperCrashLoop {
		t.Errorf("last calls %q, want the crash loop's stop and notice; calls:\n%s", last, strings.Join(calls, "\n"))
	}
}

// A stop while the keeper heals wins: the update returns once the heal
// has let go of the nodes, and the keeper ends without starting again.
func TestKeeperStopWinsDuringAHeal(t *testing.T) {
	f := newFakeFleet(t)
	f.rankDown["a"] = 2
	f.readyDelay = 10 * time.Minute // the first WaitReady hangs
	st := control(f, 2*time.Minute, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{}, "a"))
	res := keeperResult(t, f)
	if res.Ended != "test says end" || st.State != contract.KeeperEnded {
		t.Errorf("result %+v, update answer %+v: want ended by the stop", res, st)
	}
	if f.count("StartRank") != 1 || f.count("Smoke") != 0 {
		t.Errorf("calls %v: want the heal cut off in wait ready", f.callList())
	}
}

// keep off pauses checks; keep on resumes them.
func TestKeeperPausesAndResumes(t *testing.T) {
	f := newFakeFleet(t)
	control(f, 10*time.Second, contract.KeepPause)
	var paused contract.KeeperStatus
	f.env.RegisterDelayedCallback(func() { paused = keeperStatus(t, f) }, time.Hour)
	control(f, 2*time.Hour, contract.KeepResume)
	control(f, 2*time.Hour+45*time.Second, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{}, "a"))
	keeperResult(t, f)
	if paused.State != contract.KeeperPaused {
		t.Errorf("state an hour after keep off: %q, want paused", paused.State)
	}
	if n := f.count("CheckHead"); n != 1 {
		t.Errorf("%d checks, want 1 (after keep on only)", n)
	}
}

// After ChecksPerRun checks the keeper continues as new, carrying its
// restart history.
func TestKeeperContinuesAsNew(t *testing.T) {
	f := newFakeFleet(t)
	f.rankDown["a"] = 2
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{ChecksPerRun: 3}, "a"))
	var can *workflow.ContinueAsNewError
	if err := f.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("keeper ended with %v, want continue-as-new", err)
	}
	var next contract.KeeperInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if len(next.Restarts) != 1 || !next.Restarts[0].OK || next.Checks != 3 || next.Plan.Lane != "k" || next.Health != "up" || next.LastCheck.IsZero() {
		t.Errorf("next run's input %+v, want the lane, 3 checks and the one restart", next)
	}
}

// A cutover holds the keepers of its nodes first (they watch on while it
// stages), ends them before it stops anything, and starts the cluster's
// keeper for the new lane when it succeeds.
func TestCutoverHandsTheClusterToANewKeeper(t *testing.T) {
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Cutover, contract.CutoverInput{Recipe: testRecipe("new", nil, false), Plan: testPlan("new", "h", "a", "b"), Stage: contract.StageAuto,
		Keep: &contract.KeepPolicy{Interval: contract.Duration(time.Minute)}, Grace: contract.Duration(7 * time.Second)})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	want := []string{"EndKeepers hold a,b by=default-test-workflow-id", "EndKeepers a,b lane= by=default-test-workflow-id", "StartKeeper c1 new by=cutover/c1"}
	if strings.Join(f.keeperCalls, "|") != strings.Join(want, "|") {
		t.Errorf("keeper calls %v, want %v", f.keeperCalls, want)
	}
	if p := f.started[0].Policy; p.Interval.D() != time.Minute || p.Grace.D() != 7*time.Second {
		t.Errorf("keeper policy %+v, want the input's interval and the probe grace", p)
	}
}

// A cutover that fails and rolls back starts the previous lane's keeper
// again, as it was.
func TestCutoverRollbackRestartsThePreviousKeeper(t *testing.T) {
	f := newFakeFleet(t)
	f.lanesOn["a"] = []string{"old"}
	f.resolve["old"] = contract.ResolveLaneResult{Recipe: testRecipe("old", nil, false), Plan: testPlan("old", "o", "a")}
	oldIn := keeperInput("old", contract.KeepPolicy{Restarts: 5}, "a")
	f.endKeepers = []contract.KeeperStatus{{Cluster: "c1", Lane: "old", Input: &oldIn}}
	f.readyErr["new"] = newAppErr("rank 0 exited", fault.RankExited)
	f.env.ExecuteWorkflow(Cutover, contract.CutoverInput{Recipe: testRecipe("new", nil, false), Plan: testPlan("new", "h", "a"), Stage: contract.StageAuto})
	appErr(t, f.env.GetWorkflowError())
	want := []string{"EndKeepers hold a by=default-test-workflow-id", "EndKeepers a lane= by=default-test-workflow-id", "StartKeeper c1 old by=cutover/c1 (rollback)"}
	if strings.Join(f.keeperCalls, "|") != strings.Join(want, "|") {
		t.Errorf("keeper calls %v, want %v", f.keeperCalls, want)
	}
	if f.started[0].Policy.Restarts != 5 {
		t.Errorf("restarted keeper's policy %+v, want the old keeper's", f.started[0].Policy)
	}
}

// stop --lane ends that lane's keeper before it takes the nodes.
func TestStopEndsTheLanesKeeperFirst(t *testing.T) {
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Stop, contract.StopInput{Lane: "k", Nodes: []string{"a", "b"}})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	want := []string{"EndKeepers a,b lane=k by=default-test-workflow-id"}
	if strings.Join(f.keeperCalls, "|") != strings.Join(want, "|") {
		t.Errorf("keeper calls %v, want %v", f.keeperCalls, want)
	}
}

// A cutover that fails before it stopped anything (here: a node's SSH is
// down at the fleet probe) leaves the kept lane serving: its keeper was
// only held, and is released to heal again (not ended and restarted).
func TestCutoverFailedBeforeStoppingKeepsAgain(t *testing.T) {
	f := newFakeFleet(t)
	f.sshDown["a"] = "connection refused"
	oldIn := keeperInput("old", contract.KeepPolicy{}, "a")
	f.endKeepers = []contract.KeeperStatus{{Cluster: "c1", Lane: "old", Input: &oldIn}}
	f.env.ExecuteWorkflow(Cutover, contract.CutoverInput{Recipe: testRecipe("new", nil, false), Plan: testPlan("new", "h", "a"), Stage: contract.StageAuto})
	appErr(t, f.env.GetWorkflowError())
	want := []string{"EndKeepers hold a by=default-test-workflow-id", "EndKeepers release a by=default-test-workflow-id"}
	if strings.Join(f.keeperCalls, "|") != strings.Join(want, "|") {
		t.Errorf("keeper calls %v, want %v", f.keeperCalls, want)
	}
}

// up starts the cluster's keeper once the lane answers; --no-wait does not.
func TestUpStartsAKeeperUnlessNoWait(t *testing.T) {
	for _, noWait := range []bool{false, true} {
		f := newFakeFleet(t)
		f.env.ExecuteWorkflow(Serve, contract.ServeInput{Recipe: testRecipe("k", nil, false), Plan: testPlan("k", "h", "a"), NoWait: noWait})
		if err := f.env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		want := "EndKeepers a lane= by=default-test-workflow-id|StartKeeper c1 k by=up/c1"
		if noWait {
			want = "EndKeepers a lane= by=default-test-workflow-id"
		}
		if got := strings.Join(f.keeperCalls, "|"); got != want {
			t.Errorf("no-wait=%v: keeper calls %q, want %q", noWait, got, want)
		}
	}
}

// A check that fails for another reason than a lane found down (here the
// node worker does not know CheckRanks: an older binary mid-upgrade) is
// no reason to restart: health unknown, the reason said.
func TestKeeperDoesNotRestartOnAFailedCheck(t *testing.T) {
	f := newFakeFleet(t)
	f.checkErr = temporal.NewApplicationError("unable to find activityType=CheckRanks", "ActivityNotRegistered")
	var st contract.KeeperStatus
	f.env.RegisterDelayedCallback(func() { st = keeperStatus(t, f) }, 2*time.Minute)
	control(f, 3*time.Minute, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{}, "a"))
	res := keeperResult(t, f)
	if res.Restarts != 0 || f.count("StopLane") != 0 {
		t.Errorf("result %+v, calls %v: want no restart", res, f.callList())
	}
	if st.Health != "unknown" || !strings.Contains(st.LastReason, "node a: could not check the lane: unable to find activityType=CheckRanks") {
		t.Errorf("status %+v, want health unknown and the check's failure", st)
	}
}

// A node whose worker stays gone is waited for within the outage budget;
// past it the keeper stops healing, notifies once and keeps watching (no
// restart, no second notice at the later checks).
func TestKeeperStopsHealingPastTheOutageBudget(t *testing.T) {
	f := newFakeFleet(t)
	f.gone["b"] = 1 << 20
	control(f, 10*time.Minute, contract.KeepEnd)
	in := keeperInput("k", contract.KeepPolicy{}, "a", "b")
	in.OutageBudget = contract.Duration(2 * time.Minute)
	f.env.ExecuteWorkflow(Keeper, in)
	res := keeperResult(t, f)
	if res.Restarts != 0 || !strings.Contains(res.LastReason, "stopped healing: node b was gone for") || !strings.Contains(res.LastReason, "past its outage budget of 2m0s") {
		t.Errorf("result %+v, want no restart and the budget named", res)
	}
	if n := f.count("KeeperNotify " + contract.KeeperNodeLost); n != 1 {
		t.Errorf("%d notices, want 1:\n%s", n, strings.Join(f.callList(), "\n"))
	}
	if f.count("NodeOff b") == 0 || f.count("StopLane") != 0 {
		t.Errorf("want the node asked about, nothing stopped:\n%s", strings.Join(f.callList(), "\n"))
	}
}

// A node powered off on purpose idles the keeper (off by schedule: no
// node check, no restart); once it is on again the lane comes back by
// itself: verify-only on that node (a Verify child), then a restart.
func TestKeeperIdlesOffByScheduleAndComesBack(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Verify)
	f.gone["b"] = 1 << 20
	f.offOnPurpose = map[string]string{"b": "relay switch.b_outlet is off"}
	var offState contract.KeeperStatus
	offChecks := 0
	f.env.RegisterDelayedCallback(func() {
		offState = keeperStatus(t, f)
		offChecks = 1<<20 - f.gone["b"] // calls b's absent worker met
		f.mu.Lock()
		defer f.mu.Unlock()
		f.offOnPurpose, f.gone["b"], f.rankDown["b"] = nil, 0, 2
	}, 5*time.Minute)
	control(f, 10*time.Minute, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{}, "a", "b"))
	res := keeperResult(t, f)
	if offState.State != contract.KeeperOff || offState.Health != "off" || !strings.Contains(offState.LastReason, "relay switch.b_outlet is off") {
		t.Errorf("while off: %+v", offState)
	}
	if res.Restarts != 1 || !strings.Contains(res.LastReason, "node b came back") {
		t.Errorf("result %+v, want one restart after b came back", res)
	}
	calls := strings.Join(f.callList(), "\n")
	// While off (5 min, 10 intervals) only NodeOff is asked: b was
	// checked once, when it went away.
	if offChecks != 1 {
		t.Errorf("%d checks of b until it was on again, want 1:\n%s", offChecks, calls)
	}
	if f.count("StopLane") == 0 || !strings.Contains(calls, "KeeperMark up=false") {
		t.Errorf("want a restart after power on and the lane reported down while off:\n%s", calls)
	}
}

// A check woken by a rank-died signal asks the ranks once: Docker itself
// reported the death, so no probe-grace re-probe delays the heal (one
// failing look, which a timer's check would re-probe away, restarts the
// lane at once).
func TestKeeperSignaledCheckDoesNotReprobe(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterDelayedCallback(func() {
		f.mu.Lock()
		f.rankDown["b"] = 1
		f.mu.Unlock()
		f.env.SignalWorkflow(contract.KeeperRankDiedSignal, contract.KeeperRankDied{Lane: "k", Node: "b", Container: "sparklane-k-r1", Rank: 1, ExitCode: "137"})
	}, 40*time.Second)
	var restartedBy41 int
	f.env.RegisterDelayedCallback(func() { restartedBy41 = f.count("KeeperMark restart") }, 41*time.Second)
	control(f, 100*time.Second, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{}, "a", "b"))
	res := keeperResult(t, f)
	if res.Restarts != 1 || restartedBy41 != 1 {
		t.Errorf("result %+v, %d restart(s) within a second of the signal; want the lane restarted at once, without the grace's re-probe:\n%s", res, restartedBy41, strings.Join(f.callList(), "\n"))
	}
}

// A check woken by a rank-died signal asks the ranks first and, a rank
// being down, never the head (versionKeeperSignalRanksFirst): the head's
// check is a local activity, whose retry after the probe grace runs
// inside the workflow task and held the rank checks scheduled beside it
// (and every status query) back for the grace when the whole group died,
// the head with the rank, as here.
func TestKeeperSignaledCheckAsksTheRanksFirst(t *testing.T) {
	f := newFakeFleet(t)
	var heads int
	f.env.RegisterDelayedCallback(func() {
		f.mu.Lock()
		f.rankDown["b"], f.headDown = 1, 2
		f.mu.Unlock()
		heads = f.count("CheckHead")
		f.env.SignalWorkflow(contract.KeeperRankDiedSignal, contract.KeeperRankDied{Lane: "k", Node: "b", Container: "sparklane-k-r1", Rank: 1, ExitCode: "137"})
	}, 40*time.Second)
	var restartedBy41 int
	f.env.RegisterDelayedCallback(func() {
		restartedBy41 = f.count("KeeperMark restart")
		heads = f.count("CheckHead") - heads
		f.mu.Lock()
		f.headDown = 0 // the restarted group's head answers
		f.mu.Unlock()
	}, 41*time.Second)
	control(f, 100*time.Second, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{}, "a", "b"))
	res := keeperResult(t, f)
	if res.Restarts != 1 || restartedBy41 != 1 || heads != 0 {
		t.Errorf("result %+v, %d restart(s) and %d head check(s) within a second of the signal; want the lane restarted at once, the head not asked:\n%s", res, restartedBy41, heads, strings.Join(f.callList(), "\n"))
	}
}

// A signaled check that finds every rank running (a stale signal: the
// keeper's own restart stopped the ranks) asks the head next, with its
// re-probe: a head that fails one look is no reason to restart.
func TestKeeperSignaledCheckWithRanksUpAsksTheHead(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterDelayedCallback(func() {
		f.mu.Lock()
		f.headDown = 1
		f.mu.Unlock()
		f.env.SignalWorkflow(contract.KeeperRankDiedSignal, contract.KeeperRankDied{Lane: "k", Node: "b", Container: "sparklane-k-r1", Rank: 1, ExitCode: "0"})
	}, 40*time.Second)
	control(f, 50*time.Second, contract.KeepEnd)
	f.env.ExecuteWorkflow(Keeper, keeperInput("k", contract.KeepPolicy{}, "a", "b"))
	res := keeperResult(t, f)
	if res.Restarts != 0 {
		t.Errorf("result %+v, want no restart", res)
	}
	f.expectPhases(healthy2, []string{"KeeperMark up=true"}, []string{"CheckRanks k@a", "CheckRanks k@b"}, []string{"CheckHead k /v1/models"}, []string{"CheckHead k /v1/models"})
}
