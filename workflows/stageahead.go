package workflows

import (
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// Stage ahead (versionStageAhead): a cutover stages and verifies the next
// lane while the previous one keeps serving, so the clients' gap is the
// engine's start, not the stage. Order:
//
//	hold keepers → lease, power on, probe, find / lease / resolve previous
//	→ stage order (every node's room beside the running lane)
//	→ ahead:       image, stage, verify → end keepers, drain, stop foreign,
//	               stop previous → serve, probe → route → bench
//	→ after stop:  end keepers, drain, stop foreign, stop previous → image,
//	               stage, verify → serve, probe → route → bench
//
// drain and route are the gateways' steps (gateway.go), taken only when
// the run names gateways: the cluster's names are held from the drain of
// the previous lane until the new one's probe passed.
//
// The previous lane's keepers are held (KeepHold) for the stage: they go
// on checking and reporting, and heal nothing while this run holds the
// nodes. A failure before the stop leaves the previous lane serving and
// untouched (nothing to roll back; the hold is released); a failure after
// it rolls back as before.
func (c *cutover) runStageAhead() error {
	if err := c.steps(
		c.holdKeepers,        // they watch on; no heal while this run holds the nodes
		c.leaseNodes,         // the lane's nodes, for this run alone
		c.powerOn,            // --power-on: switch on the nodes that are off
		c.probeFleet,         // with its one re-probe
		c.findPrevious,       // the lanes that hold our nodes, and where they run
		c.leasePreviousNodes, // the fleet nodes outside the plan they run on
		c.resolvePrevious,    // their recipes, for the rollback
		c.stageOrder,         // ahead, room permitting, or after the stop
	); err != nil {
		return err
	}
	if c.ahead {
		return c.steps(c.image, c.stage, c.verify, c.staged, c.endKeepers, c.drain, c.stopForeign, c.stopPrevious, c.serve, c.routeNew, c.switched, c.bench)
	}
	return c.steps(c.endKeepers, c.drain, c.stopForeign, c.stopPrevious, c.image, c.stage, c.verify, c.staged, c.serve, c.routeNew, c.switched, c.bench)
}

// holdKeepers holds the keepers of the lane's clusters (KeepHold): the
// previous lane keeps being watched while the next one stages beside it.
func (c *cutover) holdKeepers() error {
	if c.keeper = keeperVersion(c.ctx); !c.keeper || workflow.GetInfo(c.ctx).ParentWorkflowExecution != nil {
		c.keeper = false
		return nil
	}
	i := c.t.start("hold keepers", "")
	var res contract.EndKeepersResult
	err := workflow.ExecuteActivity(controlOpts(c.ctx, keeperControlTimeout, 0, 3), ca.EndKeepers, contract.EndKeepersInput{
		Nodes: c.nodes, By: workflow.GetInfo(c.ctx).WorkflowExecution.ID, Action: contract.KeepHold,
		Reason: "lane " + c.in.Plan.Lane + " stages beside it",
	}).Get(c.ctx, &res)
	var held []string
	for _, st := range res.Ended {
		held = append(held, KeeperID(st.Cluster)+" ("+st.Lane+")")
	}
	c.held = len(res.Ended) > 0
	c.t.end(i, nonEmpty(strings.Join(held, ", "), "none running"), err)
	return failedAt("hold keepers", err)
}

// releaseHeld lets the held keepers heal again when the run failed before
// it ended them (the previous lane still serves).
func (c *cutover) releaseHeld() {
	if !c.held || c.ended != nil {
		return
	}
	dctx, cancel := workflow.NewDisconnectedContext(c.ctx)
	defer cancel()
	i := c.t.start("release keepers", "")
	err := workflow.ExecuteActivity(controlOpts(dctx, keeperControlTimeout, 0, 3), ca.EndKeepers, contract.EndKeepersInput{
		Nodes: c.nodes, By: workflow.GetInfo(c.ctx).WorkflowExecution.ID, Action: contract.KeepRelease,
		Reason: "the cutover to " + c.in.Plan.Lane + " failed before it stopped anything",
	}).Get(dctx, nil)
	c.t.end(i, "", err)
}

// stageOrder decides whether the lane stages ahead (res.StageOrder
// "ahead") or after the stop: it asks every node whether the lane's blocks
// fit beside what runs there (StageRoom), unless nothing serves on the
// nodes, nothing is staged, or --stage-ahead=never. A node without room
// makes it "after stop: WHY" (recorded in the memo and the progress before
// anything stops), or with --stage-ahead=always fails the run before
// anything stops.
func (c *cutover) stageOrder() error {
	mode := nonEmpty(c.in.StageAhead, contract.StageAheadAuto)
	switch {
	case len(c.res.Previous) == 0:
		c.ahead = true
		return nil
	case mode == contract.StageAheadNever:
		return c.stageAfterStop("--stage-ahead=never")
	case len(c.in.Recipe.Staging) == 0 || c.in.Stage == contract.StageSkip:
		c.ahead, c.res.StageOrder = true, "ahead"
		return nil
	}
	i := c.t.start("stage order", "")
	short, err := c.room(i)
	if err != nil {
		c.t.end(i, "", err)
		return failedAt("stage order", err)
	}
	if len(short) == 0 {
		c.ahead, c.res.StageOrder = true, "ahead"
		c.t.end(i, "ahead: every node has room beside lane "+strings.Join(c.res.Previous, ", "), nil)
		return nil
	}
	why := strings.Join(short, "; ")
	refuse := ""
	switch {
	case mode == contract.StageAheadAlways:
		refuse = "--stage-ahead=always: no room to stage beside the serving lane, and nothing was stopped: "
	case !c.roomAfterStop() && workflow.GetVersion(c.ctx, versionStageRoomAfterStop, workflow.DefaultVersion, 1) >= 1:
		refuse = "no room to stage beside the serving lane, nor after its stop, and nothing was stopped: "
	}
	if refuse != "" {
		err := temporal.NewNonRetryableApplicationError(refuse+why, fault.NoSpace, nil)
		c.t.end(i, "", err)
		return failedAt("stage order", err)
	}
	c.t.end(i, "stage after stop: "+why, nil)
	return c.stageAfterStop(why)
}

// roomAfterStop reports whether every node has room once the previous
// lanes stop (StageRoomResult.AfterStop: --make-room may prune their
// blocks then).
func (c *cutover) roomAfterStop() bool {
	for _, r := range c.res.Room {
		if !r.OK && !r.AfterStop {
			return false
		}
	}
	return true
}

// stageAfterStop records that this cutover stages after the stop, and
// why: in the result, the progress and the run's memo (in its history
// before anything stops).
func (c *cutover) stageAfterStop(why string) error {
	c.ahead, c.res.StageOrder = false, "after stop: "+why
	return workflow.UpsertMemo(c.ctx, map[string]any{"stage_order": c.res.StageOrder})
}

// room asks every node of the plan for its room beside what runs there
// and returns each node's shortfall (none: every node has room).
func (c *cutover) room(step int) ([]string, error) {
	nodes := make([]string, len(c.in.Plan.Nodes))
	steps := make([]int, len(nodes))
	for k, n := range c.in.Plan.Nodes {
		nodes[k], steps[k] = n.Node, step
	}
	got := make([]contract.StageRoomResult, len(nodes))
	errs := perNode(c.ctx, nodeFan{t: c.t, wait: true, budget: c.in.OutageBudget.D(), steps: steps, nodes: nodes},
		func(ctx workflow.Context, k int) workflow.Future {
			n := c.in.Plan.Nodes[k]
			ctx = nodeOpts(ctx, n.Node, c.in.Pickup.D(), callBudget{run: verifyRunTimeout, heartbeat: stageHeartbeat, attempts: 3})
			return workflow.ExecuteActivity(summarize(ctx, n.Node, n.Rank, "room for "+c.in.Plan.Lane), na.StageRoom,
				contract.StageRoomInput{Lane: c.in.Plan.Lane, Blocks: c.in.Recipe.Staging, Rank: n.Rank, TP: c.in.Plan.TP, Room: c.in.Room})
		},
		func(ctx workflow.Context, k int, f workflow.Future) error { return f.Get(ctx, &got[k]) })
	var short []string
	for k, err := range errs {
		if err != nil {
			return nil, nodeErr(nodes[k], "room", err)
		}
		c.res.Room = append(c.res.Room, got[k])
		if !got[k].OK {
			short = append(short, got[k].Why)
		}
	}
	return short, nil
}

// staged notes when the image, stage and verify steps ended (StageSeconds).
func (c *cutover) staged() error {
	c.res.StageSeconds = c.since(c.stageFrom)
	return nil
}

// switched notes the clients' gap: the previous lane's stop to the new
// lane's probe passed (SwitchSeconds), when a lane was stopped.
func (c *cutover) switched() error {
	if !c.stopFrom.IsZero() {
		c.res.SwitchSeconds = c.since(c.stopFrom)
	}
	return nil
}

// since is the workflow time from t to now, in seconds.
func (c *cutover) since(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return workflow.Now(c.ctx).Sub(t).Seconds()
}

// keeperControlTimeout bounds an EndKeepers call: a keeper answers once a
// heal under way has let go.
const keeperControlTimeout = 10 * time.Minute
