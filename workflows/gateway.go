package workflows

import (
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
)

// ga names the gateway's activities (registered by `worker gateway`).
var ga *activities.GatewayActivities

// The gateway steps (versionGateway): a run whose input names gateways
// (Gateways: their task queues) tells each what clients of the cluster
// reach, as named steps in its history —
//
//	cutover:  hold → drain previous → (stop, serve, probe) → route → release
//	          failed: release (nothing stopped) | route previous → release
//	          (rolled back) | down (nothing serves)
//	up:       route → release, once the lane answers
//	stop:     drain (not with --no-drain) → stop → unroute
//	keeper:   hold → (restart, probe) → route → release; off by schedule:
//	          off; powered on again: hold; crash loop: down
//	power:    drain → off, before a power-off
//
// A gateway step never fails its run: the lane's switch matters more than
// the table, and a gateway that was away reconciles with the keepers when
// it starts. A gateway that did not pick up a step (its process is down)
// is left out of the run's later steps, saying so.
type gatewaySteps struct {
	ctx     workflow.Context
	t       *tracker
	cluster string
	queues  []string
	pickup  time.Duration
	// v: 0 not asked yet, 1 on, -1 off (a run recorded before
	// versionGateway); gone are the queues that did not pick up a step.
	v    int
	gone []string
}

// newGatewaySteps is a run's gateway steps on queues for cluster.
func newGatewaySteps(ctx workflow.Context, t *tracker, cluster string, queues []string, pickup contract.Duration) *gatewaySteps {
	p := pickup.D()
	if p <= 0 {
		p = contract.DefaultPickup
	}
	return &gatewaySteps{ctx: ctx, t: t, cluster: cluster, queues: queues, pickup: p}
}

// on says whether the run takes gateway steps: it names gateways, and
// its code knows them (recorded once, at the first step).
func (g *gatewaySteps) on() bool {
	if g == nil || len(g.queues) == 0 {
		return false
	}
	if g.v == 0 {
		g.v = -1
		if workflow.GetVersion(g.ctx, versionGateway, workflow.DefaultVersion, 1) >= 1 {
			g.v = 1
		}
	}
	return g.v == 1
}

// withCtx is g for another context (a rollback's disconnected one).
func (g *gatewaySteps) withCtx(ctx workflow.Context) *gatewaySteps {
	if g == nil {
		return nil
	}
	c := *g
	c.ctx = ctx
	return &c
}

// opts are a gateway step's activity options on queue: picked up within
// the pickup, retried three times; run bounds the attempt.
func (g *gatewaySteps) opts(ctx workflow.Context, queue string, run, heartbeat time.Duration) workflow.Context {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: queue, ScheduleToStartTimeout: g.pickup, StartToCloseTimeout: run, HeartbeatTimeout: heartbeat,
		RetryPolicy: backoff(3),
	})
	return summarize(ctx, queue, -1, g.cluster)
}

// each runs one step on every gateway still answering, at once, and
// records each as the step name on its queue; call starts the activity.
func (g *gatewaySteps) each(name, detail string, call func(ctx workflow.Context, queue string) workflow.Future, got func(k int, f workflow.Future) error) {
	if !g.on() {
		return
	}
	var queues []string
	var steps []int
	var futures []workflow.Future
	for _, q := range g.queues {
		if contains(g.gone, q) {
			g.t.skip(name, q, "gateway "+q+" did not pick up an earlier step: it reconciles with the keepers when it starts")
			continue
		}
		queues = append(queues, q)
		steps = append(steps, g.t.start(name, q))
		futures = append(futures, call(g.ctx, q))
	}
	for k, f := range futures {
		err := got(k, f)
		if isPickupTimeout(err) {
			g.gone = append(g.gone, queues[k])
		}
		g.t.end(steps[k], detail, err)
	}
}

// simple runs a step whose result is a GatewayStepResult.
func (g *gatewaySteps) simple(name, detail string, activity any, in any) {
	g.each(name, detail, func(ctx workflow.Context, q string) workflow.Future {
		return workflow.ExecuteActivity(g.opts(ctx, q, time.Minute, 0), activity, in)
	}, func(_ int, f workflow.Future) error {
		var r contract.GatewayStepResult
		return f.Get(g.ctx, &r)
	})
}

// hold holds new requests for the cluster's names; lane is the lane
// expected next (its last ready time is the ETA).
func (g *gatewaySteps) hold(lane, why string) {
	g.simple("gateway hold", why, ga.GatewayHold, contract.GatewayHoldInput{Cluster: g.cluster, Lane: lane, Why: why})
}

// route points the cluster's names at a lane.
func (g *gatewaySteps) route(r contract.GatewayRoute) {
	r.Cluster = g.cluster
	g.simple("gateway route", "lane "+r.Lane+" at "+r.BaseURL+" as "+strings.Join(r.Names, ", "), ga.GatewayRoute, contract.GatewayRouteInput{Route: r})
}

// release sends the cluster's held requests, and every new one, to its
// route.
func (g *gatewaySteps) release() {
	g.simple("gateway release", "", ga.GatewayRelease, contract.GatewayReleaseInput{Cluster: g.cluster})
}

// routeAndRelease is route then release: a lane that answers.
func (g *gatewaySteps) routeAndRelease(r contract.GatewayRoute) {
	g.route(r)
	g.release()
}

// off marks the cluster's routes off by schedule, or (down) down.
func (g *gatewaySteps) off(in contract.GatewayOffInput) {
	if in.Cluster == "" && in.Lane == "" && len(in.Nodes) == 0 {
		in.Cluster = g.cluster
	}
	name := "gateway off"
	if in.Down {
		name = "gateway down"
	}
	g.simple(name, in.Why, ga.GatewayOff, in)
}

// unroute removes the routes serving lane.
func (g *gatewaySteps) unroute(lane string) {
	g.simple("gateway unroute", "lane "+lane, ga.GatewayUnroute, contract.GatewayUnrouteInput{Lane: lane})
}

// drain drains, on every gateway, the routes of in (a lane, or the routes
// on nodes): new requests are held while those in flight finish. It
// returns each gateway's counts.
func (g *gatewaySteps) drain(in contract.GatewayDrainInput) []contract.GatewayDrainResult {
	in.Cluster = g.cluster
	what := "lane " + in.Lane
	if in.Lane == "" {
		what = "nodes " + strings.Join(in.Nodes, ", ")
	}
	var out []contract.GatewayDrainResult
	g.each("gateway drain", what, func(ctx workflow.Context, q string) workflow.Future {
		// The gateway bounds the drain (drain_timeout, default 120 s); the
		// attempt's own bound only catches a gateway gone mid-drain.
		return workflow.ExecuteActivity(g.opts(ctx, q, 2*time.Hour, time.Minute), ga.GatewayDrain, in)
	}, func(_ int, f workflow.Future) error {
		var r contract.GatewayDrainResult
		err := f.Get(g.ctx, &r)
		if err == nil {
			out = append(out, r)
		}
		return err
	})
	return out
}

// routeOf is the route of a served lane: its head, the name it serves
// and the names clients may use (its recipe's [gateway] aliases); ready
// is how long it took to answer, the next hold's estimate.
func routeOf(rc contract.Recipe, plan contract.LanePlan, sr contract.ServeResult, ready time.Duration) contract.GatewayRoute {
	served := ""
	if sr.Ready != nil {
		served = sr.Ready.Model
	}
	return contract.GatewayRoute{
		Cluster: plan.Cluster, Lane: plan.Lane, BaseURL: sr.BaseURL, Served: served,
		Names: contract.GatewayNames(served, rc.Gateway.Aliases), Nodes: planNodes(plan), ETA: contract.Duration(ready),
	}
}

// drain (a cutover's step, before the previous lanes stop) holds the
// cluster's names for the new lane and drains each previous lane on every
// gateway: it gets nothing new, and its requests in flight finish.
func (c *cutover) drain() error {
	if len(c.res.Previous) == 0 || !c.gw.on() {
		return nil
	}
	c.gw.hold(c.in.Plan.Lane, "switching to lane "+c.in.Plan.Lane)
	c.gwHeld = true
	for _, l := range c.res.Previous {
		c.res.Drained = append(c.res.Drained, c.gw.drain(contract.GatewayDrainInput{Lane: l})...)
	}
	return nil
}

// routeNew (once the new lane's probe passed) points the cluster's names
// at it and releases what was held. A lane started --no-wait is not
// known to answer: its names are marked down, saying so.
func (c *cutover) routeNew() error {
	if !c.gw.on() || c.res.Serve == nil {
		return nil
	}
	c.gwHeld = false
	if c.in.NoWait {
		c.gw.off(contract.GatewayOffInput{Down: true, Why: "cutover --no-wait started lane " + c.in.Plan.Lane + " unprobed: `starter probe` it, then `starter up` to route it"})
		return nil
	}
	c.gw.routeAndRelease(routeOf(c.in.Recipe, c.in.Plan, *c.res.Serve, workflow.Now(c.ctx).Sub(c.serveFrom)))
	return nil
}

// gatewayFailed (a failed cutover, after its rollback) lets go of the
// names it held: the previous lane still serves (released as routed), or
// the rollback served it again (routed back, then released), or nothing
// serves (down, saying why).
func (c *cutover) gatewayFailed(err error) {
	if !c.gwHeld {
		return
	}
	dctx, cancel := workflow.NewDisconnectedContext(c.ctx)
	defer cancel()
	g := c.gw.withCtx(dctx)
	if !c.stopping {
		g.release()
		return
	}
	for _, l := range c.res.RolledBack {
		if p, ok := c.prevServed[l]; ok {
			g.routeAndRelease(routeOf(c.prevPlans[l].Recipe, c.prevPlans[l].Plan, p.sr, p.ready))
			return
		}
	}
	g.off(contract.GatewayOffInput{Down: true, Why: "the cutover to " + c.in.Plan.Lane + " failed (" + errMessage(err) + ") and no previous lane serves again"})
}

// withServed is in with the head and served name sr found (the routes
// its keeper sets again).
func withServed(in contract.KeeperInput, sr *contract.ServeResult) contract.KeeperInput {
	if sr != nil {
		in.BaseURL = sr.BaseURL
		if sr.Ready != nil {
			in.Served = sr.Ready.Model
		}
	}
	return in
}

// route (up, once the lane answers) points the cluster's names at it on
// every gateway; ready is how long it took. A lane started --no-wait is
// not routed: it is not known to answer.
func (s *serveRun) route(ready time.Duration) {
	if s.in.NoWait || workflow.GetInfo(s.ctx).ParentWorkflowExecution != nil {
		return
	}
	g := newGatewaySteps(s.ctx, s.t, s.in.Plan.Cluster, s.in.Gateways, s.in.Pickup)
	g.routeAndRelease(routeOf(s.in.Recipe, s.in.Plan, s.res, ready))
}

// stopGateways are a Stop's gateway steps for the lanes it stops.
type stopGateways struct {
	g     *gatewaySteps
	in    contract.StopInput
	lanes []string
}

// stoppedLanes are the lanes a stop takes down: its lane, or (--all)
// those whose keepers it ended.
func stoppedLanes(in contract.StopInput, ended []contract.KeeperStatus) []string {
	if in.Lane != "" && !in.All {
		return []string{in.Lane}
	}
	var out []string
	for _, st := range ended {
		if st.Lane != "" && !contains(out, st.Lane) {
			out = append(out, st.Lane)
		}
	}
	return out
}

// before drains each lane on every gateway before the stop, or with
// --no-drain removes its routes at once; it returns the drains' counts.
func (s stopGateways) before() []contract.GatewayDrainResult {
	var out []contract.GatewayDrainResult
	for _, l := range s.lanes {
		if s.in.NoDrain {
			s.g.unroute(l)
			continue
		}
		out = append(out, s.g.drain(contract.GatewayDrainInput{Lane: l})...)
	}
	return out
}

// after removes each stopped lane's routes (their names answer 404,
// listing those served), or marks them down when the stop failed.
func (s stopGateways) after(err error) {
	for _, l := range s.lanes {
		switch {
		case err != nil:
			s.g.off(contract.GatewayOffInput{Lane: l, Down: true, Why: "stopping lane " + l + " failed: " + errMessage(err)})
		case !s.in.NoDrain:
			s.g.unroute(l)
		}
	}
}

// gw is the keeper's gateway steps for its cluster.
func (k *keeper) gw() *gatewaySteps {
	if k.gws == nil {
		k.gws = newGatewaySteps(k.ctx, k.t, k.in.Cluster, k.in.Gateways, k.in.Pickup)
	}
	return k.gws
}

// gatewayHold holds the cluster's names through a heal or a power-on
// (once: a hold already set stays).
func (k *keeper) gatewayHold(why string) {
	if k.in.Routed == contract.GatewayHeld || !k.gw().on() {
		return
	}
	k.gw().hold(k.in.Plan.Lane, why)
	k.in.Routed = contract.GatewayHeld
}

// gatewayOff marks the cluster's names off by schedule, or down (a crash
// loop).
func (k *keeper) gatewayOff(down bool, why string) {
	state := contract.GatewayOff
	if down {
		state = contract.GatewayDown
	}
	if k.in.Routed == state || !k.gw().on() {
		return
	}
	k.gw().off(contract.GatewayOffInput{Down: down, Why: why})
	k.in.Routed = state
}

// gatewayServing routes the cluster's names at the lane again and
// releases them, once it answers after a hold, an off or a down (ready:
// how long its restart took, 0 when it came back by itself).
func (k *keeper) gatewayServing(ready time.Duration) {
	if k.in.Routed == "" || !k.gw().on() {
		return
	}
	if k.served != nil {
		k.in.BaseURL = k.served.BaseURL
		if k.served.Ready != nil {
			k.in.Served = k.served.Ready.Model
		}
	}
	r := contract.GatewayRoute{
		Lane: k.in.Plan.Lane, BaseURL: k.in.BaseURL, Served: k.in.Served,
		Names: contract.GatewayNames(k.in.Served, k.in.Recipe.Gateway.Aliases), Nodes: k.nodes, ETA: contract.Duration(ready),
	}
	k.gw().routeAndRelease(r)
	k.in.Routed = ""
}

// gatewaysOff (a power-off, before any target goes down) drains the
// routes on the targets on every gateway and marks them off by schedule:
// their requests in flight finish, new ones get 503 with Retry-After (or
// wake the cluster, with [gateway] wake).
func (p *powerRun) gatewaysOff() {
	if p.in.Action != contract.PowerOff {
		return
	}
	g := newGatewaySteps(p.ctx, p.t, "", p.in.Gateways, 0)
	if !g.on() {
		return
	}
	p.res.Drained = g.drain(contract.GatewayDrainInput{Nodes: p.in.Targets})
	g.off(contract.GatewayOffInput{Nodes: p.in.Targets, Why: "powered off: " + strings.Join(p.in.Targets, ", ")})
}
