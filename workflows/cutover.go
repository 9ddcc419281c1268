package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
	"github.com/sparklane/sparklane/internal/fault"
)

// Cutover runs stage → verify → serve → probe → bench for a lane on its
// cluster, after stopping whatever lane held those nodes. A failure after
// that stop rolls back: the new lane's containers are removed and the
// previous lane is served and probed again, under a disconnected context so
// a cancelled cutover still cleans up.
//
// Its steps are the methods of cutover, in the order run lists them; the
// rollback is the undos the steps registered as they took effect
// (compensations), run last first.
func Cutover(ctx workflow.Context, in contract.CutoverInput) (contract.CutoverResult, error) {
	c := newCutoverRun(ctx, in)
	// Leases outlive the rollback: released on every exit, after it.
	defer c.releaseNodes()
	if err := c.run(); err != nil {
		if uerr := c.undo.run(ctx); uerr != nil {
			c.res.RollbackError = joinedMessage(uerr)
		}
		c.releaseHeld()
		c.gatewayFailed(err)
		c.keepRolledBack()
		return c.fail(err)
	}
	c.keep()
	c.res.OK = true
	c.res.Steps = c.t.steps()
	return c.res, nil
}

// cutover is one Cutover run: its input, progress and result so far, and
// what a failure must undo. Each step is a method that returns its failure
// named (failedAt); a step that changes the world registers its undo in
// undo as it takes effect.
type cutover struct {
	ctx   workflow.Context
	in    contract.CutoverInput
	t     *tracker
	res   contract.CutoverResult
	nodes []string // the plan's nodes

	// leases are the node leases held, released last first on every exit.
	leases []*nodeLeases
	// prevNodes are the probed nodes each previous lane runs on;
	// prevPlans the previous lanes' resolved recipes and plans (the
	// rollback serves them), unresolved the ones that did not resolve.
	prevNodes  map[string][]string
	prevPlans  map[string]contract.ResolveLaneResult
	unresolved []error
	undo       compensations

	// keeper: this run ends and starts keepers (versionKeeper); ended
	// are the keepers it ended, as they were.
	keeper bool
	ended  []contract.KeeperStatus
	// stopping is set once the previous lanes are being stopped: before
	// that a failure left them serving, and their keepers are started again.
	stopping bool

	// Stage ahead (stageahead.go): ahead, the lane stages while the
	// previous one serves; held, this run holds keepers (KeepHold);
	// stageFrom and stopFrom, when the image step and the stop began.
	ahead               bool
	held                bool
	stageFrom, stopFrom time.Time

	// The gateways' steps (gateway.go): gwHeld, this run holds the
	// cluster's names; serveFrom, when the new lane's serve began;
	// prevServed, each previous lane as the rollback served it again.
	gw         *gatewaySteps
	gwHeld     bool
	serveFrom  time.Time
	prevServed map[string]servedAgain
}

// servedAgain is a previous lane as the rollback served it again, and
// how long it took to answer.
type servedAgain struct {
	sr    contract.ServeResult
	ready time.Duration
}

func newCutoverRun(ctx workflow.Context, in contract.CutoverInput) *cutover {
	t := newTracker(ctx, "Cutover", in.Plan.Lane)
	return &cutover{
		ctx: ctx, in: in, t: t,
		res:        contract.CutoverResult{Lane: in.Plan.Lane, Cluster: in.Plan.Cluster},
		nodes:      planNodes(in.Plan),
		prevNodes:  map[string][]string{},
		prevPlans:  map[string]contract.ResolveLaneResult{},
		gw:         newGatewaySteps(ctx, t, in.Plan.Cluster, in.Gateways, in.Pickup),
		prevServed: map[string]servedAgain{},
	}
}

// run takes the steps in order and returns the first failure. Runs
// recorded before versionStageAhead stop the previous lane first, then
// stage; from it on the next lane is staged and verified while the
// previous one serves (stageahead.go), room permitting.
func (c *cutover) run() error {
	if workflow.GetVersion(c.ctx, versionStageAhead, workflow.DefaultVersion, 1) < 1 {
		return c.steps(
			c.endKeepers,         // a hand run wins: no keeper heals what we take down
			c.leaseNodes,         // the lane's nodes, for this run alone
			c.powerOn,            // --power-on: switch on the nodes that are off
			c.probeFleet,         // with its one re-probe
			c.findPrevious,       // the lanes that hold our nodes, and where they run
			c.leasePreviousNodes, // the fleet nodes outside the plan they run on
			c.resolvePrevious,    // their recipes, for the rollback
			c.stopForeign,        // --stop-foreign
			c.stopPrevious,       // registers the rollback
			c.image,              // the lane's image on every node
			c.stage,
			c.verify,
			c.serve, // and probe
			c.bench,
		)
	}
	return c.runStageAhead()
}

// steps runs each step in turn and returns the first failure.
func (c *cutover) steps(steps ...func() error) error {
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// fail ends the run with err's step as the failed step; the result so far
// travels as the failure's details.
func (c *cutover) fail(err error) (contract.CutoverResult, error) {
	step := &stepError{step: "cutover", err: err}
	errors.As(err, &step)
	c.res.FailedStep, c.res.Error = step.step, errMessage(step.err)
	c.res.Steps = c.t.steps()
	return c.res, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("cutover to %s failed at %s: %s", c.in.Plan.Lane, step.step, c.res.Error), "CutoverFailed", step.err, c.res)
}

// endKeepers ends the keepers of the lane's clusters (the keeper of the
// lane being replaced hands over to this run). Runs recorded before
// versionKeeper did not.
func (c *cutover) endKeepers() error {
	if c.keeper = keeperVersion(c.ctx); !c.keeper || workflow.GetInfo(c.ctx).ParentWorkflowExecution != nil {
		c.keeper = false
		return nil
	}
	ended, err := endKeepers(c.ctx, c.t, c.nodes, "", "handed over to "+contract.CutoverID(c.in.Plan.Cluster)+" (lane "+c.in.Plan.Lane+")")
	c.ended = ended
	return failedAt("end keepers", err)
}

// keep starts the cluster's keeper for the lane now served (not with
// --no-wait: a lane still loading is not down).
func (c *cutover) keep() {
	if !c.keeper {
		return
	}
	if c.in.NoWait {
		c.t.skip("keep", "", "--no-wait: the lane is not known to answer; `starter up` it to keep it")
		return
	}
	startKeeper(c.ctx, c.t, withServed(contract.KeeperInput{
		Cluster: c.in.Plan.Cluster, Recipe: c.in.Recipe, Plan: c.in.Plan, Policy: keepPolicy(c.in.Recipe, c.in.Keep, c.in.Grace),
		Pickup: c.in.Pickup, OutageBudget: c.in.OutageBudget, StartedBy: contract.CutoverID(c.in.Plan.Cluster), Gateways: c.in.Gateways,
	}, c.res.Serve))
}

// keepRolledBack starts again the keepers this run ended whose lanes
// still serve: every one when the run failed before it stopped anything
// (refused a node, a failed probe), else those the rollback served again.
func (c *cutover) keepRolledBack() {
	dctx, cancel := workflow.NewDisconnectedContext(c.ctx)
	defer cancel()
	for _, st := range c.ended {
		if st.Input == nil || (c.stopping && !contains(c.res.RolledBack, st.Lane)) {
			continue
		}
		in := *st.Input
		in.StartedBy = contract.CutoverID(c.in.Plan.Cluster) + " (rollback)"
		startKeeper(dctx, c.t, in)
	}
}

// releaseNodes ends every node lease held, the last taken first.
func (c *cutover) releaseNodes() {
	for i := len(c.leases) - 1; i >= 0; i-- {
		c.leases[i].release()
	}
}

// leaseNodes holds the lane's nodes for this run alone (lease.go): a run
// on an overlapping cluster that holds one of them refuses this one.
func (c *cutover) leaseNodes() error {
	l, err := holdNodes(c.ctx, c.t, contract.NodeLeaseHolder{Kind: contract.LeaseCutover, Lane: c.in.Plan.Lane, Cluster: c.in.Plan.Cluster}, c.nodes)
	if err != nil {
		return failedAt("hold nodes", err)
	}
	c.leases = append(c.leases, l)
	return nil
}

// powerOn switches on the lane's nodes that are off (--power-on). Runs
// started before the step existed never asked for it; the gate records
// that this run's code knows it.
func (c *cutover) powerOn() error {
	if !c.in.PowerOn || workflow.GetVersion(c.ctx, versionPowerOn, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	i := c.t.start("power on", "")
	var pre contract.FleetProbeResult
	err := workflow.ExecuteChildWorkflow(c.childOpts("/power-probe", nil), FleetProbe,
		contract.FleetProbeInput{Nodes: c.nodes, PickupTimeout: c.in.Pickup}).Get(c.ctx, &pre)
	var off []string
	for _, st := range pre.Nodes {
		if st.State == contract.NodeOff {
			off = append(off, st.Node)
		}
	}
	if err == nil && len(off) > 0 {
		err = workflow.ExecuteChildWorkflow(c.childOpts("/power-on", nil), Power,
			contract.PowerInput{Action: contract.PowerOn, Targets: off}).Get(c.ctx, nil)
	}
	c.t.end(i, fmt.Sprintf("%d node(s) switched on", len(off)), err)
	return failedAt("power on", err)
}

// childOpts runs a child workflow CutoverID(cluster)+suffix on the control
// queue. Child runs carry the lane too, so the UI's lane filter finds them.
func (c *cutover) childOpts(suffix string, retry *temporal.RetryPolicy) workflow.Context {
	return workflow.WithChildOptions(c.ctx, workflow.ChildWorkflowOptions{
		WorkflowID: contract.CutoverID(c.in.Plan.Cluster) + suffix, TaskQueue: contract.ControlQueue, RetryPolicy: retry,
		TypedSearchAttributes: searchattr.For(c.in.Plan.Lane, c.in.Plan.Cluster),
	})
}

// probeFleet probes the lane's nodes and the rest of the fleet (a
// previous lane is stopped wherever it runs); its retry policy is the
// re-probe before bail.
func (c *cutover) probeFleet() error {
	i := c.t.start("probe fleet", "")
	probeNodes := append([]string(nil), c.nodes...)
	for _, n := range c.in.Fleet {
		if !contains(probeNodes, n) {
			probeNodes = append(probeNodes, n)
		}
	}
	var probe contract.FleetProbeResult
	err := workflow.ExecuteChildWorkflow(c.childOpts("/probe", ProbeRetryPolicy(c.in.Grace.D())), FleetProbe, contract.FleetProbeInput{
		Nodes: probeNodes, Require: c.nodes, Lane: c.in.Plan.Lane, Grace: c.in.Grace, PickupTimeout: c.in.Pickup,
		Ports: lanePorts(c.in.Plan), StopForeign: c.in.StopForeign,
	}).Get(c.ctx, &probe)
	c.t.end(i, "", err)
	if err != nil {
		return failedAt("probe fleet", err)
	}
	c.res.Probe = &probe
	return nil
}

// findPrevious lists the lanes that hold our nodes (res.Previous) and
// every probed node each runs on. A lane that runs only on other fleet
// nodes is left alone.
func (c *cutover) findPrevious() error {
	ownOnly := workflow.GetVersion(c.ctx, versionPreviousOwnNodes, workflow.DefaultVersion, 1) >= 1
	for _, st := range c.res.Probe.Nodes {
		if ownOnly && !contains(c.nodes, st.Node) {
			continue
		}
		for _, l := range st.Lanes {
			if l != c.in.Plan.Lane && !contains(c.res.Previous, l) {
				c.res.Previous = append(c.res.Previous, l)
			}
		}
	}
	for _, st := range c.res.Probe.Nodes {
		for _, l := range st.Lanes {
			if contains(c.res.Previous, l) {
				c.prevNodes[l] = append(c.prevNodes[l], st.Node)
			}
		}
	}
	return nil
}

// leasePreviousNodes holds the fleet nodes outside the plan that a
// previous lane runs on (it is stopped there too) before anything is
// stopped. A run that took no lease of its own (a child run, or one
// recorded before leases) takes none here either.
func (c *cutover) leasePreviousNodes() error {
	var extra []string
	for _, l := range c.res.Previous {
		for _, n := range c.prevNodes[l] {
			if !contains(c.nodes, n) && !contains(extra, n) {
				extra = append(extra, n)
			}
		}
	}
	if c.leases[0] == nil || len(extra) == 0 {
		return nil
	}
	more, err := holdNodes(c.ctx, c.t, contract.NodeLeaseHolder{Kind: contract.LeaseCutover, Lane: c.in.Plan.Lane, Cluster: c.in.Plan.Cluster}, extra)
	if err != nil {
		return failedAt("hold nodes", err)
	}
	c.leases = append(c.leases, more)
	return nil
}

// resolvePrevious resolves each previous lane's recipe and plan, which
// the rollback serves. A lane that does not resolve is still stopped; the
// rollback reports it.
func (c *cutover) resolvePrevious() error {
	for _, l := range c.res.Previous {
		i := c.t.start("resolve previous "+l, "")
		var r contract.ResolveLaneResult
		err := workflow.ExecuteActivity(controlOpts(c.ctx, time.Minute, 0, 3), ca.ResolveLane,
			contract.ResolveLaneInput{Lane: l, Cluster: c.in.Plan.Cluster}).Get(c.ctx, &r)
		c.t.end(i, "", err)
		if err != nil {
			c.unresolved = append(c.unresolved, failedAt(l, err))
			continue
		}
		c.prevPlans[l] = r
	}
	return nil
}

// stopForeign stops foreign engines on the lane's nodes, only when asked
// (the probe refused the nodes otherwise). They are not brought back on
// failure.
func (c *cutover) stopForeign() error {
	for _, st := range c.res.Probe.Nodes {
		if !c.in.StopForeign || len(st.ForeignNames) == 0 || !contains(c.nodes, st.Node) {
			continue
		}
		if workflow.GetVersion(c.ctx, versionStopForeign, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			break
		}
		i := c.t.start("stop foreign", st.Node)
		var sf contract.StopForeignResult
		err := workflow.ExecuteActivity(nodeOpts(c.ctx, st.Node, c.in.Pickup.D(), callBudget{run: 2 * time.Minute, attempts: 2}), na.StopForeign,
			contract.StopForeignInput{Names: st.ForeignNames}).Get(c.ctx, &sf)
		c.t.end(i, strings.Join(sf.Stopped, ", "), err)
		if err != nil {
			return failedAt("stop foreign on "+st.Node, err)
		}
		for _, n := range sf.Stopped {
			c.res.StoppedForeign = append(c.res.StoppedForeign, st.Node+"/"+n)
		}
	}
	return nil
}

// stopPrevious stops the previous lanes (verified), handing their nodes to
// the new lane. From here on a failure rolls back, so the undos are
// registered before the first stop: a stop that fails partway rolls back
// too (a half-stopped lane is brought back whole). Undone last first, the
// new lane is stopped on its nodes, then the previous lanes are served
// again (or, --no-rollback, left stopped).
func (c *cutover) stopPrevious() error {
	if c.in.NoRollback {
		c.undo.add(c.skipRollback)
	} else {
		c.undo.add(c.servePrevious)
	}
	c.undo.add(c.stopNew)
	c.stopping = true
	if len(c.res.Previous) > 0 {
		c.stopFrom = workflow.Now(c.ctx)
	}
	for _, l := range c.res.Previous {
		if err := stopLane(c.ctx, c.t, c.stopOf(l, c.prevNodes[l])); err != nil {
			if workflow.GetVersion(c.ctx, versionStopRollback, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				// Runs recorded before the change failed without a rollback.
				c.undo = nil
			}
			return failedAt("stop "+l, err)
		}
	}
	return nil
}

// image puts the lane's image on every node first (images.go): pulled
// from the recipe's image_registry or built from its [build] when no node
// has it. Runs recorded before versionStageImage had no image step.
func (c *cutover) image() error {
	c.stageFrom = workflow.Now(c.ctx)
	if workflow.GetVersion(c.ctx, versionStageImage, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	img := &imageStep{ctx: c.ctx, t: c.t, plan: c.in.Plan, pickup: c.in.Pickup.D(), budget: c.in.OutageBudget.D(),
		src: imageSources{build: c.in.Recipe.BuildFor(c.in.Plan, ""), pull: c.in.Recipe.PullFor(c.in.Plan, "")}}
	err := img.run()
	c.res.Images, c.res.Built, c.res.Pulled = img.res, img.built, img.pulled
	return failedAt("image", err)
}

// stage stages every block on every node, in parallel (after fetching
// its repos into the NAS, when asked).
func (c *cutover) stage() error {
	switch {
	case len(c.in.Recipe.Staging) == 0:
		c.t.skip("stage", "", "no [[staging]] blocks")
	case c.in.Stage == contract.StageSkip:
		c.t.skip("stage", "", "--stage=skip")
	default:
		// From versionCutoverFetch on, a cutover whose input names a fetch
		// plan downloads its repos into the NAS first; runs recorded
		// before it carried none and never ask.
		if f := c.in.Fetch; f != nil && len(f.Repos) > 0 &&
			workflow.GetVersion(c.ctx, versionCutoverFetch, workflow.DefaultVersion, 1) >= 1 {
			fr, err := fetchChild(c.ctx, c.t, contract.FetchInput{Plan: *f, Pickup: c.in.Pickup, OutageBudget: c.in.OutageBudget}, c.in.Plan.Cluster, contract.FetchID(c.in.Plan.Lane))
			c.res.Fetch = fr
			if err != nil {
				return failedAt("fetch", err)
			}
		}
		i := c.t.start("stage", "")
		st, err := stageChildren(c.ctx, c.t, contract.StageInput{
			Plan: c.in.Plan, Blocks: c.in.Recipe.Staging, Mode: c.in.Stage, Pickup: c.in.Pickup, OutageBudget: c.in.OutageBudget, Room: c.in.Room,
		})
		c.t.end(i, "", err)
		c.res.Stage = st
		return failedAt("stage", err)
	}
	return nil
}

// verifyItem is one block on one node, as the verify step checks it.
type verifyItem struct {
	n    contract.NodePlan
	b    contract.Staging
	name string
}

// verify checks every block on every node (ledger verify-only): a
// mismatch fails before anything is served. A node whose worker is gone is
// waited for within the outage budget (runs recorded before
// versionVerifyOutageWait: the same commands, failing at once).
func (c *cutover) verify() error {
	if len(c.in.Recipe.Staging) == 0 {
		return nil
	}
	i := c.t.start("verify", "")
	var items []verifyItem
	var itemNodes []string
	for _, n := range c.in.Plan.Nodes {
		for _, b := range c.in.Recipe.Staging {
			items = append(items, verifyItem{n, b, b.ID + " on " + n.Node})
			itemNodes = append(itemNodes, n.Node)
		}
	}
	steps := make([]int, len(items))
	for k := range steps {
		steps[k] = i
	}
	wait := workflow.GetVersion(c.ctx, versionVerifyOutageWait, workflow.DefaultVersion, 1) >= 1
	verified := make([]contract.VerifyBlockResult, len(items))
	lane, tp := c.in.Plan.Lane, c.in.Plan.TP
	errs := perNode(c.ctx, nodeFan{t: c.t, wait: wait, budget: c.in.OutageBudget.D(), steps: steps, nodes: itemNodes}, func(ctx workflow.Context, k int) workflow.Future {
		n, b := items[k].n, items[k].b
		vctx := nodeOpts(ctx, n.Node, c.in.Pickup.D(), callBudget{run: verifyRunTimeout, heartbeat: stageHeartbeat, attempts: 3})
		return workflow.ExecuteActivity(summarize(vctx, n.Node, n.Rank, "verify "+lane+"/"+b.ID), na.VerifyBlock, contract.VerifyBlockInput{Lane: lane, Block: b, Rank: n.Rank, TP: tp})
	}, func(ctx workflow.Context, k int, f workflow.Future) error { return f.Get(ctx, &verified[k]) })
	if err := c.verifiedClean(items, verified, errs); err != nil {
		c.t.end(i, "", err)
		return failedAt("verify", err)
	}
	c.t.end(i, fmt.Sprintf("%d blocks", len(c.res.Verify)), nil)
	return nil
}

// verifiedClean records the verify results and returns the
// ContentMismatch naming every block that failed or does not verify.
func (c *cutover) verifiedClean(items []verifyItem, verified []contract.VerifyBlockResult, errs []error) error {
	var bad []string
	var verr error
	for k, err := range errs {
		v := verified[k]
		if err != nil {
			bad = append(bad, items[k].name+": "+errMessage(err))
			if verr == nil {
				verr = err
			}
			continue
		}
		c.res.Verify = append(c.res.Verify, v)
		if !v.Result.Clean() {
			bad = append(bad, fmt.Sprintf("%s: %d bad, %d missing (first: %s)", items[k].name, v.Result.NBad(), v.Result.NMissing(), firstOf(v.Result.Bad, v.Result.Missing)))
		}
	}
	if len(bad) > 0 {
		return temporal.NewNonRetryableApplicationError("staged data does not verify: "+strings.Join(bad, "; "), fault.ContentMismatch, verr)
	}
	return nil
}

// serve starts the lane and probes it. A failure once every rank started
// is the probe's.
func (c *cutover) serve() error {
	c.serveFrom = workflow.Now(c.ctx)
	sr, err := serveLane(c.ctx, c.t, c.serveOf(c.in.Recipe, c.in.Plan, c.in.NoWait))
	c.res.Serve = &sr
	if err != nil {
		step := "serve"
		if sr.Ranks != nil && len(sr.Ranks) == len(c.in.Plan.Nodes) && errType(err) != fault.HookFailed {
			step = "probe"
		}
		return failedAt(step, err)
	}
	return nil
}

// bench benchmarks the serving lane when asked. It never fails the
// cutover: the lane serves, and a failed bench is reported, not rolled
// back.
func (c *cutover) bench() error {
	if !c.in.Bench || c.in.NoWait {
		return nil
	}
	if c.res.Serve != nil && c.res.Serve.StoppedAfterPost {
		c.t.skip("bench", "", "stop_after_post: the lane was stopped after its post hooks")
		return nil
	}
	i := c.t.start("bench", "")
	var br contract.BenchResult
	var staged []contract.StageBlockResult
	for _, s := range c.res.Stage {
		staged = append(staged, s.Blocks...)
	}
	bctx := workflow.WithActivityOptions(c.ctx, workflow.ActivityOptions{
		TaskQueue: contract.ControlQueue, StartToCloseTimeout: 6 * time.Hour, HeartbeatTimeout: 2 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2},
	})
	info := workflow.GetInfo(c.ctx)
	sr := c.res.Serve
	err := workflow.ExecuteActivity(bctx, ca.Bench, contract.BenchInput{
		Recipe: c.in.Recipe, Plan: c.in.Plan, BaseURL: sr.BaseURL, Model: sr.Ready.Model, Label: nonEmpty(c.in.BenchLabel, "cutover"),
		Baseline: "latest", WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		Staging: staged, Decode: sr.Decode, SwitchSeconds: c.res.SwitchSeconds, StageSeconds: c.res.StageSeconds, StageOrder: c.res.StageOrder,
	}).Get(c.ctx, &br)
	c.t.end(i, br.Summary, err)
	if err != nil {
		c.res.Error = "bench: " + errMessage(err)
	} else {
		c.res.Bench = &br
	}
	return nil
}

// stopNew (an undo) removes whatever of the new lane was started on its
// nodes, so the previous lanes get them back.
func (c *cutover) stopNew(ctx workflow.Context) error {
	return failedAt("stopping "+c.in.Plan.Lane, stopLane(ctx, c.t, c.stopOf(c.in.Plan.Lane, c.nodes)))
}

// skipRollback (the undo under --no-rollback) leaves the previous lanes
// stopped, saying so.
func (c *cutover) skipRollback(workflow.Context) error {
	c.t.skip("rollback", "", "--no-rollback")
	return nil
}

// servePrevious (an undo) serves and probes each previous lane again from
// its resolved plan, in the order they were found; one that fails to come
// back is stopped again rather than left half-started. OldLaneAnswers is
// true only when every previous lane came back answering.
func (c *cutover) servePrevious(ctx workflow.Context) error {
	var errs []error
	answers := len(c.res.Previous) > 0
	for _, l := range c.res.Previous {
		r, ok := c.prevPlans[l]
		if !ok {
			answers = false
			continue
		}
		i := c.t.start("rollback "+l, "")
		from := workflow.Now(ctx)
		sr, err := serveLane(ctx, c.t, c.serveOf(r.Recipe, r.Plan, false))
		c.t.end(i, "", err)
		if err == nil {
			c.prevServed[l] = servedAgain{sr: sr, ready: workflow.Now(ctx).Sub(from)}
		}
		if err != nil {
			answers = false
			errs = append(errs, failedAt("serving "+l+" again", err))
			serr := stopLane(ctx, c.t, c.stopOf(l, planNodes(r.Plan)))
			errs = append(errs, failedAt("stopping "+l+" after its failed rollback", serr))
			continue
		}
		c.res.RolledBack = append(c.res.RolledBack, l)
		answers = answers && sr.Answers
	}
	c.res.OldLaneAnswers = answers
	return errors.Join(append(errs, c.unresolved...)...)
}

// serveOf is the serve of a lane (the new one, or a previous one rolled
// back) with this run's pickup and outage budget.
func (c *cutover) serveOf(rc contract.Recipe, plan contract.LanePlan, noWait bool) contract.ServeInput {
	return contract.ServeInput{Recipe: rc, Plan: plan, NoWait: noWait, Pickup: c.in.Pickup, OutageBudget: c.in.OutageBudget}
}

// stopOf is the stop of lane on nodes with this run's pickup and outage
// budget.
func (c *cutover) stopOf(lane string, nodes []string) contract.StopInput {
	return contract.StopInput{Lane: lane, Nodes: nodes, Pickup: c.in.Pickup, OutageBudget: c.in.OutageBudget}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// lanePorts are the ports a lane's engine listens on, which a foreign
// engine must not hold.
func lanePorts(p contract.LanePlan) []int {
	if p.APIPort > 0 {
		return []int{p.APIPort}
	}
	return nil
}
