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
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
)

// The keeper and its nodes (versionKeeperNodes): a node whose worker is
// gone is asked about first — off on purpose (power off) makes the keeper
// idle "off by schedule"; otherwise it is waited for within the node
// outage budget (waitForNode, as every run waits). A node that comes back
// with another boot id, or is powered on again, gets a verify-only pass of
// the lane's staged blocks (the Verify workflow, repairing what drifted)
// before the lane is restarted whole. A node gone past the budget stops
// the healing, says so (status, sparklane_lane_up 0, [keep] notify), and
// the keeper keeps watching for it.

// react is a check's outcome acted upon (the nodes-aware keeper).
func (k *keeper) react(c checked) {
	switch {
	case len(c.goneNodes) > 0:
		k.away(c.goneNodes, c.gone)
		return
	case c.gone != "":
		// The check itself failed: not a lane found down.
		k.setHealth("unknown")
		k.in.LastReason = c.gone
		return
	}
	back := ""
	if k.in.Lost != "" {
		// Every node answers again: the lost ones are verified first.
		back = "node " + strings.Join(k.in.LostNodes, ", ") + " came back after " + k.in.Lost
		k.in.Verify = union(k.in.Verify, k.in.LostNodes)
		k.in.Lost, k.in.LostNodes = "", nil
	}
	if c.down == "" {
		// Up as it stands (a worker restart, not a reboot): nothing to verify.
		k.in.Verify = nil
		k.setHealth("up")
		k.gatewayServing(0)
		if back != "" {
			k.in.LastReason = back + "; the lane answers"
		}
		return
	}
	reason := c.down
	if len(k.in.Verify) > 0 {
		reason = fmt.Sprintf("node %s came back (rebooted, or powered on): %s", strings.Join(k.in.Verify, ", "), c.down)
	}
	k.setHealth("down")
	k.in.LastReason = reason
	if k.ended || k.in.Paused || k.heldOff(reason) {
		return
	}
	if len(k.in.Verify) > 0 && !k.verifyNodes() {
		return
	}
	k.heal(reason)
}

// union is a with b's items it lacks appended, in order.
func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

// sawBoot records the boot id node reported in its check (its result, or
// a RankDown's details); another one than before puts the node on the
// verify list: it rebooted.
func (k *keeper) sawBoot(node string, r contract.CheckRanksResult, err error) {
	if !k.nodesV {
		return
	}
	var ae *temporal.ApplicationError
	if err != nil && errors.As(err, &ae) && ae.HasDetails() {
		_ = ae.Details(&r)
	}
	if r.BootID == "" {
		return
	}
	if k.in.BootIDs == nil {
		k.in.BootIDs = map[string]string{}
	}
	if was := k.in.BootIDs[node]; was != "" && was != r.BootID {
		k.in.Verify = union(k.in.Verify, []string{node})
		i := k.t.start("node rebooted", node)
		k.t.end(i, "boot id "+was+" → "+r.BootID, nil)
	}
	k.in.BootIDs[node] = r.BootID
}

// nodeOff asks (control queue) whether node is off on purpose: its relay
// is off, or sparklane powered it down; why, or "".
func (k *keeper) nodeOff(node string) string {
	var r contract.NodeOffResult
	err := workflow.ExecuteActivity(summarize(controlOpts(k.ctx, time.Minute, 0, 3), node, -1, "is it off?"), ca.NodeOff, contract.NodeOffInput{Node: node}).Get(k.ctx, &r)
	if err != nil || !r.Off {
		return ""
	}
	return r.Why
}

// away handles nodes whose workers did not pick up a check: off on
// purpose → idle; already lost → keep watching; else wait for them.
func (k *keeper) away(nodes []string, msg string) {
	for _, n := range nodes {
		if why := k.nodeOff(n); why != "" {
			k.in.Off, k.in.OffNodes = "node "+n+" is off ("+why+")", nodes
			k.in.LastReason = "off by schedule: " + k.in.Off + "; not healing until it is powered on"
			k.setHealth("off")
			k.gatewayOff(false, k.in.LastReason)
			return
		}
	}
	if k.in.Lost != "" {
		k.setHealth("down")
		return
	}
	k.setHealth("unknown")
	k.in.LastReason = msg
	k.waitFor(nodes)
}

// stillOff (while off by schedule, instead of a check) asks whether the
// off nodes are still off; once none is, they are put on the verify list
// and the check runs: the lane comes back by itself.
func (k *keeper) stillOff() bool {
	for _, n := range k.in.OffNodes {
		if k.nodeOff(n) != "" {
			return true
		}
	}
	k.in.LastReason = "powered on again after " + k.in.Off + ": bringing the lane back"
	k.in.Verify = union(k.in.Verify, k.in.OffNodes)
	k.in.Off, k.in.OffNodes = "", nil
	k.gatewayHold(k.in.LastReason)
	return false
}

// waitFor waits for each gone node within the outage budget (waitForNode:
// the step shows "waiting for node N (down …)"); past it the keeper stops
// healing, says so and notifies, and the next checks watch for the node.
// An "end" cuts the wait short.
func (k *keeper) waitFor(nodes []string) {
	budget := k.in.OutageBudget.D()
	if budget <= 0 {
		budget = contract.DefaultOutageBudget
	}
	wctx, cancel := workflow.WithCancel(k.ctx)
	k.cancelProbe = cancel
	defer func() { k.cancelProbe, k.waiting = nil, ""; cancel() }()
	for _, n := range nodes {
		k.waiting = n
		i := k.t.start("wait for node "+n, n)
		err := waitForNode(wctx, nodeStep{t: k.t, step: i, node: n, budget: budget}, func() error {
			var r contract.CheckRanksResult
			actx := workflow.WithActivityOptions(wctx, workflow.ActivityOptions{
				TaskQueue: contract.NodeQueue(n), ScheduleToStartTimeout: k.pickup(), StartToCloseTimeout: 30 * time.Second,
				RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
			})
			err := workflow.ExecuteActivity(summarize(actx, n, -1, "check "+k.in.Plan.Lane), na.CheckRanks,
				contract.CheckRanksInput{Lane: k.in.Plan.Lane, Ranks: k.ranksOn(n)}).Get(wctx, &r)
			if !nodeGone(err) {
				k.sawBoot(n, r, err)
			}
			if errType(err) == contract.RankDown {
				return nil // back, its ranks gone: the next check restarts the lane
			}
			return err
		})
		switch {
		case k.ended:
			k.t.end(i, "", err)
			return
		case errType(err) == "NodeUnreachable":
			k.t.end(i, "", err)
			k.in.Lost, k.in.LostNodes = errMessage(err), nodes
			k.in.LastReason = "stopped healing: " + k.in.Lost + "; watching for the node"
			k.setHealth("down")
			k.notify(contract.KeeperNodeLost, k.in.LastReason)
			return
		}
		k.t.end(i, "back", err)
	}
}

// pickup is the keeper's schedule-to-start timeout on a node queue.
func (k *keeper) pickup() time.Duration {
	if p := k.in.Pickup.D(); p > 0 {
		return p
	}
	return contract.DefaultPickup
}

// ranksOn lists the lane's ranks on node.
func (k *keeper) ranksOn(node string) []int {
	var out []int
	for _, n := range k.in.Plan.Nodes {
		if n.Node == node {
			out = append(out, n.Rank)
		}
	}
	return out
}

// verifyNodes runs a verify-only pass of the lane's staged blocks on each
// node of the verify list (a Verify child per node, repairing what
// drifted), holding "healing" so an "end" waits for it (and cuts it
// short). false: a pass failed (the lane is not restarted on blocks that
// cannot be trusted; the next check tries again), or the keeper ended.
func (k *keeper) verifyNodes() bool {
	k.healing = true
	vctx, cancel := workflow.WithCancel(k.ctx)
	k.cancelProbe = cancel
	defer func() { k.cancelProbe, k.healing = nil, false; cancel() }()
	for len(k.in.Verify) > 0 && !k.ended {
		n := k.in.Verify[0]
		id := fmt.Sprintf("%s/verify-%s-%d", KeeperID(k.in.Cluster), n, k.in.Checks)
		i := k.t.start("verify-only "+k.in.Plan.Lane, n)
		k.t.child(id)
		cctx := workflow.WithChildOptions(vctx, workflow.ChildWorkflowOptions{
			WorkflowID: id, TaskQueue: contract.ControlQueue, WaitForCancellation: true,
			StaticSummary:         fmt.Sprintf("%s: verify-only pass of %s before the keeper restarts it", n, k.in.Plan.Lane),
			TypedSearchAttributes: searchattr.For(k.in.Plan.Lane, k.in.Cluster),
		})
		var r contract.VerifyWorkflowResult
		err := workflow.ExecuteChildWorkflow(cctx, Verify, contract.VerifyInput{
			Lanes: []contract.VerifyLane{{Plan: k.in.Plan, Blocks: k.in.Recipe.Staging}}, Only: n, Repair: true, Pickup: k.in.Pickup,
		}).Get(vctx, &r)
		k.t.end(i, fmt.Sprintf("%d blocks verified, %d repaired", len(r.Blocks), len(r.Repaired)), err)
		if err != nil {
			if !k.ended {
				k.in.LastReason = fmt.Sprintf("verify-only pass on node %s failed: %s; the lane is not restarted until it passes (the next check tries again)", n, errMessage(err))
			}
			return false
		}
		k.in.Verify = k.in.Verify[1:]
	}
	return !k.ended
}

// notify tells the operator through the config's [keep] notify (a step in
// the history; a failure to notify is recorded, never fatal).
func (k *keeper) notify(state, reason string) {
	i := k.t.start("notify", "")
	var r contract.KeeperNotifyResult
	err := workflow.ExecuteActivity(controlOpts(k.ctx, time.Minute, 0, 3), ca.KeeperNotify,
		contract.KeeperNotifyInput{Cluster: k.in.Cluster, Lane: k.in.Plan.Lane, State: state, Reason: reason}).Get(k.ctx, &r)
	k.t.end(i, nonEmpty(r.Notified, "no [keep] notify configured"), err)
}
