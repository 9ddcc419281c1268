package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
)

// Bench benches a serving lane and writes its report (starter bench).
func Bench(ctx workflow.Context, in contract.BenchInput) (contract.BenchResult, error) {
	t := newTracker(ctx, "Bench", in.Plan.Lane)
	info := workflow.GetInfo(ctx)
	in.WorkflowID, in.RunID = info.WorkflowExecution.ID, info.WorkflowExecution.RunID
	i := t.start("bench", "")
	bctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: contract.ControlQueue, StartToCloseTimeout: 6 * time.Hour, HeartbeatTimeout: 2 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2},
	})
	var r contract.BenchResult
	err := workflow.ExecuteActivity(bctx, ca.Bench, in).Get(ctx, &r)
	t.end(i, r.Summary, err)
	return r, err
}
