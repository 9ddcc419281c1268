package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

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
func StageNode(ctx workflow.Context, in contract.StageNodeInput) (contract.StageNodeResult, error) {
	s := &stageNodeRun{ctx: ctx, in: in, t: newTracker(ctx, "StageNode", in.Lane), res: contract.StageNodeResult{Node: in.Node}}
	s.hb = in.Heartbeat.D()
	if s.hb <= 0 {
		s.hb = stageHeartbeat
	}
	// From versionStageVerifyInBlock on, each StageBlock verifies what it
	// staged itself: one task round trip less per block than a VerifyBlock
	// after all of them.
	if in.Verify && !in.DryRun {
		s.inBlock = workflow.GetVersion(ctx, versionStageVerifyInBlock, workflow.DefaultVersion, 1) >= 1
	}
	// From versionDryRunCompletes on, a dry run records a block's
	// refusal and goes on: it completes, never a failed run in the UI.
	dry := in.DryRun && workflow.GetVersion(ctx, versionDryRunCompletes, workflow.DefaultVersion, 1) >= 1
	for _, b := range in.Blocks {
		if err := s.stage(b); err != nil {
			if !dry {
				return s.res, err
			}
			s.res.Blocks = append(s.res.Blocks, contract.StageBlockResult{Node: in.Node, Block: b.ID, Kind: b.Kind, Error: errMessage(err), ErrorType: errType(err)})
		}
	}
	if in.Verify && !in.DryRun && !s.inBlock {
		for _, b := range in.Blocks {
			if err := s.verify(b); err != nil {
				return s.res, err
			}
		}
	}
	return s.res, nil
}

// stageNodeRun is one StageNode run: its steps are methods that fill res.
type stageNodeRun struct {
	ctx workflow.Context
	in  contract.StageNodeInput
	t   *tracker
	res contract.StageNodeResult
	hb  time.Duration // the staging heartbeat timeout
	// inBlock: each StageBlock verifies the block it staged
	// (versionStageVerifyInBlock).
	inBlock bool
}

// stage stages block b on the node (and, inBlock, checks the verify that
// came back with it).
func (s *stageNodeRun) stage(b contract.Staging) error {
	in := s.in
	actx := nodeOpts(s.ctx, in.Node, in.PickupTimeout.D(), callBudget{run: stageRunTimeout, heartbeat: s.hb, attempts: stageAttempts})
	i := s.t.start("stage "+b.ID, in.Node)
	var r contract.StageBlockResult
	bin := contract.StageBlockInput{
		Lane: in.Lane, Block: b, Rank: in.Rank, TP: in.TP, Force: in.Mode == contract.StageForce, DryRun: in.DryRun,
	}
	if b.Kind == "hub-mirror" {
		bin.Relay = in.Relay
	}
	bin.Room = in.Room
	bin.Verify = s.inBlock
	// A node gone mid-copy (reboot, upgrade) is waited for within the
	// outage budget; the block then resumes from its last heartbeat
	// and the fsynced bytes on the node's disk.
	err := onNode(s.ctx, nodeStep{t: s.t, step: i, node: in.Node, budget: in.OutageBudget.D()}, func() error {
		what := "stage "
		if s.inBlock {
			what = "stage + verify "
		}
		err := workflow.ExecuteActivity(summarize(actx, in.Node, in.Rank, what+in.Lane+"/"+b.ID), na.StageBlock, bin).Get(s.ctx, &r)
		if p := lastProgress(err); p != nil {
			bin.Resume = p
		}
		return err
	})
	s.t.end(i, fmt.Sprintf("%d files copied, %d verified, %d adopted", r.Result.CopiedFiles, r.Result.VerifiedFiles, r.Result.AdoptedFiles), err)
	if err != nil {
		return nodeErr(in.Node, "stage "+b.ID, err)
	}
	verified := r.Verified
	r.Verified = nil // reported once, in res.Verified
	s.res.Blocks = append(s.res.Blocks, r)
	if !s.inBlock {
		return nil
	}
	i = s.t.start("verify "+b.ID, in.Node)
	var v contract.VerifyBlockResult
	if verified != nil {
		v = *verified
	}
	err = verifiedClean(in.Node, b.ID, v, verified != nil)
	s.t.end(i, fmt.Sprintf("%d ok", v.Result.OK), err)
	if err != nil {
		return nodeErr(in.Node, "verify "+b.ID, err)
	}
	s.res.Verified = append(s.res.Verified, v)
	return nil
}

// verify checks staged block b without writing (a VerifyBlock after all
// blocks: runs recorded before versionStageVerifyInBlock).
func (s *stageNodeRun) verify(b contract.Staging) error {
	in := s.in
	vctx := nodeOpts(s.ctx, in.Node, in.PickupTimeout.D(), callBudget{run: verifyRunTimeout, heartbeat: s.hb, attempts: 3})
	i := s.t.start("verify "+b.ID, in.Node)
	var v contract.VerifyBlockResult
	err := onNode(s.ctx, nodeStep{t: s.t, step: i, node: in.Node, budget: in.OutageBudget.D()}, func() error {
		return workflow.ExecuteActivity(summarize(vctx, in.Node, in.Rank, "verify "+in.Lane+"/"+b.ID), na.VerifyBlock, contract.VerifyBlockInput{
			Lane: in.Lane, Block: b, Rank: in.Rank, TP: in.TP,
		}).Get(s.ctx, &v)
	})
	if err == nil {
		err = verifiedClean(in.Node, b.ID, v, true)
	}
	s.t.end(i, fmt.Sprintf("%d ok", v.Result.OK), err)
	if err != nil {
		return nodeErr(in.Node, "verify "+b.ID, err)
	}
	s.res.Verified = append(s.res.Verified, v)
	return nil
}

// verifiedClean is nil when the post-stage verify v of a block found
// nothing bad or missing, else the non-retryable ContentMismatch naming
// them. ran false: the node's worker did not return the verify it was
// asked for (an older worker that ignores StageBlockInput.Verify).
func verifiedClean(node, block string, v contract.VerifyBlockResult, ran bool) error {
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
			fmt.Sprintf("node %s unreachable: its worker is not polling %s (step %s)", node, contract.NodeQueue(node), step), "NodeUnreachable", err)
	}
	if typ == "" {
		typ = "StepFailed"
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("node %s, %s: %s", node, step, errMessage(err)), typ, err)
}

// stageChildren starts StageNode on every node of in.Plan (or only
// in.Only) in parallel and waits for all; the first error is returned
// after all ended. Every node's StageNode gets in's blocks, mode, dry run,
// verify, pickup, heartbeat (0: the staging default), outage budget and
// room.
func stageChildren(ctx workflow.Context, t *tracker, in contract.StageInput) ([]contract.StageNodeResult, error) {
	kids := startStageNodes(ctx, t, in)
	if in.Only != "" && len(kids) == 0 {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("node %s is not in lane %s's cluster %s", in.Only, in.Plan.Lane, in.Plan.Cluster), fault.InvalidSpec, nil)
	}
	return waitStageNodes(ctx, kids)
}

// stageKid is one node's StageNode child, under way.
type stageKid struct {
	node string
	f    workflow.ChildWorkflowFuture
}

// startStageNodes starts the StageNode child of every node in.Plan
// stages on, in plan order.
func startStageNodes(ctx workflow.Context, t *tracker, in contract.StageInput) []stageKid {
	plan := in.Plan
	rin := relayGroup(plan, in.Only)
	var kids []stageKid
	for _, n := range plan.Nodes {
		if in.Only != "" && n.Node != in.Only {
			continue
		}
		id := contract.StageNodeID(plan.Lane, n.Node)
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:        id,
			TaskQueue:         contract.ControlQueue,
			ParentClosePolicy: 0,
			// The UI's child row says which node and rank it stages for.
			StaticSummary: fmt.Sprintf("%s rank %d: stage %s", n.Node, n.Rank, plan.Lane),
			// Per-node runs carry the lane too, so the UI's lane filter
			// finds them beside their parent.
			TypedSearchAttributes: searchattr.For(plan.Lane, plan.Cluster),
		})
		t.child(id)
		kids = append(kids, stageKid{n.Node, workflow.ExecuteChildWorkflow(cctx, StageNode, contract.StageNodeInput{
			Lane: plan.Lane, Node: n.Node, Rank: n.Rank, TP: plan.TP, Blocks: in.Blocks, Mode: in.Mode,
			DryRun: in.DryRun, Verify: in.Verify, PickupTimeout: in.Pickup, Heartbeat: in.Heartbeat, OutageBudget: in.OutageBudget, Relay: rin, Room: in.Room,
		})})
	}
	return kids
}

// relayGroup is the relay group of a stage: every node of the lane.
// Staging one node alone (--node, only) reads the NAS, as there is no
// peer to share with.
func relayGroup(plan contract.LanePlan, only string) *contract.RelayInput {
	if plan.Relay == nil || only != "" || len(plan.Nodes) <= 1 {
		return nil
	}
	rin := &contract.RelayInput{Peers: plan.Relay.Peers}
	for _, n := range plan.Nodes {
		rin.Nodes = append(rin.Nodes, n.Node)
	}
	return rin
}

// waitStageNodes waits for every StageNode child, in order, and returns
// their results; the first failure (its type kept), naming every one,
// once all ended.
func waitStageNodes(ctx workflow.Context, kids []stageKid) ([]contract.StageNodeResult, error) {
	var out []contract.StageNodeResult
	var errs []string
	var firstErr error
	for _, k := range kids {
		var r contract.StageNodeResult
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
//
// Its steps are the methods of stageRun, in the order run lists them.
func Stage(ctx workflow.Context, in contract.StageInput) (contract.StageResult, error) {
	s := &stageRun{ctx: ctx, in: in, t: newTracker(ctx, "Stage", in.Plan.Lane), res: contract.StageResult{Lane: in.Plan.Lane}}
	// Leases are released on every exit, last.
	defer func() { s.leases.release() }()
	err := s.run()
	return s.res, err
}

// stageRun is one Stage run: its input, its result so far and the node
// leases it holds. Each step is a method; the first failure ends the run
// (nothing a stage wrote is undone: a second stage resumes it).
type stageRun struct {
	ctx    workflow.Context
	in     contract.StageInput
	t      *tracker
	res    contract.StageResult
	leases *nodeLeases
	// dry: a dry run that takes every step and completes
	// (versionDryRunCompletes).
	dry bool
}

// run takes the steps in order and returns the first failure; a dry run
// (versionDryRunCompletes) takes every step, keeps the first failure in
// its result and completes.
func (s *stageRun) run() error {
	if s.in.DryRun && workflow.GetVersion(s.ctx, versionDryRunCompletes, workflow.DefaultVersion, 1) >= 1 {
		s.dry, s.res.DryRun = true, true
	}
	for _, step := range []func() error{
		s.leaseNodes, // the nodes staged (not for a dry run)
		s.fetch,      // the repos into the NAS first, when asked
		s.image,      // the lane's image on every node
		s.stageNodes, // a StageNode child per node
	} {
		if err := step(); err != nil {
			if !s.dry {
				return err
			}
			s.dryFailed(errMessage(err), errType(err))
		}
	}
	return nil
}

// dryFailed keeps the first failure a dry run met in its result.
func (s *stageRun) dryFailed(msg, typ string) {
	if s.res.Error == "" {
		s.res.Error, s.res.ErrorType = msg, typ
	}
}

// leaseNodes holds the nodes the stage writes (every node of the plan,
// or only in.Only) for this run alone; a dry run writes nothing and
// holds none.
func (s *stageRun) leaseNodes() error {
	if s.in.DryRun {
		return nil
	}
	held := planNodes(s.in.Plan)
	if s.in.Only != "" {
		held = []string{s.in.Only}
	}
	leases, err := holdNodes(s.ctx, s.t, contract.NodeLeaseHolder{Kind: contract.LeaseStage, Lane: s.in.Plan.Lane, Cluster: s.in.Plan.Cluster}, held)
	s.leases = leases
	return err
}

// fetch downloads the fetch plan's repos into the NAS first (stage
// --fetch, blocks with fetch = true), from versionStageFetch on. Runs
// recorded before it carried no plan and never ask.
func (s *stageRun) fetch() error {
	in := s.in
	if in.Fetch == nil || len(in.Fetch.Repos) == 0 ||
		workflow.GetVersion(s.ctx, versionStageFetch, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	id := contract.FetchID(in.Plan.Lane)
	if s.dry {
		// fetch/LANE stays the lock of the lane's real fetch.
		id += "/dry-run"
	}
	fr, err := fetchChild(s.ctx, s.t, contract.FetchInput{Plan: *in.Fetch, DryRun: in.DryRun, Pickup: in.Pickup, Heartbeat: in.Heartbeat, OutageBudget: in.OutageBudget}, in.Plan.Cluster, id)
	s.res.Fetch = fr
	if fr != nil && fr.Error != "" {
		s.dryFailed(fr.Error, fr.ErrorType)
	}
	return err
}

// image puts the lane's image on every node (images.go), from
// versionStageImage on.
func (s *stageRun) image() error {
	if workflow.GetVersion(s.ctx, versionStageImage, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	in := s.in
	img := &imageStep{ctx: s.ctx, t: s.t, plan: in.Plan, only: in.Only, dryRun: in.DryRun, pickup: in.Pickup.D(), budget: in.OutageBudget.D(), src: imageSources{build: in.Build, pull: in.Pull}}
	err := img.run()
	s.res.Images, s.res.Built, s.res.Pulled = img.res, img.built, img.pulled
	return err
}

// stageNodes stages the blocks on every node (or only one), each node
// a StageNode child. starter image build (ImageOnly: a new input, runs
// recorded before it never carry it) stops after the image.
func (s *stageRun) stageNodes() error {
	if s.in.ImageOnly {
		return nil
	}
	i := s.t.start("stage", "")
	nodes, err := stageChildren(s.ctx, s.t, s.in)
	s.t.end(i, "", err)
	s.res.Nodes = nodes
	return err
}

// Verify checks the staged blocks of lanes on every node without writing
// (starter verify, the nightly schedule). Drift fails the run, visibly in
// the UI, after writing a short report; with Repair the drifted blocks are
// staged again (which re-copies only what no longer matches) and verified.
func Verify(ctx workflow.Context, in contract.VerifyInput) (contract.VerifyWorkflowResult, error) {
	v := &verifyRun{ctx: ctx, in: in, t: newTracker(ctx, "Verify", ""), offNodes: map[string]string{}}
	lanes, err := v.resolveLanes()
	if err != nil {
		return contract.VerifyWorkflowResult{}, err
	}
	for _, p := range v.start(lanes) {
		v.collect(p)
	}
	leases := v.repair()
	defer leases.release()
	v.report()
	return v.result()
}

// verifyRun is one Verify run: its steps are methods that fill res.
type verifyRun struct {
	ctx workflow.Context
	in  contract.VerifyInput
	t   *tracker
	res contract.VerifyWorkflowResult
	// offNodes: node → why it is off on purpose ("" = not off), asked
	// once per node (verifyNodeOff).
	offNodes map[string]string
	drifted  []verifyPend
	failures []string
}

// verifyPend is one block's verify on one node, under way.
type verifyPend struct {
	lane, node string
	rank, tp   int
	block      contract.Staging
	f          workflow.Future
	step       int
}

// resolveLanes is in.Lanes plus the lanes named in in.LaneNames, resolved
// now (the recipes as they are at run time).
func (v *verifyRun) resolveLanes() ([]contract.VerifyLane, error) {
	lanes := v.in.Lanes
	if len(v.in.LaneNames) == 0 {
		return lanes, nil
	}
	rctx := controlOpts(v.ctx, time.Minute, 0, 3)
	for _, name := range v.in.LaneNames {
		i := v.t.start("resolve "+name, "")
		var r contract.ResolveLaneResult
		err := workflow.ExecuteActivity(rctx, ca.ResolveLane, contract.ResolveLaneInput{Lane: name}).Get(v.ctx, &r)
		v.t.end(i, "", err)
		if err != nil {
			return nil, err
		}
		lanes = append(lanes, contract.VerifyLane{Plan: r.Plan, Blocks: r.Recipe.Staging})
	}
	return lanes, nil
}

// start starts every block's verify on every node (or only in.Only) at once.
func (v *verifyRun) start(lanes []contract.VerifyLane) []verifyPend {
	var ps []verifyPend
	for _, l := range lanes {
		for _, n := range l.Plan.Nodes {
			if v.in.Only != "" && n.Node != v.in.Only {
				continue
			}
			vctx := nodeOpts(v.ctx, n.Node, v.in.Pickup.D(), callBudget{run: verifyRunTimeout, heartbeat: stageHeartbeat, attempts: 3})
			for _, b := range l.Blocks {
				ps = append(ps, verifyPend{lane: l.Plan.Lane, node: n.Node, rank: n.Rank, tp: l.Plan.TP, block: b,
					step: v.t.start("verify "+l.Plan.Lane+"/"+b.ID, n.Node),
					f: workflow.ExecuteActivity(summarize(vctx, n.Node, n.Rank, "verify "+l.Plan.Lane+"/"+b.ID), na.VerifyBlock, contract.VerifyBlockInput{
						Lane: l.Plan.Lane, Block: b, Rank: n.Rank, TP: l.Plan.TP, Full: v.in.Full,
					})})
			}
		}
	}
	return ps
}

// collect waits for one verify and files its outcome: clean, drifted, off
// on purpose, no worker, or failed.
func (v *verifyRun) collect(p verifyPend) {
	var b contract.VerifyBlockResult
	err := p.f.Get(v.ctx, &b)
	b.Lane = p.lane
	if err != nil {
		v.t.end(p.step, "", err)
		v.res.Blocks = append(v.res.Blocks, v.notVerified(p, err))
		return
	}
	detail := fmt.Sprintf("%d ok, %d bad, %d missing", b.Result.OK, b.Result.NBad(), b.Result.NMissing())
	if !b.Result.Clean() {
		v.res.Drift = true
		v.drifted = append(v.drifted, p)
		v.t.end(p.step, detail, temporal.NewApplicationError(detail, fault.ContentMismatch))
	} else {
		v.t.end(p.step, detail, nil)
	}
	v.res.Blocks = append(v.res.Blocks, b)
}

// notVerified is the result of a verify that did not return: its node is
// off on purpose (not verified, not drift, not a failure), has no worker
// (nothing was checked, and that is not drift either), or it failed
// (drift: the block cannot be trusted).
func (v *verifyRun) notVerified(p verifyPend, err error) contract.VerifyBlockResult {
	b := contract.VerifyBlockResult{Lane: p.lane, Node: p.node, Block: p.block.ID, Kind: p.block.Kind}
	if noPickup(err) && verifyNodeOff(v.ctx, v.t, p.node, v.offNodes) {
		b.Off = true
		if !slices.Contains(v.res.Off, p.node) {
			v.res.Off = append(v.res.Off, p.node)
			v.res.OffWhy = append(v.res.OffWhy, v.offNodes[p.node])
		}
		return b
	}
	if noPickup(err) {
		b.NoWorker = true
		if !slices.Contains(v.res.NoWorker, p.node) {
			v.res.NoWorker = append(v.res.NoWorker, p.node)
			v.failures = append(v.failures, noWorkerText(p.node))
		}
		return b
	}
	v.failures = append(v.failures, fmt.Sprintf("%s on %s: %s", p.block.ID, p.node, errMessage(err)))
	v.res.Drift = true
	b.Result.Missing = []string{"(verify failed: " + errMessage(err) + ")"}
	return b
}

// repair (with in.Repair) stages the drifted blocks again, holding their
// nodes for it alone: a repair writes. The caller releases the leases.
func (v *verifyRun) repair() *nodeLeases {
	if !v.in.Repair || len(v.drifted) == 0 {
		return nil
	}
	var held []string
	for _, p := range v.drifted {
		if !contains(held, p.node) {
			held = append(held, p.node)
		}
	}
	leases, err := holdNodes(v.ctx, v.t, contract.NodeLeaseHolder{Kind: contract.LeaseRepair, Lane: v.drifted[0].lane}, held)
	if err != nil {
		v.failures = append(v.failures, "repair: "+errMessage(err))
		v.drifted = nil
	}
	for _, p := range v.drifted {
		i := v.t.start("repair "+p.lane+"/"+p.block.ID, p.node)
		var r contract.StageBlockResult
		actx := nodeOpts(v.ctx, p.node, v.in.Pickup.D(), callBudget{run: stageRunTimeout, heartbeat: stageHeartbeat, attempts: stageAttempts})
		err := workflow.ExecuteActivity(summarize(actx, p.node, p.rank, "repair "+p.lane+"/"+p.block.ID), na.StageBlock, contract.StageBlockInput{Lane: p.lane, Block: p.block, Rank: p.rank, TP: p.tp}).Get(v.ctx, &r)
		v.t.end(i, fmt.Sprintf("%d files re-copied", r.Result.CopiedFiles), err)
		if err != nil {
			v.failures = append(v.failures, fmt.Sprintf("repair %s on %s: %s", p.block.ID, p.node, errMessage(err)))
			continue
		}
		v.res.Repaired = append(v.res.Repaired, r)
	}
	if len(v.failures) == 0 {
		v.res.Drift = false
	}
	return leases
}

// report writes the short verify report (with in.Report).
func (v *verifyRun) report() {
	if !v.in.Report {
		return
	}
	i := v.t.start("report", "")
	info := workflow.GetInfo(v.ctx)
	err := workflow.ExecuteActivity(controlOpts(v.ctx, time.Minute, 0, 3), ca.WriteVerifyReport, contract.VerifyReportInput{
		Blocks: v.res.Blocks, Repaired: v.res.Repaired, Failures: v.failures,
		WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
	}).Get(v.ctx, &v.res.Report)
	v.t.end(i, v.res.Report, err)
}

// result fails the run on drift (listing the blocks) or, without drift,
// on nodes that were not checked at all.
func (v *verifyRun) result() (contract.VerifyWorkflowResult, error) {
	res := v.res
	if res.Drift {
		var bad []string
		for _, b := range res.Blocks {
			if !b.Result.Clean() {
				bad = append(bad, fmt.Sprintf("%s/%s on %s: %d bad, %d missing", b.Lane, b.Block, b.Node, b.Result.NBad(), b.Result.NMissing()))
			}
		}
		bad = append(bad, v.failures...)
		return res, temporal.NewNonRetryableApplicationError("staged data drifted: "+strings.Join(bad, "; "), fault.ContentMismatch, nil, res)
	}
	if len(res.NoWorker) > 0 {
		return res, temporal.NewNonRetryableApplicationError(strings.Join(v.failures, "; "), fault.NoWorker, nil, res)
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
	var r contract.NodeOffResult
	err := workflow.ExecuteActivity(controlOpts(ctx, time.Minute, 0, 3), ca.NodeOff, contract.NodeOffInput{Node: node}).Get(ctx, &r)
	t.end(i, r.Why, err)
	if err != nil || !r.Off {
		known[node] = ""
		return false
	}
	known[node] = r.Why
	return true
}
