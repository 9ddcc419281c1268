package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/internal/fault"
)

// classify turns an engine error into what Temporal should do with it: a
// permanent fault becomes a non-retryable application error of its type
// (workflows branch on the type), anything else stays retryable.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if typ, ok := fault.TypeOf(err); ok {
		return temporal.NewNonRetryableApplicationError(err.Error(), typ, nil)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return temporal.NewApplicationError(err.Error(), "Transient")
}

// heartbeatEvery sends progress as heartbeat details; Temporal throttles
// them, and a retried attempt reads the last one back with resumeFrom.
func heartbeat(ctx context.Context, details any) {
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx, details)
	}
}

// resumeFrom reads the previous attempt's last heartbeat into v, if any.
func resumeFrom(ctx context.Context, v any) bool {
	if !activity.IsActivity(ctx) || !activity.HasHeartbeatDetails(ctx) {
		return false
	}
	return activity.GetHeartbeatDetails(ctx, v) == nil
}
