package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
)

// Typed nil pointers through which workflows name activities (the methods
// are registered on real values by the workers).
var (
	na *activities.NodeActivities
	ca *activities.ControlActivities
)

// callBudget is one activity's budget: how long an attempt may run, its
// heartbeat timeout (0: none) and its attempts (0: unlimited).
type callBudget struct {
	run, heartbeat time.Duration
	attempts       int32
}

// nodeOpts pins activities to node's queue. A node whose worker is not
// polling fails fast on ScheduleToStart instead of hanging.
func nodeOpts(ctx workflow.Context, node string, pickup time.Duration, b callBudget) workflow.Context {
	if pickup <= 0 {
		pickup = contract.DefaultPickup
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              contract.NodeQueue(node),
		ScheduleToStartTimeout: pickup,
		StartToCloseTimeout:    b.run,
		HeartbeatTimeout:       b.heartbeat,
		RetryPolicy:            backoff(b.attempts),
	})
}

// summarize sets the one-line summary the web UI and `temporal workflow
// describe` show beside an activity: which node (and rank, -1 for none) it
// runs for and what it does, so a row of eight identical VerifyBlock
// events reads "dgx3 rank 2: verify mia/weights". It is user metadata, not
// part of the command a replay matches, so it needs no version gate.
func summarize(ctx workflow.Context, node string, rank int, what string) workflow.Context {
	o := workflow.GetActivityOptions(ctx)
	if rank >= 0 {
		o.Summary = fmt.Sprintf("%s rank %d: %s", node, rank, what)
	} else {
		o.Summary = node + ": " + what
	}
	return workflow.WithActivityOptions(ctx, o)
}

// backoff is the retry policy of node and control activities: 1 s
// doubling to 30 s, at most attempts tries (0: unlimited).
func backoff(attempts int32) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    30 * time.Second,
		MaximumAttempts:    attempts,
	}
}

// controlOpts runs activities on the control worker.
func controlOpts(ctx workflow.Context, run, heartbeat time.Duration, attempts int32) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           contract.ControlQueue,
		StartToCloseTimeout: run,
		HeartbeatTimeout:    heartbeat,
		RetryPolicy:         backoff(attempts),
	})
}

// tracker keeps a workflow's step list for ProgressQuery.
type tracker struct {
	ctx workflow.Context
	p   contract.Progress
	// log is workflow.GetLogger's replay-safe logger (silent while a
	// history replays, so a worker restart does not log every step again),
	// tagged with the lane: every step's start and end reach the worker's
	// zap log through the SDK.
	log log.Logger
}

func newTracker(ctx workflow.Context, name, lane string) *tracker {
	t := &tracker{ctx: ctx, p: contract.Progress{Workflow: name, Lane: lane}, log: log.With(workflow.GetLogger(ctx), "Lane", lane)}
	_ = workflow.SetQueryHandler(ctx, contract.ProgressQuery, func() (contract.Progress, error) {
		out := t.p
		out.Steps = append([]contract.Step(nil), t.p.Steps...)
		out.Children = append([]string(nil), t.p.Children...)
		out.Waiting = append([]contract.NodeWait(nil), t.p.Waiting...)
		return out, nil
	})
	return t
}

func (t *tracker) start(name, node string) int {
	t.p.Steps = append(t.p.Steps, contract.Step{Name: name, Node: node, Status: contract.StepRunning, Started: workflow.Now(t.ctx)})
	t.log.Debug("step started", "Step", name, "Node", node)
	return len(t.p.Steps) - 1
}

func (t *tracker) skip(name, node, why string) {
	now := workflow.Now(t.ctx)
	t.p.Steps = append(t.p.Steps, contract.Step{Name: name, Node: node, Status: contract.StepSkipped, Started: now, Ended: now, Detail: why})
	t.log.Info("step skipped", "Step", name, "Node", node, "Why", why)
}

func (t *tracker) end(i int, detail string, err error) {
	s := &t.p.Steps[i]
	s.Ended = workflow.Now(t.ctx)
	if detail != "" {
		s.Detail = detail
	}
	if err != nil {
		s.Status = contract.StepFailed
		s.Error = errMessage(err)
		t.log.Warn("step failed", "Step", s.Name, "Node", s.Node, "Seconds", s.Ended.Sub(s.Started).Seconds(), "Error", s.Error)
		return
	}
	s.Status = contract.StepDone
	t.log.Info("step done", "Step", s.Name, "Node", s.Node, "Seconds", s.Ended.Sub(s.Started).Seconds(), "Detail", s.Detail)
}

// wait marks step i as waiting for node (down since since), for the query.
func (t *tracker) wait(i int, node string, since time.Time, detail string) {
	s := &t.p.Steps[i]
	s.Status, s.Detail = contract.StepWaiting, detail
	t.log.Warn("waiting for node", "Step", s.Name, "Node", node, "Detail", detail)
	for j := range t.p.Waiting {
		if t.p.Waiting[j].Node == node {
			t.p.Waiting[j].Since = since
			return
		}
	}
	t.p.Waiting = append(t.p.Waiting, contract.NodeWait{Node: node, Since: since})
}

// resume marks step i running again once node, which it waited for, is
// back. The node is wait's, not the step's: the image step's round is
// one step for every node and names none.
func (t *tracker) resume(i int, node string) {
	s := &t.p.Steps[i]
	s.Status, s.Detail = contract.StepRunning, ""
	out := t.p.Waiting[:0]
	for _, w := range t.p.Waiting {
		if w.Node != node {
			out = append(out, w)
		}
	}
	t.p.Waiting = out
}

func (t *tracker) child(id string) { t.p.Children = append(t.p.Children, id) }

func (t *tracker) steps() []contract.Step { return append([]contract.Step(nil), t.p.Steps...) }

// errMessage is the innermost application error message (the engine's own
// words), not Temporal's wrapping of it.
func errMessage(err error) string {
	// The deepest application error carries the engine's own words; outer
	// ones repeat it with Temporal's wrapping.
	var deepest *temporal.ApplicationError
	for e := err; e != nil; e = errors.Unwrap(e) {
		var app *temporal.ApplicationError
		if errors.As(e, &app) {
			deepest = app
			e = app
		}
	}
	if deepest != nil {
		return deepest.Message()
	}
	var to *temporal.TimeoutError
	if errors.As(err, &to) {
		return "timed out (" + strings.ToLower(strings.TrimPrefix(to.TimeoutType().String(), "TIMEOUT_TYPE_")) + ")"
	}
	return err.Error()
}

// errType returns the application error type of err (the fault type set by
// the engine), or "".
func errType(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Type()
	}
	var to *temporal.TimeoutError
	if errors.As(err, &to) {
		return "Timeout"
	}
	return ""
}

// isPickupTimeout reports a pinned activity that no node worker picked up.
func isPickupTimeout(err error) bool {
	var to *temporal.TimeoutError
	if errors.As(err, &to) {
		return to.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START
	}
	return false
}
