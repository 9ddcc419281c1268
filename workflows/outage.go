package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
)

// nodeRecheck is how often a run waiting for a node asks whether its
// worker polls again.
const nodeRecheck = 10 * time.Second

// versionOutageWait gates the wait-for-node behaviour of node steps: runs
// recorded before it fail at once when a node's worker is gone.
const versionOutageWait = "node-outage-wait"

// nodeGone reports an error that means "no worker of that node is there":
// nobody picked the activity up, or the worker stopped heartbeating.
func nodeGone(err error) bool {
	var to *temporal.TimeoutError
	if !errors.As(err, &to) {
		return false
	}
	switch to.TimeoutType() {
	case enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, enumspb.TIMEOUT_TYPE_HEARTBEAT:
		return true
	}
	return false
}

// noPickup reports an error that means "no worker polls the queue": the
// activity was never picked up within its schedule-to-start timeout.
func noPickup(err error) bool {
	var to *temporal.TimeoutError
	return errors.As(err, &to) && to.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START
}

// noWorkerText says which queue nobody polls and how to start its worker.
func noWorkerText(node string) string {
	return fmt.Sprintf("no worker on %s — nothing was verified there; start it with 'worker node --node %s' on %s, or install it with 'starter fleet install %s'",
		contract.NodeQueue(node), node, node, node)
}

// lastProgress is the staging progress the last attempt heartbeated before
// its node went away, if the error carries it.
func lastProgress(err error) *contract.StageProgress {
	var to *temporal.TimeoutError
	if errors.As(err, &to) && to.HasLastHeartbeatDetails() {
		var p contract.StageProgress
		if to.LastHeartbeatDetails(&p) == nil && p.BytesTotal+p.RowsTotal > 0 {
			return &p
		}
	}
	return nil
}

// nodeStep is a tracked step (t's step) pinned to node's queue, and how
// long the node may be gone while it runs (0: DefaultOutageBudget).
type nodeStep struct {
	t      *tracker
	step   int
	node   string
	budget time.Duration
	// docker: a node whose Docker does not answer (DockerUnreachable: a
	// daemon restarting, a node half way through a reboot) is waited for
	// like one whose worker is gone (the image step's calls).
	docker bool
}

// onNode runs call, a step pinned to s.node's queue. When the node's
// worker is gone (pickup or heartbeat timeout), it waits for a worker to
// poll node.NAME again — showing "waiting for node N (down 2m10s)" on the
// step — and runs call again, until the budget is spent since the node
// went away; then it fails naming the node and how long it was gone. Runs
// recorded before the wait existed fail at once, as they did.
func onNode(ctx workflow.Context, s nodeStep, call func() error) error {
	if workflow.GetVersion(ctx, versionOutageWait, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return call()
	}
	return waitForNode(ctx, s, call)
}

// waitForNode is onNode's loop without its version gate: callers that gate
// it themselves (the serve-phase steps, behind versionServeOutageWait) run
// it directly.
func waitForNode(ctx workflow.Context, s nodeStep, call func() error) error {
	budget, node := s.budget, s.node
	if budget <= 0 {
		budget = contract.DefaultOutageBudget
	}
	pctx := controlOpts(ctx, 30*time.Second, 0, 3)
	var since time.Time // when the node went away; kept while it never picks up
	for {
		err := call()
		dockerDown := s.docker && errType(err) == contract.DockerUnreachable
		if err == nil || !(nodeGone(err) || dockerDown) {
			return err
		}
		var to *temporal.TimeoutError
		if since.IsZero() || (errors.As(err, &to) && to.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT) {
			// First loss, or the node came back, ran the step and went
			// away again: the clock starts now.
			since = workflow.Now(ctx)
		}
		for {
			down := workflow.Now(ctx).Sub(since)
			if down >= budget {
				return temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("node %s was gone for %s, past its outage budget of %s: no worker polled %s (start it: 'starter fleet status', or 'worker node --node %s' on the node)",
						node, down.Round(time.Second), budget, contract.NodeQueue(node), node),
					"NodeUnreachable", err)
			}
			s.t.wait(s.step, node, since, fmt.Sprintf("waiting for node %s (down %s, budget %s)", node, down.Round(time.Second), budget))
			if dockerDown {
				// Its worker polls; its Docker does not answer yet.
				if serr := workflow.Sleep(ctx, nodeRecheck); serr != nil {
					return serr
				}
				break
			}
			var p contract.NodePollingResult
			if perr := workflow.ExecuteActivity(summarize(pctx, node, -1, "is a worker polling again?"), ca.NodePolling, contract.NodePollingInput{Node: node, DownSeconds: down.Seconds()}).Get(ctx, &p); perr == nil && p.Polling {
				break
			}
			if serr := workflow.Sleep(ctx, nodeRecheck); serr != nil {
				return serr
			}
		}
		s.t.resume(s.step, node)
	}
}

// versionServeOutageWait gates the wait-for-node behaviour of the serve
// phase's node steps (image, before_serve hooks, start rank, stop): runs
// recorded before it fail those steps at once when a node's worker is gone.
const versionServeOutageWait = "serve-node-outage-wait"

// versionVerifyOutageWait gates the wait-for-node behaviour of Cutover's
// verify step (every block on every node, verify-only): runs recorded
// before it fail that step at once when a node's worker is gone.
const versionVerifyOutageWait = "cutover-verify-outage-wait"

// serveWaits reports whether this run's serve-phase node steps wait for a
// node that went away (see versionServeOutageWait).
func serveWaits(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionServeOutageWait, workflow.DefaultVersion, 1) >= 1
}

// nodeFan is one node-pinned step per node, run all at once (perNode):
// steps[i] is the tracked step of nodes[i]; with wait a node that went
// away is waited for within budget (waitForNode).
type nodeFan struct {
	t      *tracker
	wait   bool
	budget time.Duration
	steps  []int
	nodes  []string
	// docker: a node whose Docker does not answer is waited for too
	// (nodeStep.docker).
	docker bool
}

// perNode runs fan's steps, one per node, all at once, and returns each
// one's error in node order. call(ctx, i) starts node i's activity and
// get(ctx, i, f) waits for and decodes its result (both with the context
// they are given: the node's coroutine's, on the waiting path). Without
// wait it is exactly the old command sequence (every activity scheduled,
// then each awaited in order); with wait each node's step runs in its own
// coroutine under waitForNode, so a node whose worker is gone (a reboot,
// an upgrade) is waited for within budget — its step shows "waiting for
// node N (down …)" — while the others go on.
func perNode(ctx workflow.Context, fan nodeFan,
	call func(ctx workflow.Context, i int) workflow.Future, get func(ctx workflow.Context, i int, f workflow.Future) error) []error {
	nodes := fan.nodes
	errs := make([]error, len(nodes))
	if !fan.wait {
		futs := make([]workflow.Future, len(nodes))
		for i := range nodes {
			futs[i] = call(ctx, i)
		}
		for i, f := range futs {
			errs[i] = get(ctx, i, f)
		}
		return errs
	}
	done := make([]workflow.Settable, len(nodes))
	futs := make([]workflow.Future, len(nodes))
	for i := range nodes {
		futs[i], done[i] = workflow.NewFuture(ctx)
		step := nodeStep{t: fan.t, step: fan.steps[i], node: nodes[i], budget: fan.budget, docker: fan.docker}
		workflow.Go(ctx, func(gctx workflow.Context) {
			done[i].Set(nil, waitForNode(gctx, step, func() error { return get(gctx, i, call(gctx, i)) }))
		})
	}
	for i, f := range futs {
		errs[i] = f.Get(ctx, nil)
	}
	return errs
}
