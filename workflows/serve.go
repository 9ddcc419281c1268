package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// DefaultReadyBudget is how long a lane may take to load before WaitReady
// gives up (a 17-minute weight load is normal).
const DefaultReadyBudget = 30 * time.Minute

// Serve runs hooks, starts every rank and probes the lane. On failure it
// stops the lane's containers again (under a disconnected context), so no
// half-started lane is left running.
//
// Its steps are the methods of serveRun, in the order run takes them.
func Serve(ctx workflow.Context, in contract.ServeInput) (contract.ServeResult, error) {
	s := &serveRun{ctx: ctx, in: in, t: newTracker(ctx, "Serve", in.Plan.Lane), res: contract.ServeResult{Lane: in.Plan.Lane}}
	// Leases are released on every exit, last.
	defer func() { s.leases.release() }()
	err := s.run()
	return s.res, err
}

// serveRun is one Serve run (starter up): its input, its result so far,
// the keepers it ended and the node leases it holds.
type serveRun struct {
	ctx workflow.Context
	in  contract.ServeInput
	t   *tracker
	res contract.ServeResult

	// keeper: this run ends and starts keepers (versionKeeper); ended
	// are the keepers it ended, as they were.
	keeper bool
	ended  []contract.KeeperStatus
	leases *nodeLeases
}

// run takes the steps in order and returns the first failure. A failure
// after the keepers were ended starts them again (the lane's own only if
// nothing was started: see serve).
func (s *serveRun) run() error {
	if err := s.endKeepers(); err != nil {
		return err
	}
	if err := s.leaseNodes(); err != nil {
		// Nothing was touched: every keeper ended keeps again.
		keepAgain(s.ctx, s.t, s.ended, "")
		return err
	}
	if err := s.serve(); err != nil {
		return err
	}
	s.keep()
	return nil
}

// endKeepers ends the keepers of the lane's nodes (a hand run wins over a
// heal), from versionKeeper on; a child run leaves them to its parent.
func (s *serveRun) endKeepers() error {
	s.keeper = keeperVersion(s.ctx) && workflow.GetInfo(s.ctx).ParentWorkflowExecution == nil
	if !s.keeper {
		return nil
	}
	plan := s.in.Plan
	ended, err := endKeepers(s.ctx, s.t, planNodes(plan), "", "handed over to "+contract.UpID(plan.Cluster)+" (lane "+plan.Lane+")")
	s.ended = ended
	return err
}

// leaseNodes holds the lane's nodes for this run alone.
func (s *serveRun) leaseNodes() error {
	plan := s.in.Plan
	leases, err := holdNodes(s.ctx, s.t, contract.NodeLeaseHolder{Kind: contract.LeaseUp, Lane: plan.Lane, Cluster: plan.Cluster}, planNodes(plan))
	s.leases = leases
	return err
}

// serve serves and probes the lane. A failure stops the half-started
// lane under a disconnected context, then the other lanes' keepers keep
// again (this lane's was stopped); a failed stop is the run's error, both
// named, and starts no keeper.
func (s *serveRun) serve() error {
	from := workflow.Now(s.ctx)
	res, err := serveLane(s.ctx, s.t, s.in)
	s.res = res
	if err == nil {
		s.route(workflow.Now(s.ctx).Sub(from))
		return nil
	}
	dctx, cancel := workflow.NewDisconnectedContext(s.ctx)
	defer cancel()
	if serr := stopLane(dctx, s.t, stopOf(s.in, s.in.Plan.Lane, planNodes(s.in.Plan))); serr != nil {
		return temporal.NewNonRetryableApplicationError(errMessage(err)+"; and stopping the half-started lane failed: "+errMessage(serr), errType(err), err)
	}
	keepAgain(s.ctx, s.t, s.ended, s.in.Plan.Lane)
	return err
}

// keep starts the cluster's keeper for the lane now served (not with
// --no-wait: a lane still loading is not down).
func (s *serveRun) keep() {
	if !s.keeper {
		return
	}
	in := s.in
	if in.NoWait {
		s.t.skip("keep", "", "--no-wait: the lane is not known to answer; `starter up` it to keep it")
		return
	}
	startKeeper(s.ctx, s.t, withServed(contract.KeeperInput{
		Cluster: in.Plan.Cluster, Recipe: in.Recipe, Plan: in.Plan, Policy: keepPolicy(in.Recipe, in.Keep, in.Grace),
		Pickup: in.Pickup, OutageBudget: in.OutageBudget, StartedBy: contract.UpID(in.Plan.Cluster), Gateways: in.Gateways,
	}, &s.res))
}

func planNodes(p contract.LanePlan) []string {
	out := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		out[i] = n.Node
	}
	return out
}

// stopOf is the stop of lane on nodes with the pickup and outage budget
// of in.
func stopOf(in contract.ServeInput, lane string, nodes []string) contract.StopInput {
	return contract.StopInput{Lane: lane, Nodes: nodes, Pickup: in.Pickup, OutageBudget: in.OutageBudget}
}

// laneServe is one serve of a lane: Serve's body, shared with Cutover,
// its rollback and the keeper's heal. in carries the recipe, the plan,
// --no-wait, the pickup and the outage budget (its Keep and Grace are
// Serve's); its steps are methods that fill res.
type laneServe struct {
	ctx   workflow.Context
	t     *tracker
	in    contract.ServeInput
	res   contract.ServeResult
	nodes []string // the plan's nodes
	// imageIDs are the image IDs each rank is created from ("": the
	// reference itself), as the image step resolved them.
	imageIDs []string
}

func newLaneServe(ctx workflow.Context, t *tracker, in contract.ServeInput) *laneServe {
	return &laneServe{ctx: ctx, t: t, in: in, res: contract.ServeResult{Lane: in.Plan.Lane}, nodes: planNodes(in.Plan)}
}

// serveLane serves the lane of in and returns what it did. Its node steps
// wait for a node that went away within the outage budget (runs recorded
// before versionServeOutageWait fail them at once).
func serveLane(ctx workflow.Context, t *tracker, in contract.ServeInput) (contract.ServeResult, error) {
	s := newLaneServe(ctx, t, in)
	err := s.run()
	return s.res, err
}

// run takes the steps in order and returns the first failure.
func (s *laneServe) run() error {
	if !serveWaits(s.ctx) {
		return s.runV0()
	}
	for _, step := range []func() error{
		s.images,     // the image present on every node
		s.hooks,      // before_serve hooks
		s.startRanks, // every rank
		s.probeLane,  // unless --no-wait
		s.postHooks,  // once the lane answers
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// fan is one node step per plan node (steps[i] on nodes[i]), each waited
// for within the outage budget.
func (s *laneServe) fan(steps []int) nodeFan {
	return nodeFan{t: s.t, wait: true, budget: s.in.OutageBudget.D(), steps: steps, nodes: s.nodes}
}

// images is serveLane's image step: the image present on every node.
// Since versionServeImageID a pinned repo:tag@sha256:D found on a node
// only under its tag (moved there: `docker load` sets no repo digest) is
// accepted with the ID the nodes carrying the digest have, and every rank
// of a pinned image is created from the ID its node resolved (imageIDs;
// "" where the reference itself is used).
func (s *laneServe) images() error {
	plan, rc, nodes := s.in.Plan, s.in.Recipe, s.nodes
	resolve := workflow.GetVersion(s.ctx, versionServeImageID, workflow.DefaultVersion, 1) == 1
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, s.t.start("image", n.Node))
	}
	found := make([]contract.EnsureImageResult, len(plan.Nodes))
	errs := perNode(s.ctx, s.fan(steps), func(ctx workflow.Context, i int) workflow.Future {
		// BuildHint marshals build_args with encoding/json, which writes map
		// keys sorted: the same recipe gives the same text on every replay.
		build := rc.BuildHint() //workflowcheck:ignore
		return workflow.ExecuteActivity(summarize(nodeOpts(ctx, nodes[i], s.in.Pickup.D(), callBudget{run: 2 * time.Minute, attempts: 3}), nodes[i], plan.Nodes[i].Rank, "image "+plan.Nodes[i].Image.String()), na.EnsureImage,
			contract.EnsureImageInput{Image: plan.Nodes[i].Image, Build: build, Resolve: resolve})
	}, func(ctx workflow.Context, i int, f workflow.Future) error { return f.Get(ctx, &found[i]) })
	for i, err := range errs {
		s.t.end(steps[i], found[i].ID, err)
		if err != nil {
			return nodeErr(nodes[i], "image", err)
		}
		s.res.Image = append(s.res.Image, found[i])
	}
	s.imageIDs = make([]string, len(plan.Nodes))
	if !resolve {
		return nil
	}
	if err := checkPinned(plan, found); err != nil {
		return err
	}
	for i, n := range plan.Nodes {
		if n.Image.Digest != "" {
			s.imageIDs[i] = found[i].ID
		}
	}
	return nil
}

// checkPinned refuses a node that has a pinned image only under its tag
// with another ID than the nodes carrying the digest (contract.PlanImage,
// the one owner of that rule, as the stage's image step asks it).
func checkPinned(plan contract.LanePlan, found []contract.EnsureImageResult) error {
	byImage := map[contract.ImageRef][]contract.ImageInventory{}
	var order []contract.ImageRef
	for i, n := range plan.Nodes {
		if _, ok := byImage[n.Image]; !ok {
			order = append(order, n.Image)
		}
		byImage[n.Image] = append(byImage[n.Image], contract.ImageInventory{Node: n.Node, Present: true, ID: found[i].ID, Unpinned: found[i].Unpinned})
	}
	for _, ref := range order {
		if ref.Digest == "" {
			continue
		}
		if _, err := contract.PlanImage(ref, byImage[ref]); err != nil {
			return permanent(err)
		}
	}
	return nil
}

// hookRun is how long the before_serve hooks (and clears) may run on a
// node: the recipe's [hooks] timeout (default two minutes) per hook, plus
// one for the clears and a margin.
func hookRun(rc contract.Recipe) time.Duration {
	hookBudget := rc.Hooks.Timeout.D()
	if hookBudget <= 0 {
		hookBudget = 2 * time.Minute
	}
	return hookBudget*time.Duration(len(rc.Hooks.BeforeServe)+1) + 30*time.Second
}

// hooks runs the recipe's before_serve hooks (and clears) on every node
// at once, serveLane's second step; a node gone is waited for within
// the outage budget.
func (s *laneServe) hooks() error {
	rc, plan, nodes := s.in.Recipe, s.in.Plan, s.nodes
	if len(rc.Hooks.BeforeServe) == 0 && len(rc.Hooks.Clear) == 0 {
		return nil
	}
	run := hookRun(rc)
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, s.t.start("before_serve", n.Node))
	}
	hooks := make([]contract.BeforeServeResult, len(plan.Nodes))
	errs := perNode(s.ctx, s.fan(steps), func(ctx workflow.Context, i int) workflow.Future {
		n := plan.Nodes[i]
		return workflow.ExecuteActivity(summarize(nodeOpts(ctx, n.Node, s.in.Pickup.D(), callBudget{run: run, attempts: 1}), n.Node, n.Rank, "before_serve "+plan.Lane), na.BeforeServe, contract.BeforeServeInput{Lane: plan.Lane, Rank: n.Rank, Hooks: rc.Hooks, Staging: rc.Staging})
	}, func(ctx workflow.Context, i int, f workflow.Future) error { return f.Get(ctx, &hooks[i]) })
	for i, err := range errs {
		r := hooks[i]
		s.t.end(steps[i], fmt.Sprintf("%d hooks, cleared %d roots", len(r.Outputs), len(r.Cleared)), err)
		if err != nil {
			return nodeErr(nodes[i], "before_serve", err)
		}
		s.res.Hooks = append(s.res.Hooks, r)
	}
	return nil
}

// startRanks starts every rank; rank 0 waits for the others to join.
// Every start ends before a failure is returned: a stop racing a start
// still creating its container would leave that container running.
func (s *laneServe) startRanks() error {
	plan, nodes := s.in.Plan, s.nodes
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, s.t.start(fmt.Sprintf("start rank %d", n.Rank), n.Node))
	}
	ranks := make([]contract.StartRankResult, len(plan.Nodes))
	errs := perNode(s.ctx, s.fan(steps), func(ctx workflow.Context, i int) workflow.Future {
		return workflow.ExecuteActivity(summarize(nodeOpts(ctx, nodes[i], s.in.Pickup.D(), callBudget{run: 5 * time.Minute, attempts: 3}), nodes[i], plan.Nodes[i].Rank, "start "+plan.Lane), na.StartRank, contract.StartRankInput{Lane: plan.Lane, RecipeHash: plan.RecipeHash, Plan: plan.Nodes[i], ImageID: s.imageIDs[i]})
	}, func(ctx workflow.Context, i int, f workflow.Future) error { return f.Get(ctx, &ranks[i]) })
	var startErr error
	for i, err := range errs {
		s.t.end(steps[i], ranks[i].Name, err)
		if err != nil {
			if startErr == nil {
				startErr = nodeErr(nodes[i], "start", err)
			}
			continue
		}
		s.res.Ranks = append(s.res.Ranks, ranks[i])
	}
	return startErr
}

// probeLane probes the started lane (probe), unless --no-wait.
func (s *laneServe) probeLane() error {
	if s.in.NoWait {
		s.t.skip("probe", "", "--no-wait")
		return nil
	}
	return s.probe(s.ctx)
}

func hasPostHooks(p contract.LanePlan) bool {
	return len(p.PostExec)+len(p.PostCommands) > 0 || p.StopAfterPost
}

// DefaultPostHookTimeout bounds each post hook when the recipe's
// [hooks] timeout does not: a post command may be a whole batch job.
const DefaultPostHookTimeout = 30 * time.Minute

// postHooks runs once the lane answers, as sparkrun does: post_exec in
// the head's container, then post_commands on the control host, each list
// in order and fail-fast, each run once (a hook is not known to be
// idempotent); then, with stop_after_post, the lane is stopped. A failing
// hook is a HookFailed error: the caller stops the lane (Serve) or rolls
// back (Cutover) as for any other failure. With --no-wait they are
// skipped; runs recorded before versionPostHooks never ran them.
func (s *laneServe) postHooks() error {
	plan := s.in.Plan
	if !hasPostHooks(plan) {
		return nil
	}
	if s.in.NoWait {
		s.t.skip("post hooks", "", "--no-wait: they run once the lane answers")
		return nil
	}
	if workflow.GetVersion(s.ctx, versionPostHooks, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	per := s.in.Recipe.Hooks.Timeout.D()
	if per <= 0 {
		per = DefaultPostHookTimeout
	}
	if err := s.postExec(per); err != nil {
		return s.hookFailed("post_exec", err)
	}
	if err := s.postCommands(per); err != nil {
		return s.hookFailed("post_commands", err)
	}
	if plan.StopAfterPost {
		if err := stopLane(s.ctx, s.t, stopOf(s.in, plan.Lane, s.nodes)); err != nil {
			return s.hookFailed("stop_after_post", err)
		}
		s.res.StoppedAfterPost = true
	}
	return nil
}

// hookFailed is the HookFailed error of a post hook (what) of the lane.
func (s *laneServe) hookFailed(what string, err error) error {
	return temporal.NewNonRetryableApplicationError("lane "+s.in.Plan.Lane+" "+what+": "+errMessage(err), fault.HookFailed, err)
}

// postExec runs the plan's post_exec in the head's container, each
// command within per.
func (s *laneServe) postExec(per time.Duration) error {
	plan := s.in.Plan
	if len(plan.PostExec) == 0 {
		return nil
	}
	head := plan.Nodes[0]
	i := s.t.start("post_exec", head.Node)
	var r contract.PostHooksResult
	run := per*time.Duration(len(plan.PostExec)) + time.Minute
	err := workflow.ExecuteActivity(summarize(nodeOpts(s.ctx, head.Node, s.in.Pickup.D(), callBudget{run: run, attempts: 1}), head.Node, head.Rank, "post_exec "+plan.Lane), na.PostExec,
		contract.PostExecInput{Lane: plan.Lane, Container: head.ContainerName, Commands: plan.PostExec, Timeout: contract.Duration(per)}).Get(s.ctx, &r)
	s.t.end(i, fmt.Sprintf("%d commands", len(r.Outputs)), err)
	if err != nil {
		return err
	}
	s.res.PostExec = &r
	return nil
}

// postCommands runs the plan's post_commands on the control host, each
// within per.
func (s *laneServe) postCommands(per time.Duration) error {
	plan := s.in.Plan
	if len(plan.PostCommands) == 0 {
		return nil
	}
	i := s.t.start("post_commands", "")
	var r contract.PostHooksResult
	run := per*time.Duration(len(plan.PostCommands)) + time.Minute
	err := workflow.ExecuteActivity(controlOpts(s.ctx, run, 0, 1), ca.PostCommands,
		contract.PostCommandsInput{Lane: plan.Lane, Commands: plan.PostCommands, Timeout: contract.Duration(per)}).Get(s.ctx, &r)
	s.t.end(i, fmt.Sprintf("%d commands", len(r.Outputs)), err)
	if err != nil {
		return err
	}
	s.res.PostCommands = &r
	return nil
}

// runV0 is serveLane as recorded before versionServeOutageWait: a node
// whose worker is gone fails its step at once. Its steps keep the old
// commands verbatim so those histories replay.
func (s *laneServe) runV0() error {
	for _, step := range []func() error{s.imagesV0, s.hooksV0, s.startRanksV0} {
		if err := step(); err != nil {
			return err
		}
	}
	if s.in.NoWait {
		s.t.skip("probe", "", "--no-wait")
		return nil
	}
	return s.probe(s.ctx)
}

// imagesV0: the image present on every node.
func (s *laneServe) imagesV0() error {
	plan := s.in.Plan
	var futs []workflow.Future
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, s.t.start("image", n.Node))
		futs = append(futs, workflow.ExecuteActivity(summarize(nodeOpts(s.ctx, n.Node, s.in.Pickup.D(), callBudget{run: 2 * time.Minute, attempts: 3}), n.Node, n.Rank, "image "+n.Image.String()), na.EnsureImage, contract.EnsureImageInput{Image: n.Image}))
	}
	for i, f := range futs {
		var r contract.EnsureImageResult
		err := f.Get(s.ctx, &r)
		s.t.end(steps[i], r.ID, err)
		if err != nil {
			return nodeErr(plan.Nodes[i].Node, "image", err)
		}
		s.res.Image = append(s.res.Image, r)
	}
	return nil
}

// hooksV0: the before_serve hooks.
func (s *laneServe) hooksV0() error {
	rc, plan := s.in.Recipe, s.in.Plan
	if len(rc.Hooks.BeforeServe) == 0 && len(rc.Hooks.Clear) == 0 {
		return nil
	}
	run := hookRun(rc)
	var futs []workflow.Future
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, s.t.start("before_serve", n.Node))
		futs = append(futs, workflow.ExecuteActivity(summarize(nodeOpts(s.ctx, n.Node, s.in.Pickup.D(), callBudget{run: run, attempts: 1}), n.Node, n.Rank, "before_serve "+plan.Lane), na.BeforeServe, contract.BeforeServeInput{Lane: plan.Lane, Rank: n.Rank, Hooks: rc.Hooks, Staging: rc.Staging}))
	}
	for i, f := range futs {
		var r contract.BeforeServeResult
		err := f.Get(s.ctx, &r)
		s.t.end(steps[i], fmt.Sprintf("%d hooks, cleared %d roots", len(r.Outputs), len(r.Cleared)), err)
		if err != nil {
			return nodeErr(plan.Nodes[i].Node, "before_serve", err)
		}
		s.res.Hooks = append(s.res.Hooks, r)
	}
	return nil
}

// startRanksV0: every rank started; rank 0 waits for the others to join.
// Every start ends before a failure is returned (versionStartAllRanks;
// runs recorded before it returned at once).
func (s *laneServe) startRanksV0() error {
	plan := s.in.Plan
	var futs []workflow.Future
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, s.t.start(fmt.Sprintf("start rank %d", n.Rank), n.Node))
		futs = append(futs, workflow.ExecuteActivity(summarize(nodeOpts(s.ctx, n.Node, s.in.Pickup.D(), callBudget{run: 5 * time.Minute, attempts: 3}), n.Node, n.Rank, "start "+plan.Lane), na.StartRank, contract.StartRankInput{Lane: plan.Lane, RecipeHash: plan.RecipeHash, Plan: n}))
	}
	var startErr error
	for i, f := range futs {
		var r contract.StartRankResult
		err := f.Get(s.ctx, &r)
		s.t.end(steps[i], r.Name, err)
		if err != nil {
			if workflow.GetVersion(s.ctx, versionStartAllRanks, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				// Runs recorded before the change returned at once.
				return nodeErr(plan.Nodes[i].Node, "start", err)
			}
			if startErr == nil {
				startErr = nodeErr(plan.Nodes[i].Node, "start", err)
			}
			continue
		}
		s.res.Ranks = append(s.res.Ranks, r)
	}
	return startErr
}

// probe waits for the head to answer, then runs smoke prompts and the
// decode probe, with ctx (the keeper's heal cancels it when an "end"
// arrives). Retry policies carry "re-probe once before giving up".
func (s *laneServe) probe(ctx workflow.Context) error {
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	// A wrong answer is a permanent ProbeFailed at once; a head that does
	// not answer at all (a node's link down for a minute) is asked again
	// for about two minutes before the lane is called dead.
	pctx := controlOpts(ctx, 5*time.Minute, 0, probeAttempts)
	if err := s.smoke(ctx, pctx); err != nil {
		return err
	}
	return s.decodeProbe(ctx, pctx)
}

// waitReady waits for the head to answer, within the recipe's ready
// budget (DefaultReadyBudget).
func (s *laneServe) waitReady(ctx workflow.Context) error {
	rc, plan := s.in.Recipe, s.in.Plan
	budget := rc.Probe.Ready.D()
	if budget <= 0 {
		budget = DefaultReadyBudget
	}
	i := s.t.start("wait ready", plan.Nodes[0].Node)
	var ready contract.WaitReadyResult
	rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           contract.ControlQueue,
		StartToCloseTimeout: budget + time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5,
			NonRetryableErrorTypes: []string{fault.RankExited}},
	})
	err := workflow.ExecuteActivity(rctx, ca.WaitReady, contract.WaitReadyInput{Plan: plan, Path: rc.Probe.Path, Budget: contract.Duration(budget),
		LogSignatures: rc.Probe.LogSignatures, APIKeyEnv: rc.Probe.APIKeyEnv}).Get(ctx, &ready)
	s.t.end(i, fmt.Sprintf("ready after %.1fs", ready.Seconds), err)
	if err != nil {
		return temporal.NewNonRetryableApplicationError("lane "+plan.Lane+" did not become ready: "+errMessage(err), nonEmpty(errType(err), fault.ProbeFailed), err)
	}
	s.res.Ready, s.res.BaseURL = &ready, ready.BaseURL
	return nil
}

// smoke runs the recipe's smoke prompts (pctx: the probes' options).
func (s *laneServe) smoke(ctx, pctx workflow.Context) error {
	rc, ready := s.in.Recipe, s.res.Ready
	if len(rc.Probe.Smoke) == 0 {
		return nil
	}
	i := s.t.start("smoke", "")
	var sm contract.SmokeResult
	err := workflow.ExecuteActivity(pctx, ca.Smoke, contract.SmokeInput{BaseURL: ready.BaseURL, Model: ready.Model, Prompts: rc.Probe.Smoke, APIKeyEnv: rc.Probe.APIKeyEnv}).Get(ctx, &sm)
	s.t.end(i, fmt.Sprintf("%d prompts", len(sm.Answers)), err)
	if err != nil {
		return temporal.NewNonRetryableApplicationError("lane "+s.in.Plan.Lane+" smoke: "+errMessage(err), fault.ProbeFailed, err)
	}
	s.res.Smoke = &sm
	return nil
}

// decodeProbe measures decode (or, for an embedding or reranker lane,
// asks its own endpoint); the lane answers once it passed.
func (s *laneServe) decodeProbe(ctx, pctx workflow.Context) error {
	rc, plan, ready := s.in.Recipe, s.in.Plan, s.res.Ready
	i := s.t.start("decode probe", "")
	var dp contract.DecodeProbeResult
	err := workflow.ExecuteActivity(pctx, ca.DecodeProbe, contract.DecodeProbeInput{
		Lane: plan.Lane, BaseURL: ready.BaseURL, Model: ready.Model,
		PromptTokens: nonZero(rc.Probe.DecodePromptTokens, contract.DefaultDecodePromptTokens), MaxTokens: nonZero(rc.Probe.DecodeMaxTokens, contract.DefaultDecodeMaxTokens),
		ModelType: rc.Probe.ModelType, APIKeyEnv: rc.Probe.APIKeyEnv,
	}).Get(ctx, &dp)
	detail := fmt.Sprintf("decode %.1f tok/s, TTFT %.2fs", dp.DecodeTPS, dp.TTFTSeconds)
	if dp.Pool != nil {
		// An embedding or reranker lane: probed on its own endpoint.
		detail = fmt.Sprintf("%s answered in %.2fs", dp.Pool.Endpoint, dp.Pool.Seconds)
	}
	s.t.end(i, detail, err)
	if err != nil {
		return temporal.NewNonRetryableApplicationError("lane "+plan.Lane+" decode probe: "+errMessage(err), fault.ProbeFailed, err)
	}
	s.res.Decode = &dp
	s.res.Answers = true
	return nil
}

// probeAttempts spans a partition of a minute or so: retries back off
// 1, 2, 4, 8, 16, 30, 30 s (controlOpts) between requests that each time out.
const probeAttempts = 8

func nonZero(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

func nonEmpty(v, d string) string {
	if v != "" {
		return v
	}
	return d
}

// Stop stops and removes a lane's containers on every node and looks again:
// a stop that leaves anything running fails, naming it.
func Stop(ctx workflow.Context, in contract.StopInput) (contract.StopResult, error) {
	t := newTracker(ctx, "Stop", in.Lane)
	var ended []contract.KeeperStatus
	if keeperVersion(ctx) && workflow.GetInfo(ctx).ParentWorkflowExecution == nil {
		lane := in.Lane
		if in.All {
			lane = ""
		}
		var err error
		if ended, err = endKeepers(ctx, t, in.Nodes, lane, "stopped by "+workflow.GetInfo(ctx).WorkflowExecution.ID); err != nil {
			return contract.StopResult{}, err
		}
	}
	leases, lerr := holdNodes(ctx, t, contract.NodeLeaseHolder{Kind: contract.LeaseStop, Lane: in.Lane}, in.Nodes)
	if lerr != nil {
		return contract.StopResult{}, lerr
	}
	defer leases.release()
	if in.OutageBudget <= 0 {
		// A stop by hand does not wait for a node that is gone.
		in.OutageBudget = -1
	}
	gs := stopGateways{g: newGatewaySteps(ctx, t, "", in.Gateways, in.Pickup), in: in, lanes: stoppedLanes(in, ended)}
	drained := gs.before()
	res, err := stopNodes(ctx, t, in)
	res.Drained = drained
	gs.after(err)
	return res, err
}

// stopLane stops in.Lane on in.Nodes (stopNodes), for a run that only
// needs to know it worked.
func stopLane(ctx workflow.Context, t *tracker, in contract.StopInput) error {
	_, err := stopNodes(ctx, t, in)
	return err
}

// stopNodes stops in.Lane (or, All, every lane) on every node of in at
// once; a node whose worker is gone is waited for within in.OutageBudget
// (0: DefaultOutageBudget; negative: not at all). Runs recorded before
// versionServeOutageWait fail its stop at once, with the same commands.
func stopNodes(ctx workflow.Context, t *tracker, in contract.StopInput) (contract.StopResult, error) {
	var res contract.StopResult
	var steps []int
	nodes, budget := in.Nodes, in.OutageBudget.D()
	label := "stop " + in.Lane
	if in.All {
		label = "stop all"
	}
	for _, n := range nodes {
		steps = append(steps, t.start(label, n))
	}
	results := make([]contract.StopLaneResult, len(nodes))
	wait := serveWaits(ctx) && budget >= 0
	errs := perNode(ctx, nodeFan{t: t, wait: wait, budget: budget, steps: steps, nodes: nodes}, func(ctx workflow.Context, i int) workflow.Future {
		return workflow.ExecuteActivity(summarize(nodeOpts(ctx, nodes[i], in.Pickup.D(), callBudget{run: 3 * time.Minute, attempts: 3}), nodes[i], -1, label), na.StopLane, contract.StopLaneInput{Lane: in.Lane, All: in.All, Timeout: contract.Duration(30 * time.Second)})
	}, func(ctx workflow.Context, i int, f workflow.Future) error { return f.Get(ctx, &results[i]) })
	var firstErr error
	for i, err := range errs {
		t.end(steps[i], fmt.Sprintf("%d stopped", len(results[i].Stopped)), err)
		if err != nil {
			if firstErr == nil {
				firstErr = nodeErr(nodes[i], label, err)
			}
			continue
		}
		res.Nodes = append(res.Nodes, results[i])
	}
	return res, firstErr
}

// Probe checks a serving lane: wait ready, smoke prompts, decode probe
// (starter probe). It starts nothing.
func Probe(ctx workflow.Context, in contract.ServeInput) (contract.ServeResult, error) {
	s := newLaneServe(ctx, newTracker(ctx, "Probe", in.Plan.Lane), in)
	err := s.probe(ctx)
	return s.res, err
}
