package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/term"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
)

// runSpec says how to start one workflow.
type runSpec struct {
	ID       string
	Workflow string
	Input    any
	Lane     string
	Cluster  string
	Memo     map[string]any
	Retry    *temporal.RetryPolicy
	// FollowSame: when the ID is already running with the same input (the
	// command repeated, say after the control service died), follow that
	// run instead of refusing; with another input, refuse saying how the
	// inputs differ.
	FollowSame bool
}

// start starts a workflow, refusing a second run with the same ID while
// the first is open (it names the running one).
func (a *App) start(ctx context.Context, s runSpec) (client.WorkflowRun, error) {
	env, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	if a.lanes == nil {
		a.lanes = map[string]string{}
	}
	a.lanes[s.ID] = s.Lane
	var sa []temporal.SearchAttributeUpdate
	if s.Lane != "" {
		sa = append(sa, searchattr.LaneKey.ValueSet(s.Lane))
	}
	if s.Cluster != "" {
		sa = append(sa, searchattr.ClusterKey.ValueSet(s.Cluster))
	}
	opts := client.StartWorkflowOptions{
		ID:                       s.ID,
		TaskQueue:                contract.ControlQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes:    temporal.NewSearchAttributes(sa...),
		Memo:                     s.Memo,
		RetryPolicy:              s.Retry,
		// A second run on a busy ID is refused, not silently joined.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}
	run, err := env.Client.ExecuteWorkflow(ctx, opts, s.Workflow, s.Input)
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return a.alreadyRunning(ctx, env.Client, s, started.RunId)
		}
		return nil, fmt.Errorf("start %s: %w", s.ID, err)
	}
	return run, nil
}

// drawEvery is how often a followed run's progress is polled and drawn.
const drawEvery = 400 * time.Millisecond

// confirmWithin is how soon a second Ctrl-C must follow the first to
// cancel the run.
const confirmWithin = 5 * time.Second

// follow waits for a run, drawing its progress (live bars on a terminal,
// one line per step change otherwise, nothing with --json), and checks
// every serviceCheckEvery that the control service it talks to still runs
// (serviceGone: a dead one is reported at once, with how to resume). The
// first Ctrl-C asks for confirmation; a second within confirmWithin asks
// the control service to cancel the run and ends this starter at once
// (cancelAndLeave): the cleanup runs in the service, not here.
func (a *App) follow(ctx context.Context, run client.WorkflowRun, result any) error {
	a.following.Store(true)
	defer a.following.Store(false)
	env := a.env
	done := make(chan error, 1)
	go func() { done <- run.Get(ctx, result) }()
	tick, stopTick := a.ticker(drawEvery)
	defer stopTick()
	check, stopCheck := a.ticker(serviceCheckEvery)
	defer stopCheck()
	r := newRenderer(a.Out, isTerminal(a.Out) && !a.JSON, a.JSON)
	r.now = a.clock
	r.width = terminalWidth(a.Out)
	var lastInt time.Time
	for {
		select {
		case err := <-done:
			if !r.quiet {
				// With --json nothing is drawn: the queries (on a closed
				// run, a replay in the control worker) would only add
				// latency to a verify-only pass.
				p := a.drawOnce(ctx, env.Client, run, r)
				r.finish(p, err != nil)
			}
			a.stepsShown = r.shownSteps
			return err
		case <-a.Interrupts:
			if !lastInt.IsZero() && a.clock().Sub(lastInt) < confirmWithin {
				return a.cancelAndLeave(ctx, run)
			}
			lastInt = a.clock()
			what := run.GetID()
			if lane := a.lanes[run.GetID()]; lane != "" {
				what += " (lane " + lane + ")"
			}
			fmt.Fprintf(a.Err, "\nCtrl-C again within %s to cancel %s: the control service runs its cleanup and rollback, and this starter ends at once. Otherwise it goes on. Detach with --no-wait next time.\n", confirmWithin, what)
		case <-tick:
			if !r.quiet {
				a.drawOnce(ctx, env.Client, run, r)
			}
		case <-check:
			if err := a.serviceGone(run.GetID()); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cancelAndLeave asks the control service to cancel run and ends the
// command at once (exit 130) without waiting for the run's cleanup and
// rollback, which the service runs whatever this starter does; it says so,
// and how to follow them.
func (a *App) cancelAndLeave(ctx context.Context, run client.WorkflowRun) error {
	id := run.GetID()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.env.Client.CancelWorkflow(cctx, id, run.GetRunID()); err != nil {
		fmt.Fprintf(a.Err, "\ncancel of %s not requested (%v): it goes on in the control service; cancel it with 'starter cancel %s'\n", id, err, id)
		return exitCode(130, nil)
	}
	fmt.Fprintf(a.Err, "\ncancel requested for %s: its cleanup and rollback run in the control service, not in this starter, which ends now. Follow them with 'starter attach %s' ('starter cancel %s' waits for them).\n", id, id, id)
	return exitCode(130, nil)
}

// drawOnce queries run's progress and its children's pending byte
// progress and draws them; it returns the progress drawn (empty when the
// query failed).
func (a *App) drawOnce(ctx context.Context, c client.Client, run client.WorkflowRun, r *renderer) contract.Progress {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, run.GetID(), run.GetRunID(), contract.ProgressQuery)
	if err != nil {
		return contract.Progress{}
	}
	var p contract.Progress
	if v.Get(&p) != nil {
		return contract.Progress{}
	}
	bars := map[string]progressSample{}
	for _, child := range p.Children {
		d, err := c.DescribeWorkflowExecution(qctx, child, "")
		if err != nil {
			continue
		}
		bars[child] = childSample(d)
		// A running child waiting for its node shows in the parent's display.
		if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			continue
		}
		if cv, err := c.QueryWorkflow(qctx, child, "", contract.ProgressQuery); err == nil {
			var cp contract.Progress
			if cv.Get(&cp) == nil {
				p.Waiting = append(p.Waiting, cp.Waiting...)
			}
		}
	}
	// The run itself may heartbeat staging progress (a single StageNode).
	if d, err := c.DescribeWorkflowExecution(qctx, run.GetID(), ""); err == nil {
		if pr, ok := pendingProgress(d); ok {
			bars[run.GetID()] = pr
		}
	}
	r.draw(p, bars)
	return p
}

// childSample is a described child's progress: its pending byte
// progress, else idle (running, nothing pending) or ended (its status).
func childSample(d *workflowservice.DescribeWorkflowExecutionResponse) progressSample {
	if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return progressSample{Ended: statusName(st)}
	}
	if pr, ok := pendingProgress(d); ok {
		return pr
	}
	return progressSample{Idle: true}
}

// pendingProgress reads byte progress from the heartbeat details of a
// described workflow's pending staging and fetch activities, when the
// latest of those heartbeats reached the server (what a rate is measured
// over), and why one of them is retrying: its heartbeat's reason (a fetch
// retrying a request), else its last attempt's failure.
func pendingProgress(d *workflowservice.DescribeWorkflowExecutionResponse) (progressSample, bool) {
	var total contract.StageProgress
	var at time.Time
	var retry string
	var acts []string
	found := false
	dc := converter.GetDefaultDataConverter()
	for _, pa := range d.GetPendingActivities() {
		// FetchRepo heartbeats files and bytes under contract.StageProgress's names.
		if n := pa.GetActivityType().GetName(); n != "StageBlock" && n != "FetchRepo" {
			continue
		}
		why := attemptFailure(pa)
		if pa.GetHeartbeatDetails() == nil {
			if why != "" {
				retry, found = firstNonEmpty(retry, why), true
			}
			continue
		}
		var pr contract.StageProgress
		if err := dc.FromPayloads(pa.GetHeartbeatDetails(), &pr); err != nil {
			continue
		}
		var fp struct {
			Retry string `json:"retry"`
		}
		if dc.FromPayloads(pa.GetHeartbeatDetails(), &fp) == nil && fp.Retry != "" {
			why = fp.Retry
		}
		retry = firstNonEmpty(retry, why)
		addStage(&total, pr)
		acts = append(acts, pa.GetActivityId())
		if t := pa.GetLastHeartbeatTime(); t != nil && t.AsTime().After(at) {
			at = t.AsTime()
		}
		found = true
	}
	return progressSample{StageProgress: total, At: at, Retry: retry, Acts: strings.Join(acts, ",")}, found
}

// addStage adds one activity's staging progress to total.
func addStage(total *contract.StageProgress, pr contract.StageProgress) {
	total.BytesDone += pr.BytesDone
	total.BytesTotal += pr.BytesTotal
	total.FilesDone += pr.FilesDone
	total.FilesTotal += pr.FilesTotal
	total.RowsDone += pr.RowsDone
	total.RowsTotal += pr.RowsTotal
	total.FromNAS += pr.FromNAS
	for _, l := range pr.Beside {
		if !slices.Contains(total.Beside, l) {
			total.Beside = append(total.Beside, l)
		}
	}
	slices.Sort(total.Beside)
	if total.Waiting == "" {
		total.Waiting = pr.Waiting
	}
	for n, b := range pr.FromPeers {
		if total.FromPeers == nil {
			total.FromPeers = map[string]int64{}
		}
		total.FromPeers[n] += b
	}
}

// attemptFailure is why a pending activity is on a later attempt ("" on
// its first): its last attempt's failure.
func attemptFailure(pa *workflowpb.PendingActivityInfo) string {
	if pa.GetAttempt() <= 1 || pa.GetLastFailure() == nil {
		return ""
	}
	return fmt.Sprintf("attempt %d; the last one failed: %s", pa.GetAttempt(), pa.GetLastFailure().GetMessage())
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// terminalWidth is w's columns when it is a terminal, else 0.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return cols
}

// isTerminal reports whether w is a terminal (golang.org/x/term).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// appErrorDetails extracts the details of a workflow's application error
// (e.g. a CutoverResult or a FleetProbeResult attached to a failure).
func appErrorDetails(err error, v any) bool {
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.HasDetails() {
		return app.Details(v) == nil
	}
	return false
}

// rootMessage is the innermost application error message.
func rootMessage(err error) string {
	var first *temporal.ApplicationError
	if errors.As(err, &first) {
		return first.Message()
	}
	return err.Error()
}
