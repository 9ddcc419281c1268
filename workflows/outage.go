package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/staging"
)

// DefaultOutageBudget is how long a run waits for a node whose worker went
// away (a reboot, an upgrade) before it fails naming the node: a node
// reboots in minutes, and a multi-hour stage must not roll back for that.
const DefaultOutageBudget = 30 * time.Minute

// nodeRecheck is how often a run waiting for a node asks whether its
// worker polls again.
const nodeRecheck = 10 * time.Second

// versionOutageWait gates the wait-for-node behaviour of node steps: runs
// recorded before it fail at once when a node's worker is gone.
const versionOutageWait = "node-outage-wait"

// StepWaiting marks a step waiting for its node to come back.
const StepWaiting = "waiting"

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

// lastProgress is the staging progress the last attempt heartbeated before
// its node went away, if the error carries it.
func lastProgress(err error) *staging.Progress {
	var to *temporal.TimeoutError
	if errors.As(err, &to) && to.HasLastHeartbeatDetails() {
		var p staging.Progress
		if to.LastHeartbeatDetails(&p) == nil && p.BytesTotal+p.RowsTotal > 0 {
			return &p
		}
	}
	return nil
}

// onNode runs call, a step pinned to node's queue. When the node's worker
// is gone (pickup or heartbeat timeout), it waits for a worker to poll
// node.NAME again — showing "waiting for node N (down 2m10s)" on the step
// — and runs call again, until budget is spent since the node went away;
// then it fails naming the node and how long it was gone. Runs recorded
// before the wait existed fail at once, as they did.
func onNode(ctx workflow.Context, t *tracker, step int, node string, budget time.Duration, call func() error) error {
	if workflow.GetVersion(ctx, versionOutageWait, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return call()
	}
	if budget <= 0 {
		budget = DefaultOutageBudget
	}
	pctx := controlOpts(ctx, 30*time.Second, 0, 3)
	var since time.Time // when the node went away; kept while it never picks up
	for {
		err := call()
		if err == nil || !nodeGone(err) {
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
						node, down.Round(time.Second), budget, NodeQueue(node), node),
					"NodeUnreachable", err)
			}
			t.wait(step, node, since, fmt.Sprintf("waiting for node %s (down %s, budget %s)", node, down.Round(time.Second), budget))
			var p activities.NodePollingResult
			if perr := workflow.ExecuteActivity(pctx, ca.NodePolling, activities.NodePollingInput{Node: node}).Get(ctx, &p); perr == nil && p.Polling {
				break
			}
			if serr := workflow.Sleep(ctx, nodeRecheck); serr != nil {
				return serr
			}
		}
		t.resume(step)
	}
}
