package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
	"github.com/sparklane/sparklane/internal/fault"
)

// Staging activity budgets: a copy of hundreds of GB runs for hours; the
// heartbeat timeout is what notices a dead node worker, and the retry
// resumes from the last heartbeat.
const (
	stageRunTimeout  = 24 * time.Hour
	stageHeartbeat   = time.Minute
	stageAttempts    = 20
	verifyRunTimeout = 6 * time.Hour
)

// StageNode stages every block of a lane on one node, in recipe order, then
// (when asked) verifies them without writing. It runs as its own workflow
// (ID stage/LANE/NODE) so each node's multi-hour copy has its own history
// and retries, a second stage of the same lane on the same node is refused
// by ID, and `starter stage --node` can run it alone.
func StageNode(ctx workflow.Context, in StageNodeInput) (StageNodeResult, error) {
	t := newTracker(ctx, "StageNode", in.Lane)
	res := StageNodeResult{Node: in.Node}
	hb := in.Heartbeat.D()
	if hb <= 0 {
		hb = stageHeartbeat
	}
	actx := nodeOpts(ctx, in.Node, in.PickupTimeout.D(), stageRunTimeout, hb, stageAttempts)
	// From versionStageVerifyInBlock on, each StageBlock verifies what it
	// staged itself: one task round trip less per block than a VerifyBlock
	// after all of them.
	inBlock := false
	if in.Verify && !in.DryRun {
		inBlock = workflow.GetVersion(ctx, versionStageVerifyInBlock, workflow.DefaultVersion, 1) >= 1
	}
	for _, b := range in.Blocks {
		i := t.start("stage "+b.ID, in.Node)
		var r activities.StageBlockResult
		bin := activities.StageBlockInput{
			Lane: in.Lane, Block: b, Rank: in.Rank, TP: in.TP, Force: in.Mode == StageForce, DryRun: in.DryRun,
		}
		if b.Kind == "hub-mirror" {
			bin.Relay = in.Relay
		}
		bin.Room = in.Room
		bin.Verify = inBlock
		// A node gone mid-copy (reboot, upgrade) is waited for within the
		// outage budget; the block then resumes from its last heartbeat
		// and the fsynced bytes on the node's disk.
		err := onNode(ctx, t, i, in.Node, in.OutageBudget.D(), func() error {
			what := "stage "
			if inBlock {
				what = "stage + verify "
			}
			err := workflow.ExecuteActivity(summarize(actx, in.Node, in.Rank, what+in.Lane+"/"+b.ID), na.StageBlock, bin).Get(ctx, &r)
			if p := lastProgress(err); p != nil {
				bin.Resume = p
			}
			return err
		})
		t.end(i, fmt.Sprintf("%d files copied, %d verified, %d adopted", r.Result.CopiedFiles, r.Result.VerifiedFiles, r.Result.AdoptedFiles), err)
		if err != nil {
			return res, nodeErr(in.Node, "stage "+b.ID, err)
		}
		verified := r.Verified
		r.Verified = nil // reported once, in res.Verified
		res.Blocks = append(res.Blocks, r)
		if inBlock {
			i := t.start("verify "+b.ID, in.Node)
			var v activities.VerifyBlockResult
			if verified != nil {
				v = *verified
			}
			err := verifiedClean(in.Node, b.ID, v, verified != nil)
			t.end(i, fmt.Sprintf("%d ok", v.Result.OK), err)
			if err != nil {
				return res, nodeErr(in.Node, "verify "+b.ID, err)
			}
			res.Verified = append(res.Verified, v)
		}
	}
	if in.Verify && !in.DryRun && !inBlock {
		vctx := nodeOpts(ctx, in.Node, in.PickupTimeout.D(), verifyRunTimeout, hb, 3)
		for _, b := range in.Blocks {
			i := t.start("verify "+b.ID, in.Node)
			var v activities.VerifyBlockResult
			err := onNode(ctx, t, i, in.Node, in.OutageBudget.D(), func() error {
				return workflow.ExecuteActivity(summarize(vctx, in.Node, in.Rank, "verify "+in.Lane+"/"+b.ID), na.VerifyBlock, activities.VerifyBlockInput{
					Lane: in.Lane, Block: b, Rank: in.Rank, TP: in.TP,
				}).Get(ctx, &v)
			})
			if err == nil {
				err = verifiedClean(in.Node, b.ID, v, true)
			}
			t.end(i, fmt.Sprintf("%d ok", v.Result.OK), err)
			if err != nil {
				return res, nodeErr(in.Node, "verify "+b.ID, err)
			}
			res.Verified = append(res.Verified, v)
		}
	}
	return res, nil
}

// verifiedClean is nil when the post-stage verify v of a block found
// nothing bad or missing, else the non-retryable ContentMismatch naming
// them. ran false: the node's worker did not return the verify it was
// asked for (an older worker that ignores StageBlockInput.Verify).
func verifiedClean(node, block string, v activities.VerifyBlockResult, ran bool) error {
	if !ran {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("node %s block %s: its worker staged the block but returned no verify: upgrade the node's worker (starter fleet upgrade) and stage again", node, block),
			fault.InvalidSpec, nil)
	}
	if v.Result.Clean() {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("node %s block %s: %d bad, %d missing after staging (first: %s)", node, block,
			v.Result.NBad(), v.Result.NMissing(), firstOf(v.Result.Bad, v.Result.Missing)),
		fault.ContentMismatch, nil, v)
}

func firstOf(lists ...[]string) string {
	for _, l := range lists {
		if len(l) > 0 {
			return l[0]
		}
	}
	return ""
}

// nodeErr names the node and step in an error, keeping its type so callers
// can branch on it; a pickup timeout becomes NodeUnreachable.
func nodeErr(node, step string, err error) error {
	typ := errType(err)
	if isPickupTimeout(err) {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("node %s unreachable: its worker is not polling %s (step %s)", node, NodeQueue(node), step), "NodeUnreachable", err)
	}
	if typ == "" {
		typ = "StepFailed"
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("node %s, %s: %s", node, step, errMessage(err)), typ, err)
}

// stageChildren starts StageNode on every node of plan (or only one) in
// parallel and waits for all; the first error is returned after all ended.
// An optional heartbeat overrides the staging heartbeat timeout.
func stageChildren(ctx workflow.Context, t *tracker, plan contract.LanePlan, blocks []contract.Staging, only, mode string, dryRun, verify bool, pickup, budget time.Duration, room *activities.DiskRoom, heartbeat ...time.Duration) ([]StageNodeResult, error) {
	var hb time.Duration
	if len(heartbeat) > 0 {
		hb = heartbeat[0]
	}
	type child struct {
		node string
		f    workflow.ChildWorkflowFuture
	}
	var kids []child
	// The relay group is every node of the lane; staging one node alone
	// (--node) reads the NAS, as there is no peer to share with.
	var rin *activities.RelayInput
	if plan.Relay != nil && only == "" && len(plan.Nodes) > 1 {
		rin = &activities.RelayInput{Peers: plan.Relay.Peers}
		for _, n := range plan.Nodes {
			rin.Nodes = append(rin.Nodes, n.Node)
		}
	}
	for _, n := range plan.Nodes {
		if only != "" && n.Node != only {
			continue
		}
		id := StageNodeID(plan.Lane, n.Node)
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:        id,
			TaskQueue:         ControlQueue,
			ParentClosePolicy: 0,
			// The UI's child row says which node and rank it stages for.
			StaticSummary: fmt.Sprintf("%s rank %d: stage %s", n.Node, n.Rank, plan.Lane),
			// Per-node runs carry the lane too, so the UI's lane filter
			// finds them beside their parent.
			TypedSearchAttributes: searchattr.For(plan.Lane, plan.Cluster),
		})
		t.child(id)
		kids = append(kids, child{n.Node, workflow.ExecuteChildWorkflow(cctx, StageNode, StageNodeInput{
			Lane: plan.Lane, Node: n.Node, Rank: n.Rank, TP: plan.TP, Blocks: blocks, Mode: mode,
			DryRun: dryRun, Verify: verify, PickupTimeout: contract.Duration(pickup), Heartbeat: contract.Duration(hb), OutageBudget: contract.Duration(budget), Relay: rin, Room: room,
		})})
	}
	if only != "" && len(kids) == 0 {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("node %s is not in lane %s's cluster %s", only, plan.Lane, plan.Cluster), fault.InvalidSpec, nil)
	}
	var out []StageNodeResult
	var errs []string
	var firstErr error
	for _, k := range kids {
		var r StageNodeResult
		if err := k.f.Get(ctx, &r); err != nil {
			errs = append(errs, errMessage(err))
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out = append(out, r)
	}
	if firstErr != nil {
		return out, temporal.NewNonRetryableApplicationError(strings.Join(errs, "; "), errType(firstErr), firstErr)
	}
	return out, nil
}

// Stage stages a lane's blocks on every node of its cluster in parallel
// (starter stage). Verify runs a verify-only pass after the copy.
func Stage(ctx workflow.Context, in StageInput) (StageResult, error) {
	t := newTracker(ctx, "Stage", in.Plan.Lane)
	if !in.DryRun {
		held := planNodes(in.Plan)
		if in.Only != "" {
			held = []string{in.Only}
		}
		leases, err := holdNodes(ctx, t, LeaseStage, in.Plan.Lane, in.Plan.Cluster, held)
		if err != nil {
			return StageResult{Lane: in.Plan.Lane}, err
		}
		defer leases.release()
	}
	i := t.start("stage", "")
	nodes, err := stageChildren(ctx, t, in.Plan, in.Blocks, in.Only, in.Mode, in.DryRun, in.Verify, in.Pickup.D(), in.OutageBudget.D(), in.Room, in.Heartbeat.D())
	t.end(i, "", err)
	return StageResult{Lane: in.Plan.Lane, Nodes: nodes}, err
}

// Verify checks the staged blocks of lanes on every node without writing
// (starter verify, the nightly schedule). Drift fails the run, visibly in
// the UI, after writing a short report; with Repair the drifted blocks are
// staged again (which re-copies only what no longer matches) and verified.
func Verify(ctx workflow.Context, in VerifyInput) (VerifyWorkflowResult, error) {
	t := newTracker(ctx, "Verify", "")
	lanes := in.Lanes
	if len(in.LaneNames) > 0 {
		rctx := controlOpts(ctx, time.Minute, 0, 3)
		for _, name := range in.LaneNames {
			i := t.start("resolve "+name, "")
			var r activities.ResolveLaneResult
			err := workflow.ExecuteActivity(rctx, ca.ResolveLane, activities.ResolveLaneInput{Lane: name}).Get(ctx, &r)
			t.end(i, "", err)
			if err != nil {
				return VerifyWorkflowResult{}, err
			}
			lanes = append(lanes, VerifyLane{Plan: r.Plan, Blocks: r.Recipe.Staging})
		}
	}
	type pend struct {
		lane, node string
		rank, tp   int
		block      contract.Staging
		f          workflow.Future
		step       int
	}
	var ps []pend
	for _, l := range lanes {
		for _, n := range l.Plan.Nodes {
			if in.Only != "" && n.Node != in.Only {
				continue
			}
			vctx := nodeOpts(ctx, n.Node, in.Pickup.D(), verifyRunTimeout, stageHeartbeat, 3)
			for _, b := range l.Blocks {
				ps = append(ps, pend{lane: l.Plan.Lane, node: n.Node, rank: n.Rank, tp: l.Plan.TP, block: b,
					step: t.start("verify "+l.Plan.Lane+"/"+b.ID, n.Node),
					f: workflow.ExecuteActivity(summarize(vctx, n.Node, n.Rank, "verify "+l.Plan.Lane+"/"+b.ID), na.VerifyBlock, activities.VerifyBlockInput{
						Lane: l.Plan.Lane, Block: b, Rank: n.Rank, TP: l.Plan.TP, Full: in.Full,
					})})
			}
		}
	}
	var res VerifyWorkflowResult
	offNodes := map[string]string{}
	var drifted []pend
	var failures []string
	for _, p := range ps {
		var v activities.VerifyBlockResult
		err := p.f.Get(ctx, &v)
		v.Lane = p.lane
		if err != nil {
			t.end(p.step, "", err)
			v = activities.VerifyBlockResult{Lane: p.lane, Node: p.node, Block: p.block.ID, Kind: p.block.Kind}
			if noPickup(err) && verifyNodeOff(ctx, t, p.node, offNodes) {
				// Off on purpose: not verified, not drift, not a failure.
				v.Off = true
				if !slices.Contains(res.Off, p.node) {
					res.Off = append(res.Off, p.node)
					res.OffWhy = append(res.OffWhy, offNodes[p.node])
				}
				res.Blocks = append(res.Blocks, v)
				continue
			}
			if noPickup(err) {
				// Nobody polls the node's queue: nothing was checked, and
				// that is not drift.
				v.NoWorker = true
				if !slices.Contains(res.NoWorker, p.node) {
					res.NoWorker = append(res.NoWorker, p.node)
					failures = append(failures, noWorkerText(p.node))
				}
				res.Blocks = append(res.Blocks, v)
				continue
			}
			failures = append(failures, fmt.Sprintf("%s on %s: %s", p.block.ID, p.node, errMessage(err)))
			res.Drift = true
			v.Result.Missing = []string{"(verify failed: " + errMessage(err) + ")"}
			res.Blocks = append(res.Blocks, v)
			continue
		}
		detail := fmt.Sprintf("%d ok, %d bad, %d missing", v.Result.OK, v.Result.NBad(), v.Result.NMissing())
		if !v.Result.Clean() {
			res.Drift = true
			drifted = append(drifted, p)
			t.end(p.step, detail, temporal.NewApplicationError(detail, fault.ContentMismatch))
		} else {
			t.end(p.step, detail, nil)
		}
		res.Blocks = append(res.Blocks, v)
	}
	var leases *nodeLeases
	if in.Repair && len(drifted) > 0 {
		// A repair writes: the drifted nodes are held for it alone.
		var held []string
		for _, p := range drifted {
			if !contains(held, p.node) {
				held = append(held, p.node)
			}
		}
		var err error
		if leases, err = holdNodes(ctx, t, LeaseRepair, drifted[0].lane, "", held); err != nil {
			failures = append(failures, "repair: "+errMessage(err))
			drifted = nil
		}
		defer leases.release()
		for _, p := range drifted {
			i := t.start("repair "+p.lane+"/"+p.block.ID, p.node)
			var r activities.StageBlockResult
			actx := nodeOpts(ctx, p.node, in.Pickup.D(), stageRunTimeout, stageHeartbeat, stageAttempts)
			err := workflow.ExecuteActivity(summarize(actx, p.node, p.rank, "repair "+p.lane+"/"+p.block.ID), na.StageBlock, activities.StageBlockInput{Lane: p.lane, Block: p.block, Rank: p.rank, TP: p.tp}).Get(ctx, &r)
			t.end(i, fmt.Sprintf("%d files re-copied", r.Result.CopiedFiles), err)
			if err != nil {
				failures = append(failures, fmt.Sprintf("repair %s on %s: %s", p.block.ID, p.node, errMessage(err)))
				continue
			}
			res.Repaired = append(res.Repaired, r)
		}
		if len(failures) == 0 {
			res.Drift = false
		}
	}
	if in.Report {
		i := t.start("report", "")
		err := workflow.ExecuteActivity(controlOpts(ctx, time.Minute, 0, 3), ca.WriteVerifyReport, activities.VerifyReportInput{
			Blocks: res.Blocks, Repaired: res.Repaired, Failures: failures,
			WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, RunID: workflow.GetInfo(ctx).WorkflowExecution.RunID,
		}).Get(ctx, &res.Report)
		t.end(i, res.Report, err)
	}
	if res.Drift {
		var bad []string
		for _, b := range res.Blocks {
			if !b.Result.Clean() {
				bad = append(bad, fmt.Sprintf("%s/%s on %s: %d bad, %d missing", b.Lane, b.Block, b.Node, b.Result.NBad(), b.Result.NMissing()))
			}
		}
		bad = append(bad, failures...)
		return res, temporal.NewNonRetryableApplicationError("staged data drifted: "+strings.Join(bad, "; "), fault.ContentMismatch, nil, res)
	}
	if len(res.NoWorker) > 0 {
		// No drift found, but some nodes were not checked at all.
		return res, temporal.NewNonRetryableApplicationError(strings.Join(failures, "; "), fault.NoWorker, nil, res)
	}
	return res, nil
}

// verifyNodeOff asks once per node whether a node whose worker did not
// pick up its check is off on purpose (relay off, or powered down by
// sparklane); known answers are kept in known (node → why, "" = not off).
// Runs recorded before the change never ask.
func verifyNodeOff(ctx workflow.Context, t *tracker, node string, known map[string]string) bool {
	if why, ok := known[node]; ok {
		return why != ""
	}
	if workflow.GetVersion(ctx, versionVerifyOffNodes, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		known[node] = ""
		return false
	}
	i := t.start("is it off?", node)
	var r activities.NodeOffResult
	err := workflow.ExecuteActivity(controlOpts(ctx, time.Minute, 0, 3), ca.NodeOff, activities.NodeOffInput{Node: node}).Get(ctx, &r)
	t.end(i, r.Why, err)
	if err != nil || !r.Off {
		known[node] = ""
		return false
	}
	known[node] = r.Why
	return true
}
