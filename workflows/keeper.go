package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
)

// Keeper defaults (a recipe's or the config's [keep] table overrides them).
const (
	KeepDefaultInterval     = 30 * time.Second
	KeepDefaultRestarts     = 3
	KeepDefaultWindow       = time.Hour
	KeepDefaultGrace        = 5 * time.Second
	KeepDefaultChecksPerRun = 100
)

// LeaseKeeper is a keeper healing its lane: it holds the lane's node
// leases only while it restarts the lane, never while it watches.
const LeaseKeeper = "keeper"

// KeeperID is the workflow ID of cluster's keeper (keeper/CLUSTER).
func KeeperID(cluster string) string { return contract.KeeperID(cluster) }

// Keeper keeps one lane up on its cluster. Every interval it checks the
// lane cheaply — each rank's container on its node's queue and the head's
// health path from the control worker — and a failed check is asked once
// more after the probe grace (the checks' retry policy). A lane still
// down is restarted whole (a multi-node group cannot take back one rank):
// every rank stopped, hooks and clears run, every rank started, wait
// ready, probe; each step is an activity in the run's history. More
// restarts than the budget allows within its window stop the lane as a
// crash loop: the keeper stays open in that state (status shows why) until
// `starter keep --cluster C on`, a stop or a cutover ends or resumes it.
// It ends on the KeeperControlUpdate "end" (stop, cutover, up), which wins
// over a heal under way, and continues as new after ChecksPerRun checks (default 100: a run's
// history stays under 1 MB).
func Keeper(ctx workflow.Context, in contract.KeeperInput) (contract.KeeperResult, error) {
	k := newKeeper(ctx, in)
	if err := k.handlers(); err != nil {
		return contract.KeeperResult{}, err
	}
	k.nodesV = workflow.GetVersion(ctx, versionKeeperNodes, workflow.DefaultVersion, 1) >= 1
	k.fastV = workflow.GetVersion(ctx, versionKeeperFastDown, workflow.DefaultVersion, 1) >= 1
	if workflow.GetVersion(ctx, versionKeeperRankDied, workflow.DefaultVersion, 1) >= 1 {
		k.listenRankDied()
	}
	k.localHeadV = workflow.GetVersion(ctx, versionKeeperLocalHead, workflow.DefaultVersion, 1) >= 1
	k.signalFastV = workflow.GetVersion(ctx, versionKeeperSignalNoReprobe, workflow.DefaultVersion, 1) >= 1
	k.ranksFirstV = workflow.GetVersion(ctx, versionKeeperSignalRanksFirst, workflow.DefaultVersion, 1) >= 1
	res, err := k.run()
	// An "end" waits in its handler until the heal has let go; let it
	// answer before the run closes.
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return res, err
}

// keeper is one Keeper run.
type keeper struct {
	ctx   workflow.Context
	in    contract.KeeperInput
	pol   contract.KeepPolicy
	t     *tracker
	nodes []string

	health    string
	lastCheck time.Time
	runChecks int
	healing   bool
	ended     bool
	endReason string
	// cancelProbe cancels the heal's wait-ready and probes (control-plane
	// HTTP only), a wait for a node or a verify-only pass when an "end"
	// arrives; container steps finish first.
	cancelProbe workflow.CancelFunc
	// nodesV: this run waits for gone nodes, verifies rebooted ones,
	// idles while a node is off (versionKeeperNodes).
	nodesV bool
	// waiting names the node the keeper waits for ("": none).
	waiting string
	// fastV: a rank found down does not wait for the head check's
	// re-probe (versionKeeperFastDown).
	fastV bool
	// died names a rank container of the lane that its node worker saw
	// die since the last check ("": none): the next check runs at once.
	died string
	// localHeadV: the head check is a local activity on the keeper's own
	// worker (versionKeeperLocalHead).
	localHeadV bool
	// signalFastV: a check a rank-died signal woke does not re-probe the
	// ranks (versionKeeperSignalNoReprobe); checking: a check is under
	// way (status says so).
	signalFastV bool
	checking    bool
	// gws are the keeper's gateway steps (gateway.go; nil until the
	// first); served is the lane as the last restart served it.
	gws    *gatewaySteps
	served *contract.ServeResult
	// ranksFirstV: a signaled check asks the ranks first, the head only
	// when none is down (versionKeeperSignalRanksFirst).
	ranksFirstV bool
}

// listenRankDied files each KeeperRankDiedSignal for the kept lane: a
// node worker saw one of its rank containers die (Docker's event).
func (k *keeper) listenRankDied() {
	ch := workflow.GetSignalChannel(k.ctx, contract.KeeperRankDiedSignal)
	workflow.Go(k.ctx, func(ctx workflow.Context) {
		for {
			var s contract.KeeperRankDied
			ch.Receive(ctx, &s)
			if s.Lane == k.in.Plan.Lane {
				k.died = fmt.Sprintf("rank %d (%s) died on node %s, exit code %s", s.Rank, s.Container, s.Node, s.ExitCode)
			}
		}
	})
}

func newKeeper(ctx workflow.Context, in contract.KeeperInput) *keeper {
	pol := in.Policy
	if pol.Interval <= 0 {
		pol.Interval = contract.Duration(KeepDefaultInterval)
	}
	if pol.Restarts <= 0 {
		pol.Restarts = KeepDefaultRestarts
	}
	if pol.Window <= 0 {
		pol.Window = contract.Duration(KeepDefaultWindow)
	}
	if pol.Grace <= 0 {
		pol.Grace = contract.Duration(KeepDefaultGrace)
	}
	if pol.ChecksPerRun <= 0 {
		pol.ChecksPerRun = KeepDefaultChecksPerRun
	}
	return &keeper{ctx: ctx, in: in, pol: pol, t: newTracker(ctx, "Keeper", in.Plan.Lane), nodes: planNodes(in.Plan),
		health: nonEmpty(in.Health, "unknown"), lastCheck: in.LastCheck}
}

// handlers answers KeeperStatusQuery and KeeperControlUpdate.
func (k *keeper) handlers() error {
	if err := workflow.SetQueryHandler(k.ctx, contract.KeeperStatusQuery, func() (contract.KeeperStatus, error) {
		return k.status(), nil
	}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(k.ctx, contract.KeeperControlUpdate,
		func(ctx workflow.Context, c contract.KeeperControl) (contract.KeeperStatus, error) {
			switch c.Action {
			case contract.KeepEnd:
				k.ended = true
				k.endReason = nonEmpty(c.Reason, "ended by "+nonEmpty(c.By, "an operator"))
				if k.cancelProbe != nil {
					k.cancelProbe()
				}
				// The caller takes the nodes next: the heal lets go first.
				if err := workflow.Await(ctx, func() bool { return !k.healing }); err != nil {
					return k.status(), err
				}
			case contract.KeepHold:
				k.in.Held = nonEmpty(c.By, "a run")
				// The caller takes the nodes next: the heal lets go first.
				if err := workflow.Await(ctx, func() bool { return !k.healing }); err != nil {
					return k.status(), err
				}
			case contract.KeepRelease:
				k.in.Held = ""
			case contract.KeepPause:
				k.in.Paused = true
			case contract.KeepResume:
				k.in.Paused = false
				if k.in.Stopped != "" {
					// A fresh budget: the operator looked at the crash loop.
					k.in.Stopped, k.in.BudgetFrom = "", workflow.Now(ctx)
				}
			}
			return k.status(), nil
		}, workflow.UpdateHandlerOptions{Validator: func(c contract.KeeperControl) error {
			switch c.Action {
			case contract.KeepEnd, contract.KeepPause, contract.KeepResume, contract.KeepHold, contract.KeepRelease:
				return nil
			}
			return fmt.Errorf("keeper %s: unknown action %q: use %s, %s or %s", KeeperID(k.in.Cluster), c.Action, contract.KeepEnd, contract.KeepPause, contract.KeepResume)
		}})
}

// status is what the query and the update answer.
func (k *keeper) status() contract.KeeperStatus {
	st := contract.KeeperStatus{
		Cluster: k.in.Cluster, Lane: k.in.Plan.Lane, PlanHash: k.in.Plan.RecipeHash, State: k.state(),
		Health: k.health, LastCheck: k.lastCheck, Checks: k.in.Checks, LastReason: k.in.LastReason, StartedBy: k.in.StartedBy,
		Checking: k.checking,
		Restarts: append([]contract.KeeperRestart(nil), k.in.Restarts...),
	}
	day := workflow.Now(k.ctx).Add(-24 * time.Hour)
	for _, r := range k.in.Restarts {
		if r.At.After(day) {
			st.Restarts24h++
		}
	}
	in := k.in
	st.Input = &in
	return st
}

func (k *keeper) state() string {
	switch {
	case k.ended && !k.healing:
		return contract.KeeperEnded
	case k.healing:
		return contract.KeeperHealing
	case k.in.Stopped != "":
		return contract.KeeperCrashLoop
	case k.in.Off != "":
		return contract.KeeperOff
	case k.in.Lost != "":
		return contract.KeeperNodeLost
	case k.waiting != "":
		return contract.KeeperWaiting
	case k.in.Paused:
		return contract.KeeperPaused
	case k.in.Held != "":
		return contract.KeeperHeld
	}
	return contract.KeeperWatching
}

// run watches until ended, or continues as new.
func (k *keeper) run() (contract.KeeperResult, error) {
	for !k.ended {
		if k.in.Paused || k.in.Stopped != "" {
			if err := workflow.Await(k.ctx, func() bool { return k.ended || !(k.in.Paused || k.in.Stopped != "") }); err != nil {
				return k.result(), err
			}
			continue
		}
		if k.runChecks >= k.pol.ChecksPerRun {
			return k.result(), workflow.NewContinueAsNewError(k.ctx, Keeper, k.next())
		}
		woken, err := workflow.AwaitWithTimeout(k.ctx, k.pol.Interval.D(), func() bool { return k.ended || k.in.Paused || k.died != "" })
		if err != nil {
			return k.result(), err
		}
		if woken && (k.ended || k.in.Paused) {
			continue
		}
		// A rank that died (its node worker said so) is checked now.
		signaled := k.died != ""
		k.died = ""
		k.runChecks++
		k.in.Checks++
		if k.nodesV && k.in.Off != "" && k.stillOff() {
			k.lastCheck = workflow.Now(k.ctx)
			continue
		}
		k.checking = true
		c := k.check(signaled)
		k.checking = false
		down, gone := c.down, c.gone
		k.lastCheck = workflow.Now(k.ctx)
		if k.nodesV {
			k.react(c)
			continue
		}
		switch {
		case gone != "":
			// A node whose worker is gone cannot be restarted on: wait.
			k.setHealth("unknown")
			k.in.LastReason = gone
		case down == "":
			k.setHealth("up")
		default:
			k.setHealth("down")
			k.in.LastReason = down
			if !k.ended && !k.in.Paused && !k.heldOff(down) {
				k.heal(down)
			}
		}
	}
	return k.result(), nil
}

func (k *keeper) result() contract.KeeperResult {
	return contract.KeeperResult{Lane: k.in.Plan.Lane, Cluster: k.in.Cluster, Ended: k.endReason, Restarts: len(k.in.Restarts), LastReason: k.in.LastReason}
}

// next is the input of the continued run: the restarts of the last day
// (at most 50) and the states carried over.
func (k *keeper) next() contract.KeeperInput {
	n := k.in
	n.LastCheck, n.Health = k.lastCheck, k.health
	day := workflow.Now(k.ctx).Add(-24 * time.Hour)
	n.Restarts = nil
	for _, r := range k.in.Restarts {
		if r.At.After(day) {
			n.Restarts = append(n.Restarts, r)
		}
	}
	if len(n.Restarts) > 50 {
		n.Restarts = n.Restarts[len(n.Restarts)-50:]
	}
	return n
}

// checked is one check's outcome: down says why the lane is down; gone
// names a node whose worker did not pick up its check (nothing can be
// restarted there), or a check that failed itself; goneNodes lists the
// nodes whose worker did not pick up.
type checked struct {
	down, gone string
	goneNodes  []string
}

// check looks at every rank's container (on its node) and the head's
// health path at once; each failed look is asked again after the grace
// (retry policy). Each node's answer carries its boot id (sawBoot). The
// rank checks are all awaited, in node order, then the head check —
// unless a rank is down already (versionKeeperFastDown): the lane is down
// whatever the head answers, and its re-probe is not awaited. A check a
// rank-died signal woke (signaled) does not re-probe the ranks either
// (versionKeeperSignalNoReprobe): Docker itself reported the death, so
// waiting the probe grace to ask again only delays the heal; and it asks
// the ranks first, the head only when no rank is down
// (versionKeeperSignalRanksFirst): see ranksFirst.
func (k *keeper) check(signaled bool) checked {
	retry := &temporal.RetryPolicy{InitialInterval: k.pol.Grace.D(), BackoffCoefficient: 1, MaximumAttempts: 2}
	if !signaled || !k.signalFastV {
		return k.lookAll(retry, retry, "failed after a re-probe")
	}
	once := &temporal.RetryPolicy{MaximumAttempts: 1}
	if k.ranksFirstV {
		return k.ranksFirst(once, retry)
	}
	return k.lookAll(once, retry, "failed after a re-probe")
}

// lookAll starts the rank checks and the head check at once and files
// them (check); detail is the "check" step's when the lane is down.
func (k *keeper) lookAll(rankRetry, headRetry *temporal.RetryPolicy, detail string) checked {
	ranks := k.startRankChecks(rankRetry)
	head := k.startHeadCheck(headRetry)
	var c checkTally
	for _, rc := range ranks {
		k.rankChecked(&c, rc)
	}
	if k.fastV && len(c.downs) > 0 && c.gone == "" {
		// A rank is down (Docker says so, re-probed): the lane is
		// down whatever the head answers; its re-probe is not awaited.
		head.cancel()
	} else {
		k.headChecked(&c, head)
	}
	return k.tally(c, detail)
}

// ranksFirst is a signaled check: every node's ranks asked once, and the
// head (with its re-probe) only when none is down. The head check is a
// local activity, and a local activity's retry runs inside the workflow
// task: started beside the rank checks, a head that does not answer (the
// group died with the rank) held their scheduling, and every status
// query, for the probe grace before the first rank was even asked.
func (k *keeper) ranksFirst(rankRetry, headRetry *temporal.RetryPolicy) checked {
	var c checkTally
	for _, rc := range k.startRankChecks(rankRetry) {
		k.rankChecked(&c, rc)
	}
	if len(c.downs) == 0 && c.gone == "" {
		k.headChecked(&c, k.startHeadCheck(headRetry))
	}
	return k.tally(c, "failed: Docker reported the rank's death")
}

// tally is a check's outcome: a gone node first, else the first look
// that found the lane down (recorded as a failed "check" step).
func (k *keeper) tally(c checkTally, detail string) checked {
	if c.gone != "" {
		return c.checked
	}
	if len(c.downs) > 0 {
		i := k.t.start("check", "")
		k.t.end(i, detail, errors.New(strings.Join(c.downs, ", ")))
		c.down = c.downs[0]
	}
	return c.checked
}

// rankCheck is one node's CheckRanks, under way.
type rankCheck struct {
	node string
	f    workflow.Future
}

// headCheck is the head's health check, under way; cancel abandons it
// (its re-probe).
type headCheck struct {
	f      workflow.Future
	cancel workflow.CancelFunc
}

// checkTally is a check's looks filed as they come back: the outcome so
// far, and why the lane is down as each look that found it down said.
type checkTally struct {
	checked
	downs []string
}

// failed files a failed look (where: "node N" or "the head check"): a
// rank or the lane found down, or the check itself failed (a Docker
// socket that does not answer, a node worker too old to know CheckRanks):
// that is not a lane found down, and restarting on it could turn a
// rolling upgrade into a crash loop.
func (c *checkTally) failed(where string, err error) {
	switch {
	case errType(err) == contract.RankDown || errType(err) == contract.LaneDown:
		c.downs = append(c.downs, errMessage(err))
	case c.gone == "":
		c.gone = fmt.Sprintf("%s: could not check the lane: %s", where, errMessage(err))
	}
}

// startRankChecks starts CheckRanks on every node of the lane (its
// ranks there, in plan order) at once.
func (k *keeper) startRankChecks(retry *temporal.RetryPolicy) []rankCheck {
	lane := k.in.Plan.Lane
	var out []rankCheck
	for _, n := range k.nodes {
		if slices.ContainsFunc(out, func(c rankCheck) bool { return c.node == n }) {
			continue
		}
		actx := workflow.WithActivityOptions(k.ctx, workflow.ActivityOptions{
			TaskQueue: contract.NodeQueue(n), ScheduleToStartTimeout: k.pickup(), StartToCloseTimeout: 30 * time.Second, RetryPolicy: retry,
		})
		out = append(out, rankCheck{node: n, f: workflow.ExecuteActivity(summarize(actx, n, -1, "check "+lane), na.CheckRanks, contract.CheckRanksInput{Lane: lane, Ranks: k.ranksOn(n)})})
	}
	return out
}

// startHeadCheck starts the check of the head's health path: a local
// activity on the keeper's own worker (versionKeeperLocalHead: one marker
// event instead of an activity's three and its own workflow task), or a
// control-queue activity.
func (k *keeper) startHeadCheck(retry *temporal.RetryPolicy) headCheck {
	plan := k.in.Plan
	lane := plan.Lane
	// Cancelled only on the fast path: a cancel of a completed activity
	// is no command, but old runs never see one at all.
	hbase, cancel := workflow.WithCancel(k.ctx)
	// Only what names the head's URL: every check is in the history.
	head := contract.LanePlan{Lane: lane, HeadAddr: plan.HeadAddr, APIPort: plan.APIPort, Nodes: []contract.NodePlan{{Node: plan.Nodes[0].Node, Rank: plan.Nodes[0].Rank}}}
	hin := contract.CheckHeadInput{Lane: lane, Head: head, Path: keeperHealthPath(k.in.Recipe), APIKeyEnv: k.in.Recipe.Probe.APIKeyEnv}
	what := plan.Nodes[0].Node + ": check head of " + lane
	if k.localHeadV {
		lctx := workflow.WithLocalActivityOptions(hbase, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second, RetryPolicy: retry, Summary: what})
		return headCheck{f: workflow.ExecuteLocalActivity(lctx, ca.CheckHead, hin), cancel: cancel}
	}
	hctx := workflow.WithActivityOptions(hbase, workflow.ActivityOptions{TaskQueue: contract.ControlQueue, StartToCloseTimeout: 30 * time.Second, RetryPolicy: retry, Summary: what})
	return headCheck{f: workflow.ExecuteActivity(hctx, ca.CheckHead, hin), cancel: cancel}
}

// rankChecked waits for one node's rank check and files it: its boot id
// seen, a node whose worker did not pick it up gone (nothing can be
// restarted there), else failed.
func (k *keeper) rankChecked(c *checkTally, rc rankCheck) {
	var r contract.CheckRanksResult
	err := rc.f.Get(k.ctx, &r)
	k.sawBoot(rc.node, r, err)
	switch {
	case err == nil:
	case isPickupTimeout(err):
		c.goneNodes = append(c.goneNodes, rc.node)
		if c.gone == "" {
			c.gone = fmt.Sprintf("node %s: its worker did not pick up the check within %s; waiting for it (no restart while a node is gone)", rc.node, k.pickup())
		}
	default:
		c.failed("node "+rc.node, err)
	}
}

// headChecked waits for the head check and files it.
func (k *keeper) headChecked(c *checkTally, h headCheck) {
	var r contract.CheckHeadResult
	if err := h.f.Get(k.ctx, &r); err != nil {
		c.failed("the head check", err)
	}
}

// keeperHealthPath is the head's cheap check: the recipe's probe path,
// else /health for SGLang and vLLM, /v1/models for the rest.
func keeperHealthPath(r contract.Recipe) string {
	if r.Probe.Path != "" {
		return r.Probe.Path
	}
	switch r.Runtime {
	case "sglang", "vllm":
		return "/health"
	}
	return "/v1/models"
}

// setHealth records the lane's health; a change reaches the metrics
// (sparklane_lane_up) through KeeperMark.
func (k *keeper) setHealth(h string) {
	if h == k.health || h == "unknown" {
		k.health = h
		return
	}
	k.health = h
	up := h == "up"
	k.mark(contract.KeeperMarkInput{Up: &up})
}

func (k *keeper) mark(in contract.KeeperMarkInput) {
	in.Cluster, in.Lane = k.in.Cluster, k.in.Plan.Lane
	_ = workflow.ExecuteActivity(controlOpts(k.ctx, 30*time.Second, 0, 3), ca.KeeperMark, in).Get(k.ctx, nil)
}

// restartsInWindow counts the restarts the budget's window holds.
func (k *keeper) restartsInWindow() int {
	from := workflow.Now(k.ctx).Add(-k.pol.Window.D())
	if k.in.BudgetFrom.After(from) {
		from = k.in.BudgetFrom
	}
	n := 0
	for _, r := range k.in.Restarts {
		if !r.At.Before(from) {
			n++
		}
	}
	return n
}

// heal restarts the lane whole, holding its nodes' leases meanwhile, or,
// past the restart budget, stops it as a crash loop.
func (k *keeper) heal(reason string) {
	// Healing from before the leases are asked for: an "end" arriving
	// meanwhile waits until they are let go again.
	k.healing = true
	leases, err := holdNodes(k.ctx, k.t, contract.NodeLeaseHolder{Kind: LeaseKeeper, Lane: k.in.Plan.Lane, Cluster: k.in.Cluster}, k.nodes)
	if err != nil {
		k.healing = false
		// Another run holds a node (a stage, a prune, a hand run): it
		// goes first; the next check looks again.
		k.in.LastReason = "restart deferred: " + errMessage(err)
		return
	}
	defer func() {
		leases.release()
		k.healing = false
	}()
	if k.ended {
		return
	}
	if n := k.restartsInWindow(); n >= k.pol.Restarts {
		k.stopCrashLoop(n, reason)
		return
	}
	k.gatewayHold("healing: " + reason)
	k.in.Restarts = append(k.in.Restarts, k.restart(reason))
}

// stopInput is the stop of the kept lane on its nodes.
func (k *keeper) stopInput() contract.StopInput {
	return contract.StopInput{Lane: k.in.Plan.Lane, Nodes: k.nodes, Pickup: k.in.Pickup, OutageBudget: k.in.OutageBudget}
}

// stopCrashLoop stops the lane after n restarts within the budget's
// window, still failing (reason): the keeper stays open in that state
// until an operator looks.
func (k *keeper) stopCrashLoop(n int, reason string) {
	i := k.t.start("crash loop: stop lane", "")
	err := stopLane(k.ctx, k.t, k.stopInput())
	k.t.end(i, "", err)
	k.in.Stopped = fmt.Sprintf("%d restarts within %s, still failing: %s", n, k.pol.Window.D(), reason)
	k.in.LastReason = "stopped: crash loop: " + k.in.Stopped
	if err != nil {
		k.in.LastReason += "; stopping it failed: " + errMessage(err)
	}
	k.health = "down"
	k.gatewayOff(true, k.in.LastReason)
	if k.nodesV {
		k.notify(contract.KeeperCrashLoop, k.in.LastReason)
	}
}

// restart restarts the lane whole (the "restart lane" step) and returns
// the restart as it is recorded: interrupted by an "end", failed, or OK
// (the lane is up).
func (k *keeper) restart(reason string) contract.KeeperRestart {
	r := contract.KeeperRestart{At: workflow.Now(k.ctx), Reason: reason}
	k.mark(contract.KeeperMarkInput{Restart: true})
	i := k.t.start("restart lane", "")
	err := k.restartLane()
	switch {
	case k.ended:
		r.Error = "interrupted: " + k.endReason
	case err != nil:
		r.Error = errMessage(err)
		k.in.LastReason = "restart failed: " + r.Error
	default:
		r.OK = true
		k.in.LastReason = "restarted after: " + reason
		k.setHealth("up")
		k.gatewayServing(workflow.Now(k.ctx).Sub(r.At))
	}
	k.t.end(i, r.Reason, err)
	return r
}

// restartLane stops every rank, serves the lane again (hooks and clears,
// every rank started) and probes it; an "end" arriving meanwhile stops it
// after the step under way, and cancels the probe.
func (k *keeper) restartLane() error {
	if err := stopLane(k.ctx, k.t, k.stopInput()); err != nil || k.ended {
		return err
	}
	sr := newLaneServe(k.ctx, k.t, contract.ServeInput{Recipe: k.in.Recipe, Plan: k.in.Plan, NoWait: true, Pickup: k.in.Pickup, OutageBudget: k.in.OutageBudget})
	if err := sr.run(); err != nil {
		return err
	}
	if n := len(k.t.p.Steps); n > 0 && k.t.p.Steps[n-1].Status == contract.StepSkipped {
		// serveLane's "probe skipped (--no-wait)" row: the keeper probes next.
		k.t.p.Steps = k.t.p.Steps[:n-1]
	}
	if k.ended {
		return nil
	}
	pctx, cancel := workflow.WithCancel(k.ctx)
	k.cancelProbe = cancel
	err := sr.probe(pctx)
	k.cancelProbe = nil
	cancel()
	if err == nil {
		k.served = &sr.res
	}
	return err
}

// keeperVersion records (once per run) whether this run's code ends and
// starts keepers (versionKeeper): runs recorded before it did neither.
func keeperVersion(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionKeeper, workflow.DefaultVersion, 1) >= 1
}

// endKeepers ends the keepers of every cluster sharing a node with nodes
// (only lane's keeper, when lane is set) before a hand run touches them:
// the hand run wins over a keeper's heal, and no keeper heals a lane a
// cutover is taking down. It returns the keepers ended, as they were.
func endKeepers(ctx workflow.Context, t *tracker, nodes []string, lane, reason string) ([]contract.KeeperStatus, error) {
	i := t.start("end keepers", "")
	var res contract.EndKeepersResult
	by := workflow.GetInfo(ctx).WorkflowExecution.ID
	err := workflow.ExecuteActivity(controlOpts(ctx, 10*time.Minute, 0, 3), ca.EndKeepers,
		contract.EndKeepersInput{Nodes: nodes, Lane: lane, By: by, Reason: reason}).Get(ctx, &res)
	var ended []string
	for _, st := range res.Ended {
		ended = append(ended, KeeperID(st.Cluster)+" ("+st.Lane+")")
	}
	t.end(i, nonEmpty(strings.Join(ended, ", "), "none running"), err)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError("ending the keepers of nodes "+strings.Join(nodes, ", ")+" failed: "+errMessage(err)+
			"; end them by hand (`starter keep --cluster C off`, or `temporal workflow terminate -w keeper/C`) and retry", "KeeperEnd", err)
	}
	return res.Ended, nil
}

// startKeeper starts keeping a lane that a run just brought up.
func startKeeper(ctx workflow.Context, t *tracker, in contract.KeeperInput) {
	if in.Policy.Off {
		t.skip("keep", "", "[keep] off = true")
		return
	}
	i := t.start("keep", "")
	var r contract.StartKeeperResult
	err := workflow.ExecuteActivity(controlOpts(ctx, time.Minute, 0, 3), ca.StartKeeper, in).Get(ctx, &r)
	t.end(i, r.WorkflowID, err)
}

// keepPolicy is the policy a run hands its keeper: the starter's (config
// and recipe merged), else the recipe's, with the probe grace.
func keepPolicy(rc contract.Recipe, p *contract.KeepPolicy, grace contract.Duration) contract.KeepPolicy {
	var out contract.KeepPolicy
	if p != nil {
		out = *p
	} else {
		out = contract.KeepPolicy{Interval: rc.Keep.Interval, Restarts: rc.Keep.Restarts, Window: rc.Keep.Window, Off: rc.Keep.Off}
	}
	if out.Grace <= 0 {
		out.Grace = grace
	}
	return out
}

// keepAgain starts again, as they were, the keepers a run ended and then
// did not replace (it failed), except the one keeping lane except.
func keepAgain(ctx workflow.Context, t *tracker, ended []contract.KeeperStatus, except string) {
	dctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	for _, st := range ended {
		if st.Input == nil || st.Lane == except {
			continue
		}
		in := *st.Input
		in.StartedBy = workflow.GetInfo(ctx).WorkflowExecution.ID + " (failed; keeping again)"
		startKeeper(dctx, t, in)
	}
}

// heldOff reports whether a hold (KeepHold) keeps the keeper from healing
// the lane found down for reason, and says so in the status.
func (k *keeper) heldOff(reason string) bool {
	if k.in.Held == "" {
		return false
	}
	k.in.LastReason = reason + " (not healed: " + k.in.Held + " holds the lane's nodes)"
	return true
}
