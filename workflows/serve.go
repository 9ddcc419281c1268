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
func Serve(ctx workflow.Context, in contract.ServeInput) (contract.ServeResult, error) {
	t := newTracker(ctx, "Serve", in.Plan.Lane)
	keeper := keeperVersion(ctx) && workflow.GetInfo(ctx).ParentWorkflowExecution == nil
	var ended []contract.KeeperStatus
	if keeper {
		var err error
		if ended, err = endKeepers(ctx, t, planNodes(in.Plan), "", "handed over to "+contract.UpID(in.Plan.Cluster)+" (lane "+in.Plan.Lane+")"); err != nil {
			return contract.ServeResult{Lane: in.Plan.Lane}, err
		}
	}
	leases, lerr := holdNodes(ctx, t, contract.NodeLeaseHolder{Kind: contract.LeaseUp, Lane: in.Plan.Lane, Cluster: in.Plan.Cluster}, planNodes(in.Plan))
	if lerr != nil {
		// Nothing was touched: every keeper ended keeps again.
		keepAgain(ctx, t, ended, "")
		return contract.ServeResult{Lane: in.Plan.Lane}, lerr
	}
	defer leases.release()
	res, err := serveLane(ctx, t, in.Recipe, in.Plan, in.NoWait, in.Pickup.D(), in.OutageBudget.D())
	if err != nil {
		dctx, cancel := workflow.NewDisconnectedContext(ctx)
		defer cancel()
		if serr := stopLane(dctx, t, in.Plan.Lane, planNodes(in.Plan), in.Pickup.D(), in.OutageBudget.D()); serr != nil {
			return res, temporal.NewNonRetryableApplicationError(errMessage(err)+"; and stopping the half-started lane failed: "+errMessage(serr), errType(err), err)
		}
	}
	if err != nil {
		// The other lanes' keepers keep again; this lane's was stopped.
		keepAgain(ctx, t, ended, in.Plan.Lane)
	}
	if err == nil && keeper {
		if in.NoWait {
			t.skip("keep", "", "--no-wait: the lane is not known to answer; `starter up` it to keep it")
		} else {
			startKeeper(ctx, t, contract.KeeperInput{
				Cluster: in.Plan.Cluster, Recipe: in.Recipe, Plan: in.Plan, Policy: keepPolicy(in.Recipe, in.Keep, in.Grace),
				Pickup: in.Pickup, OutageBudget: in.OutageBudget, StartedBy: contract.UpID(in.Plan.Cluster),
			})
		}
	}
	return res, err
}

func planNodes(p contract.LanePlan) []string {
	out := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		out[i] = n.Node
	}
	return out
}

// serveLane is Serve's body, shared with Cutover and its rollback. Its node
// steps wait for a node that went away within budget (runs recorded before
// versionServeOutageWait fail them at once).
func serveLane(ctx workflow.Context, t *tracker, rc contract.Recipe, plan contract.LanePlan, noWait bool, pickup, budget time.Duration) (contract.ServeResult, error) {
	if !serveWaits(ctx) {
		return serveLaneV0(ctx, t, rc, plan, noWait, pickup)
	}
	res := contract.ServeResult{Lane: plan.Lane}
	nodes := planNodes(plan)
	imageIDs, err := serveImages(ctx, t, rc, plan, pickup, budget, &res)
	if err != nil {
		return res, err
	}
	// before_serve hooks.
	if err := serveHooks(ctx, t, rc, plan, pickup, budget, &res); err != nil {
		return res, err
	}
	// Start every rank; rank 0 waits for the others to join. Every start
	// ends before a failure is returned: a stop racing a start still
	// creating its container would leave that container running.
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, t.start(fmt.Sprintf("start rank %d", n.Rank), n.Node))
	}
	ranks := make([]contract.StartRankResult, len(plan.Nodes))
	errs := perNode(ctx, nodeFan{t: t, wait: true, budget: budget, steps: steps, nodes: nodes}, func(ctx workflow.Context, i int) workflow.Future {
		return workflow.ExecuteActivity(summarize(nodeOpts(ctx, nodes[i], pickup, callBudget{run: 5 * time.Minute, attempts: 3}), nodes[i], plan.Nodes[i].Rank, "start "+plan.Lane), na.StartRank, contract.StartRankInput{Lane: plan.Lane, RecipeHash: plan.RecipeHash, Plan: plan.Nodes[i], ImageID: imageIDs[i]})
	}, func(ctx workflow.Context, i int, f workflow.Future) error { return f.Get(ctx, &ranks[i]) })
	var startErr error
	for i, err := range errs {
		t.end(steps[i], ranks[i].Name, err)
		if err != nil {
			if startErr == nil {
				startErr = nodeErr(nodes[i], "start", err)
			}
			continue
		}
		res.Ranks = append(res.Ranks, ranks[i])
	}
	if startErr != nil {
		return res, startErr
	}
	if noWait {
		t.skip("probe", "", "--no-wait")
		if hasPostHooks(plan) {
			t.skip("post hooks", "", "--no-wait: they run once the lane answers")
		}
		return res, nil
	}
	res, err = probeLane(ctx, t, rc, plan, res)
	if err != nil || !hasPostHooks(plan) {
		return res, err
	}
	if workflow.GetVersion(ctx, versionPostHooks, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return res, nil
	}
	return postHooks(ctx, t, rc, plan, pickup, budget, res)
}

// serveImages is serveLane's image step: the image present on every
// node. Since versionServeImageID a pinned repo:tag@sha256:D found on a
// node only under its tag (moved there: `docker load` sets no repo digest)
// is accepted with the ID the nodes carrying the digest have, and every
// rank of a pinned image is created from the ID its node resolved (the
// returned per-node IDs; "" where the reference itself is used).
func serveImages(ctx workflow.Context, t *tracker, rc contract.Recipe, plan contract.LanePlan, pickup, budget time.Duration, res *contract.ServeResult) ([]string, error) {
	nodes := planNodes(plan)
	resolve := workflow.GetVersion(ctx, versionServeImageID, workflow.DefaultVersion, 1) == 1
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, t.start("image", n.Node))
	}
	found := make([]contract.EnsureImageResult, len(plan.Nodes))
	errs := perNode(ctx, nodeFan{t: t, wait: true, budget: budget, steps: steps, nodes: nodes}, func(ctx workflow.Context, i int) workflow.Future {
		// BuildHint marshals build_args with encoding/json, which writes map
		// keys sorted: the same recipe gives the same text on every replay.
		build := rc.BuildHint() //workflowcheck:ignore
		return workflow.ExecuteActivity(summarize(nodeOpts(ctx, nodes[i], pickup, callBudget{run: 2 * time.Minute, attempts: 3}), nodes[i], plan.Nodes[i].Rank, "image "+plan.Nodes[i].Image), na.EnsureImage,
			contract.EnsureImageInput{Image: plan.Nodes[i].Image, Build: build, Resolve: resolve})
	}, func(ctx workflow.Context, i int, f workflow.Future) error { return f.Get(ctx, &found[i]) })
	for i, err := range errs {
		t.end(steps[i], found[i].ID, err)
		if err != nil {
			return nil, nodeErr(nodes[i], "image", err)
		}
		res.Image = append(res.Image, found[i])
	}
	ids := make([]string, len(plan.Nodes))
	if !resolve {
		return ids, nil
	}
	if err := checkPinned(plan, found); err != nil {
		return nil, err
	}
	for i, n := range plan.Nodes {
		if ref, err := contract.ParseImageRef(n.Image); err == nil && ref.Digest != "" {
			ids[i] = found[i].ID
		}
	}
	return ids, nil
}

// checkPinned refuses a node that has a pinned image only under its tag
// with another ID than the nodes carrying the digest (images.MakePlan's
// rule, the same as the stage's image step).
func checkPinned(plan contract.LanePlan, found []contract.EnsureImageResult) error {
	byImage := map[string][]contract.ImageInventory{}
	var order []string
	for i, n := range plan.Nodes {
		if _, ok := byImage[n.Image]; !ok {
			order = append(order, n.Image)
		}
		byImage[n.Image] = append(byImage[n.Image], contract.ImageInventory{Node: n.Node, Present: true, ID: found[i].ID, Unpinned: found[i].Unpinned})
	}
	for _, img := range order {
		ref, err := contract.ParseImageRef(img)
		if err != nil || ref.Digest == "" {
			continue
		}
		if _, err := contract.PlanImage(ref, byImage[img]); err != nil {
			return permanent(err)
		}
	}
	return nil
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
// back (Cutover) as for any other failure.
func postHooks(ctx workflow.Context, t *tracker, rc contract.Recipe, plan contract.LanePlan, pickup, budget time.Duration, res contract.ServeResult) (contract.ServeResult, error) {
	per := rc.Hooks.Timeout.D()
	if per <= 0 {
		per = DefaultPostHookTimeout
	}
	fail := func(what string, err error) (contract.ServeResult, error) {
		return res, temporal.NewNonRetryableApplicationError("lane "+plan.Lane+" "+what+": "+errMessage(err), fault.HookFailed, err)
	}
	head := plan.Nodes[0]
	if len(plan.PostExec) > 0 {
		i := t.start("post_exec", head.Node)
		var r contract.PostHooksResult
		run := per*time.Duration(len(plan.PostExec)) + time.Minute
		err := workflow.ExecuteActivity(summarize(nodeOpts(ctx, head.Node, pickup, callBudget{run: run, attempts: 1}), head.Node, head.Rank, "post_exec "+plan.Lane), na.PostExec,
			contract.PostExecInput{Lane: plan.Lane, Container: head.ContainerName, Commands: plan.PostExec, Timeout: contract.Duration(per)}).Get(ctx, &r)
		t.end(i, fmt.Sprintf("%d commands", len(r.Outputs)), err)
		if err != nil {
			return fail("post_exec", err)
		}
		res.PostExec = &r
	}
	if len(plan.PostCommands) > 0 {
		i := t.start("post_commands", "")
		var r contract.PostHooksResult
		run := per*time.Duration(len(plan.PostCommands)) + time.Minute
		err := workflow.ExecuteActivity(controlOpts(ctx, run, 0, 1), ca.PostCommands,
			contract.PostCommandsInput{Lane: plan.Lane, Commands: plan.PostCommands, Timeout: contract.Duration(per)}).Get(ctx, &r)
		t.end(i, fmt.Sprintf("%d commands", len(r.Outputs)), err)
		if err != nil {
			return fail("post_commands", err)
		}
		res.PostCommands = &r
	}
	if plan.StopAfterPost {
		if err := stopLane(ctx, t, plan.Lane, planNodes(plan), pickup, budget); err != nil {
			return fail("stop_after_post", err)
		}
		res.StoppedAfterPost = true
	}
	return res, nil
}

// serveHooks runs the recipe's before_serve hooks (and clears) on every
// node at once, serveLane's second step; a node gone is waited for within
// budget.
func serveHooks(ctx workflow.Context, t *tracker, rc contract.Recipe, plan contract.LanePlan, pickup, budget time.Duration, res *contract.ServeResult) error {
	if len(rc.Hooks.BeforeServe) == 0 && len(rc.Hooks.Clear) == 0 {
		return nil
	}
	nodes := planNodes(plan)
	hookBudget := rc.Hooks.Timeout.D()
	if hookBudget <= 0 {
		hookBudget = 2 * time.Minute
	}
	run := hookBudget*time.Duration(len(rc.Hooks.BeforeServe)+1) + 30*time.Second
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, t.start("before_serve", n.Node))
	}
	hooks := make([]contract.BeforeServeResult, len(plan.Nodes))
	errs := perNode(ctx, nodeFan{t: t, wait: true, budget: budget, steps: steps, nodes: nodes}, func(ctx workflow.Context, i int) workflow.Future {
		n := plan.Nodes[i]
		return workflow.ExecuteActivity(summarize(nodeOpts(ctx, n.Node, pickup, callBudget{run: run, attempts: 1}), n.Node, n.Rank, "before_serve "+plan.Lane), na.BeforeServe, contract.BeforeServeInput{Lane: plan.Lane, Rank: n.Rank, Hooks: rc.Hooks, Staging: rc.Staging})
	}, func(ctx workflow.Context, i int, f workflow.Future) error { return f.Get(ctx, &hooks[i]) })
	for i, err := range errs {
		r := hooks[i]
		t.end(steps[i], fmt.Sprintf("%d hooks, cleared %d roots", len(r.Outputs), len(r.Cleared)), err)
		if err != nil {
			return nodeErr(nodes[i], "before_serve", err)
		}
		res.Hooks = append(res.Hooks, r)
	}
	return nil
}

// serveLaneV0 is serveLane as recorded before versionServeOutageWait:
// a node whose worker is gone fails its step at once. Kept verbatim so
// those histories replay.
func serveLaneV0(ctx workflow.Context, t *tracker, rc contract.Recipe, plan contract.LanePlan, noWait bool, pickup time.Duration) (contract.ServeResult, error) {
	res := contract.ServeResult{Lane: plan.Lane}
	// Image present on every node.
	var futs []workflow.Future
	var steps []int
	for _, n := range plan.Nodes {
		steps = append(steps, t.start("image", n.Node))
		futs = append(futs, workflow.ExecuteActivity(summarize(nodeOpts(ctx, n.Node, pickup, callBudget{run: 2 * time.Minute, attempts: 3}), n.Node, n.Rank, "image "+n.Image), na.EnsureImage, contract.EnsureImageInput{Image: n.Image}))
	}
	for i, f := range futs {
		var r contract.EnsureImageResult
		err := f.Get(ctx, &r)
		t.end(steps[i], r.ID, err)
		if err != nil {
			return res, nodeErr(plan.Nodes[i].Node, "image", err)
		}
		res.Image = append(res.Image, r)
	}
	// before_serve hooks.
	if len(rc.Hooks.BeforeServe) > 0 || len(rc.Hooks.Clear) > 0 {
		hookBudget := rc.Hooks.Timeout.D()
		if hookBudget <= 0 {
			hookBudget = 2 * time.Minute
		}
		run := hookBudget*time.Duration(len(rc.Hooks.BeforeServe)+1) + 30*time.Second
		futs, steps = nil, nil
		for _, n := range plan.Nodes {
			steps = append(steps, t.start("before_serve", n.Node))
			futs = append(futs, workflow.ExecuteActivity(summarize(nodeOpts(ctx, n.Node, pickup, callBudget{run: run, attempts: 1}), n.Node, n.Rank, "before_serve "+plan.Lane), na.BeforeServe, contract.BeforeServeInput{Lane: plan.Lane, Rank: n.Rank, Hooks: rc.Hooks, Staging: rc.Staging}))
		}
		for i, f := range futs {
			var r contract.BeforeServeResult
			err := f.Get(ctx, &r)
			t.end(steps[i], fmt.Sprintf("%d hooks, cleared %d roots", len(r.Outputs), len(r.Cleared)), err)
			if err != nil {
				return res, nodeErr(plan.Nodes[i].Node, "before_serve", err)
			}
			res.Hooks = append(res.Hooks, r)
		}
	}
	// Start every rank; rank 0 waits for the others to join. Every start
	// ends before a failure is returned: a stop racing a start still
	// creating its container would leave that container running.
	futs, steps = nil, nil
	for _, n := range plan.Nodes {
		steps = append(steps, t.start(fmt.Sprintf("start rank %d", n.Rank), n.Node))
		futs = append(futs, workflow.ExecuteActivity(summarize(nodeOpts(ctx, n.Node, pickup, callBudget{run: 5 * time.Minute, attempts: 3}), n.Node, n.Rank, "start "+plan.Lane), na.StartRank, contract.StartRankInput{Lane: plan.Lane, RecipeHash: plan.RecipeHash, Plan: n}))
	}
	var startErr error
	for i, f := range futs {
		var r contract.StartRankResult
		err := f.Get(ctx, &r)
		t.end(steps[i], r.Name, err)
		if err != nil {
			if workflow.GetVersion(ctx, versionStartAllRanks, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				// Runs recorded before the change returned at once.
				return res, nodeErr(plan.Nodes[i].Node, "start", err)
			}
			if startErr == nil {
				startErr = nodeErr(plan.Nodes[i].Node, "start", err)
			}
			continue
		}
		res.Ranks = append(res.Ranks, r)
	}
	if startErr != nil {
		return res, startErr
	}
	if noWait {
		t.skip("probe", "", "--no-wait")
		return res, nil
	}
	return probeLane(ctx, t, rc, plan, res)
}

// probeLane waits for the head to answer, then runs smoke prompts and the
// decode probe. Retry policies carry "re-probe once before giving up".
func probeLane(ctx workflow.Context, t *tracker, rc contract.Recipe, plan contract.LanePlan, res contract.ServeResult) (contract.ServeResult, error) {
	budget := rc.Probe.Ready.D()
	if budget <= 0 {
		budget = DefaultReadyBudget
	}
	i := t.start("wait ready", plan.Nodes[0].Node)
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
	t.end(i, fmt.Sprintf("ready after %.1fs", ready.Seconds), err)
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError("lane "+plan.Lane+" did not become ready: "+errMessage(err), nonEmpty(errType(err), fault.ProbeFailed), err)
	}
	res.Ready, res.BaseURL = &ready, ready.BaseURL
	// A wrong answer is a permanent ProbeFailed at once; a head that does
	// not answer at all (a node's link down for a minute) is asked again
	// for about two minutes before the lane is called dead.
	pctx := controlOpts(ctx, 5*time.Minute, 0, probeAttempts)
	if len(rc.Probe.Smoke) > 0 {
		i = t.start("smoke", "")
		var sm contract.SmokeResult
		err = workflow.ExecuteActivity(pctx, ca.Smoke, contract.SmokeInput{BaseURL: ready.BaseURL, Model: ready.Model, Prompts: rc.Probe.Smoke, APIKeyEnv: rc.Probe.APIKeyEnv}).Get(ctx, &sm)
		t.end(i, fmt.Sprintf("%d prompts", len(sm.Answers)), err)
		if err != nil {
			return res, temporal.NewNonRetryableApplicationError("lane "+plan.Lane+" smoke: "+errMessage(err), fault.ProbeFailed, err)
		}
		res.Smoke = &sm
	}
	i = t.start("decode probe", "")
	var dp contract.DecodeProbeResult
	err = workflow.ExecuteActivity(pctx, ca.DecodeProbe, contract.DecodeProbeInput{
		Lane: plan.Lane, BaseURL: ready.BaseURL, Model: ready.Model,
		PromptTokens: nonZero(rc.Probe.DecodePromptTokens, contract.DefaultDecodePromptTokens), MaxTokens: nonZero(rc.Probe.DecodeMaxTokens, contract.DefaultDecodeMaxTokens),
		ModelType: rc.Probe.ModelType, APIKeyEnv: rc.Probe.APIKeyEnv,
	}).Get(ctx, &dp)
	detail := fmt.Sprintf("decode %.1f tok/s, TTFT %.2fs", dp.DecodeTPS, dp.TTFTSeconds)
	if dp.Pool != nil {
		// An embedding or reranker lane: probed on its own endpoint.
		detail = fmt.Sprintf("%s answered in %.2fs", dp.Pool.Endpoint, dp.Pool.Seconds)
	}
	t.end(i, detail, err)
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError("lane "+plan.Lane+" decode probe: "+errMessage(err), fault.ProbeFailed, err)
	}
	res.Decode = &dp
	res.Answers = true
	return res, nil
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
	if keeperVersion(ctx) && workflow.GetInfo(ctx).ParentWorkflowExecution == nil {
		lane := in.Lane
		if in.All {
			lane = ""
		}
		if _, err := endKeepers(ctx, t, in.Nodes, lane, "stopped by "+workflow.GetInfo(ctx).WorkflowExecution.ID); err != nil {
			return contract.StopResult{}, err
		}
	}
	leases, lerr := holdNodes(ctx, t, contract.NodeLeaseHolder{Kind: contract.LeaseStop, Lane: in.Lane}, in.Nodes)
	if lerr != nil {
		return contract.StopResult{}, lerr
	}
	defer leases.release()
	budget := in.OutageBudget
	if budget <= 0 {
		budget = -1
	}
	return stopNodes(ctx, t, in.Lane, in.Nodes, in.All, in.Pickup.D(), budget.D())
}

func stopLane(ctx workflow.Context, t *tracker, lane string, nodes []string, pickup, budget time.Duration) error {
	_, err := stopNodes(ctx, t, lane, nodes, false, pickup, budget)
	return err
}

// stopNodes stops lane on every node at once; a node whose worker is gone
// is waited for within budget (0: DefaultOutageBudget; negative: not at
// all). Runs recorded before versionServeOutageWait fail its stop at once,
// with the same commands.
func stopNodes(ctx workflow.Context, t *tracker, lane string, nodes []string, all bool, pickup, budget time.Duration) (contract.StopResult, error) {
	var res contract.StopResult
	var steps []int
	label := "stop " + lane
	if all {
		label = "stop all"
	}
	for _, n := range nodes {
		steps = append(steps, t.start(label, n))
	}
	results := make([]contract.StopLaneResult, len(nodes))
	wait := serveWaits(ctx) && budget >= 0
	errs := perNode(ctx, nodeFan{t: t, wait: wait, budget: budget, steps: steps, nodes: nodes}, func(ctx workflow.Context, i int) workflow.Future {
		return workflow.ExecuteActivity(summarize(nodeOpts(ctx, nodes[i], pickup, callBudget{run: 3 * time.Minute, attempts: 3}), nodes[i], -1, label), na.StopLane, contract.StopLaneInput{Lane: lane, All: all, Timeout: contract.Duration(30 * time.Second)})
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
	t := newTracker(ctx, "Probe", in.Plan.Lane)
	return probeLane(ctx, t, in.Recipe, in.Plan, contract.ServeResult{Lane: in.Plan.Lane})
}
