package workflows

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// aheadCutover is newCutover in the stage-ahead order (the default).
func aheadCutover(t *testing.T) *cutoverFixture {
	c := newCutover(t)
	c.in.StageAhead = ""
	return c
}

// With room on every node, the next lane stages and verifies while the
// previous one serves, and the previous lane stops only after its blocks
// verified: room, stage, verify, then stop, serve.
func TestCutoverStagesAheadWhileThePreviousLaneServes(t *testing.T) {
	c := aheadCutover(t)
	res, err := c.run()
	if err != nil {
		t.Fatalf("cutover: %v", err)
	}
	if !res.OK || res.StageOrder != "ahead" || len(res.Room) != 2 {
		t.Errorf("result OK %v order %q room %+v, want ahead after two nodes' room", res.OK, res.StageOrder, res.Room)
	}
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StageRoom new", "a", "b"), stagePhase, verifyNew, on("StopLane old", "a", "b", "c"),
	}, serveNew())...)
	want := []string{"EndKeepers hold a,b by=default-test-workflow-id", "EndKeepers a,b lane= by=default-test-workflow-id", "StartKeeper c1 new by=cutover/c1"}
	if strings.Join(c.keeperCalls, "|") != strings.Join(want, "|") {
		t.Errorf("keeper calls %v, want %v (held while staging, ended before the stop)", c.keeperCalls, want)
	}
}

// A stage that fails ahead leaves the previous lane serving and untouched:
// nothing stopped, nothing rolled back, its keeper released to heal again.
func TestCutoverStageAheadFailureLeavesThePreviousLaneServing(t *testing.T) {
	c := aheadCutover(t)
	oldIn := keeperInput("old", contract.KeepPolicy{}, "a", "b", "c")
	c.endKeepers = []contract.KeeperStatus{{Cluster: "c1", Lane: "old", Input: &oldIn}}
	c.stageErr["new/weights@b"] = newAppErr("source blob removed on the NAS", fault.SourceMissing)
	res, err := c.run()
	if err == nil || res.FailedStep != "stage" || !strings.Contains(res.Error, "source blob removed") {
		t.Fatalf("cutover: %v, failed at %q (%s); want it failed at stage naming the reason", err, res.FailedStep, res.Error)
	}
	if len(res.RolledBack) != 0 || res.RollbackError != "" || c.count("StopLane") != 0 || c.count("StartRank") != 0 {
		t.Errorf("rolled back %v (%q), %d stops, %d starts; want the previous lane never touched:\n%s", res.RolledBack, res.RollbackError, c.count("StopLane"), c.count("StartRank"), strings.Join(c.callList(), "\n"))
	}
	want := []string{"EndKeepers hold a,b by=default-test-workflow-id", "EndKeepers release a,b by=default-test-workflow-id"}
	if strings.Join(c.keeperCalls, "|") != strings.Join(want, "|") {
		t.Errorf("keeper calls %v, want %v", c.keeperCalls, want)
	}
}

// A node without room beside the running lane that has room once it
// stops (--make-room prunes its blocks then): the cutover stages after
// the stop, saying which node and why in its result, its memo and its
// steps before anything stops; --stage-ahead=always refuses instead, and
// so does a node that lacks room after the stop too, before anything
// stops.
func TestCutoverWithoutRoomStagesAfterTheStop(t *testing.T) {
	c := aheadCutover(t)
	c.roomShort["b"] = "/mnt/nvme needs 183.0 GiB more than it has beside lane old"
	c.roomAfterStop["b"] = true
	res, err := c.run()
	if err != nil {
		t.Fatalf("cutover: %v", err)
	}
	if !strings.HasPrefix(res.StageOrder, "after stop: b: /mnt/nvme needs 183.0 GiB more") {
		t.Errorf("stage order %q, want after stop naming b and the bytes", res.StageOrder)
	}
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StageRoom new", "a", "b"), on("StopLane old", "a", "b", "c"), stagePhase, verifyNew,
	}, serveNew())...)

	a := aheadCutover(t)
	a.in.StageAhead = contract.StageAheadAlways
	a.roomShort["b"] = "/mnt/nvme needs 183.0 GiB more than it has beside lane old"
	res, err = a.run()
	if err == nil || res.FailedStep != "stage order" || !strings.Contains(res.Error, "183.0 GiB") || errType(err) != "CutoverFailed" {
		t.Fatalf("--stage-ahead=always: %v, failed at %q (%s); want it refused at stage order", err, res.FailedStep, res.Error)
	}
	if a.count("StopLane") != 0 || a.count("StageBlock") != 0 || len(res.RolledBack) != 0 {
		t.Errorf("--stage-ahead=always refused after %d stops, %d stages; want nothing stopped or staged", a.count("StopLane"), a.count("StageBlock"))
	}

	n := aheadCutover(t)
	n.roomShort["b"] = "/mnt/nvme needs 183.0 GiB more than it has beside lane old; stopping it frees no disk by itself"
	res, err = n.run()
	if err == nil || res.FailedStep != "stage order" || !strings.Contains(res.Error, "nor after its stop") || n.count("StopLane") != 0 {
		t.Fatalf("no room after the stop either: %v, failed at %q (%s), %d stops; want it refused before anything stops", err, res.FailedStep, res.Error, n.count("StopLane"))
	}
}

// A lane that nothing serves on the nodes stages first without asking for
// room (nothing to stage beside), and says no order.
func TestCutoverWithNothingServingAsksNoRoom(t *testing.T) {
	c := aheadCutover(t)
	for _, n := range []string{"a", "b", "c"} {
		c.lanesOn[n] = nil
	}
	res, err := c.run()
	if err != nil || res.StageOrder != "" || c.count("StageRoom") != 0 || !reflect.DeepEqual(res.Previous, []string(nil)) {
		t.Fatalf("cutover: %v, order %q, %d room asks, previous %v", err, res.StageOrder, c.count("StageRoom"), res.Previous)
	}
}
