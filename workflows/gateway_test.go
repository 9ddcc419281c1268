package workflows

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// mockGateway mocks the gateway's activities (a test double of `worker
// gateway`'s table), recording each call with its selector on the
// gateway's queue.
func (f *fakeFleet) mockGateway() {
	f.gatewayErr = map[string]error{}
	f.env.RegisterActivity(&activities.GatewayActivities{})
	step := func(ctx context.Context, name, label string) (contract.GatewayStepResult, error) {
		f.record(ctx, name+" "+label)
		f.mu.Lock()
		defer f.mu.Unlock()
		return contract.GatewayStepResult{Gateway: "", Changed: 1}, f.gatewayErr[name]
	}
	f.env.OnActivity("GatewayHold", any2...).Return(func(ctx context.Context, in contract.GatewayHoldInput) (contract.GatewayStepResult, error) {
		return step(ctx, "GatewayHold", in.Cluster+" for "+in.Lane)
	})
	f.env.OnActivity("GatewayRoute", any2...).Return(func(ctx context.Context, in contract.GatewayRouteInput) (contract.GatewayStepResult, error) {
		f.mu.Lock()
		f.routes = append(f.routes, in.Route)
		f.mu.Unlock()
		return step(ctx, "GatewayRoute", in.Route.Cluster+" "+in.Route.Lane)
	})
	f.env.OnActivity("GatewayRelease", any2...).Return(func(ctx context.Context, in contract.GatewayReleaseInput) (contract.GatewayStepResult, error) {
		return step(ctx, "GatewayRelease", in.Cluster)
	})
	f.env.OnActivity("GatewayUnroute", any2...).Return(func(ctx context.Context, in contract.GatewayUnrouteInput) (contract.GatewayStepResult, error) {
		return step(ctx, "GatewayUnroute", in.Cluster+"/"+in.Lane)
	})
	f.env.OnActivity("GatewayOff", any2...).Return(func(ctx context.Context, in contract.GatewayOffInput) (contract.GatewayStepResult, error) {
		return step(ctx, "GatewayOff", fmt.Sprintf("%s/%s/%s down=%v", in.Cluster, in.Lane, strings.Join(in.Nodes, ","), in.Down))
	})
	f.env.OnActivity("GatewayDrain", any2...).Return(func(ctx context.Context, in contract.GatewayDrainInput) (contract.GatewayDrainResult, error) {
		_, err := step(ctx, "GatewayDrain", in.Lane+strings.Join(in.Nodes, ","))
		return contract.GatewayDrainResult{Lane: in.Lane, InFlight: 3, Finished: 3, Seconds: 1.5}, err
	})
}

// gw is the label of a gateway call on the one [gateway]'s queue.
func gw(label string) string { return label + "@" + contract.GatewayQueue("") }

// A cutover with a gateway holds the cluster's names and drains the
// previous lane only once the new one is staged and verified, stops it,
// and routes and releases the names only after the new lane's probe
// passed, with its served name and its recipe's [gateway] aliases.
func TestCutoverHoldsDrainsAndRoutesTheGateway(t *testing.T) {
	c := aheadCutover(t)
	c.in.Gateways = []string{contract.GatewayQueue("")}
	c.in.Recipe.Gateway.Aliases = []string{"chat", "new"}
	res, err := c.run()
	if err != nil {
		t.Fatalf("cutover: %v", err)
	}
	c.expectPhases(phases([][]string{
		probePhase, {"ResolveLane old"}, on("StageRoom new", "a", "b"), stagePhase, verifyNew,
		{gw("GatewayHold c1 for new")}, {gw("GatewayDrain old")}, on("StopLane old", "a", "b", "c"),
	}, serveNew(), [][]string{{gw("GatewayRoute c1 new")}, {gw("GatewayRelease c1")}})...)
	if len(res.Drained) != 1 || res.Drained[0].Finished != 3 {
		t.Errorf("drained %+v, want the gateway's counts in the result", res.Drained)
	}
	r := c.routes[0]
	if r.BaseURL != "http://new" || r.Served != "model-new" || !reflect.DeepEqual(r.Names, []string{"model-new", "chat", "new"}) || !reflect.DeepEqual(r.Nodes, []string{"a", "b"}) {
		t.Errorf("route %+v, want the new lane's head, its served name, then its aliases", r)
	}
	if k := c.started[0]; !reflect.DeepEqual(k.Gateways, c.in.Gateways) || k.Served != "model-new" || k.BaseURL != "http://new" {
		t.Errorf("keeper input %+v, want the gateways and the served lane carried to the keeper", k)
	}
}

// A cutover whose new lane fails its probe rolls back and routes the
// held names back at the previous lane once it answers again; a gateway
// step that fails is recorded and the switch goes on; a cutover whose
// rollback fails too marks the names down.
func TestCutoverFailureGivesTheGatewayBackThePreviousLane(t *testing.T) {
	c := newCutover(t)
	c.in.Gateways = []string{contract.GatewayQueue("")}
	c.readyErr["new"] = newAppErr("rank 0 exited with code 1", fault.RankExited)
	c.runRollsBack("a lane that never answers was kept", "probe", "rank 0 exited")
	calls := c.callList()
	tail := strings.Join(calls[len(calls)-2:], " | ")
	if tail != gw("GatewayRoute c1 old")+" | "+gw("GatewayRelease c1") || c.count("GatewayRoute") != 1 || c.routes[0].BaseURL != "http://old" {
		t.Errorf("gateway calls end with %q (routes %+v), want the previous lane routed back, then released", tail, c.routes)
	}
	if i, j := indexOf(calls, gw("GatewayHold c1 for new")), indexOf(calls, "StopLane old@a"); i < 0 || i > j {
		t.Errorf("hold at %d, first stop at %d: want the names held before the previous lane stops", i, j)
	}

	failing := newCutover(t)
	failing.in.Gateways = []string{contract.GatewayQueue("")}
	failing.gatewayErr["GatewayDrain"] = newNonRetryable("gateway: drain lane old: the table file is read-only")
	res, err := failing.run()
	if err != nil || !res.OK {
		t.Fatalf("a failed drain failed the cutover: %v", err)
	}
	if failing.count("GatewayRelease") != 1 || failing.count("StopLane old") != 3 || stepStatus(res.Steps, "gateway drain", "gateway") != contract.StepFailed {
		t.Errorf("%d releases, %d stops, drain step %q: a gateway step's failure is recorded, not fatal",
			failing.count("GatewayRelease"), failing.count("StopLane old"), stepStatus(res.Steps, "gateway drain", "gateway"))
	}

	down := newCutover(t)
	down.in.Gateways = []string{contract.GatewayQueue("")}
	down.readyErr["new"] = newAppErr("rank 0 exited with code 1", fault.RankExited)
	down.readyErr["old"] = newAppErr("rank 2 exited with code 1", fault.RankExited)
	if _, err := down.run(); err == nil {
		t.Fatal("cutover with a failing rollback succeeded")
	}
	if down.count("GatewayOff c1// down=true") != 1 || down.count("GatewayRoute") != 0 {
		t.Errorf("calls %v: want the names marked down, never routed", down.callList())
	}
}

// A stop drains the lane on the gateway before the stop and removes its
// route after it; --no-drain removes the route first and drains nothing.
func TestStopDrainsThenUnroutes(t *testing.T) {
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Stop, contract.StopInput{Lane: "k", Nodes: []string{"a", "b"}, Gateways: []string{"gateway"}})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res contract.StopResult
	if err := f.env.GetWorkflowResult(&res); err != nil || len(res.Drained) != 1 {
		t.Fatalf("stop result %+v (%v), want the drain's counts", res, err)
	}
	f.expectPhases([]string{gw("GatewayDrain k")}, on("StopLane k", "a", "b"), []string{gw("GatewayUnroute /k")})

	n := newFakeFleet(t)
	n.env.ExecuteWorkflow(Stop, contract.StopInput{Lane: "k", Nodes: []string{"a"}, Gateways: []string{"gateway"}, NoDrain: true})
	if err := n.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	n.expectPhases([]string{gw("GatewayUnroute /k")}, on("StopLane k", "a"))
}

// A keeper's heal holds the cluster's names from before the restart until
// the lane answered its probe again, then routes and releases them; a
// crash loop marks them down.
func TestKeeperHoldsTheGatewayThroughAHeal(t *testing.T) {
	f := newFakeFleet(t)
	f.rankDown["b"] = 2
	control(f, 45*time.Second, contract.KeepEnd)
	in := keeperInput("k", contract.KeepPolicy{}, "a", "b")
	in.Gateways, in.Recipe.Gateway.Aliases = []string{"gateway"}, []string{"chat"}
	f.env.ExecuteWorkflow(Keeper, in)
	keeperResult(t, f)
	f.expectPhases(healthy2, []string{"CheckRanks k@b"}, []string{"KeeperMark up=false"}, []string{gw("GatewayHold c1 for k")}, []string{"KeeperMark restart"},
		on("StopLane k", "a", "b"), on("EnsureImage img-k", "a", "b"), on("StartRank k", "a", "b"),
		[]string{"WaitReady k"}, []string{"Smoke http://k"}, []string{"DecodeProbe http://k"}, []string{"KeeperMark up=true"},
		[]string{gw("GatewayRoute c1 k")}, []string{gw("GatewayRelease c1")})
	if r := f.routes[0]; r.BaseURL != "http://k" || !reflect.DeepEqual(r.Names, []string{"model-k", "chat"}) {
		t.Errorf("route %+v, want the healed head with its served name and alias", r)
	}

	loop := newFakeFleet(t)
	loop.rankDown["a"] = 1000
	loop.readyErr["k"] = newAppErr("rank 0 exited with code 1", fault.RankExited)
	control(loop, 21*time.Minute, contract.KeepEnd)
	in = keeperInput("k", contract.KeepPolicy{Interval: contract.Duration(time.Minute), Restarts: 2}, "a")
	in.Gateways = []string{"gateway"}
	loop.env.ExecuteWorkflow(Keeper, in)
	keeperResult(t, loop)
	if loop.count("GatewayHold") != 1 || loop.count("GatewayOff c1// down=true") != 1 || loop.count("GatewayRelease") != 0 {
		t.Errorf("calls %v: want one hold through the restarts, then down", loop.callList())
	}
}

// A power-off drains the routes on its targets and marks them off by
// schedule before any target goes down.
func TestPowerOffDrainsTheGatewayFirst(t *testing.T) {
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Power, contract.PowerInput{Action: contract.PowerOff, Targets: []string{"a"}, Gateways: []string{"gateway"}})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	calls := f.callList()
	if len(calls) < 3 || calls[0] != gw("GatewayDrain a") || calls[1] != gw("GatewayOff //a down=false") {
		t.Errorf("calls %v, want the drain and the off before the power steps", calls)
	}
}

// A run without gateways asks no gateway version and takes no gateway
// step (the histories recorded before the gateway replay unchanged).
func TestNoGatewayNoGatewaySteps(t *testing.T) {
	c := aheadCutover(t)
	if _, err := c.run(); err != nil {
		t.Fatal(err)
	}
	if n := c.count("Gateway"); n != 0 {
		t.Errorf("%d gateway calls without a gateway", n)
	}
}

func newNonRetryable(msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, "GatewayTable", nil)
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
