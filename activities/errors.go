package activities

import (
	"context"
	"errors"

	dockerclient "github.com/docker/docker/client"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/internal/contract"
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
	if dockerUnreachable(err) {
		// The node's Docker daemon does not answer (restarting, or the
		// node half way through a reboot): retryable, and the image step
		// waits for it within the node outage budget.
		return temporal.NewApplicationError(err.Error(), contract.DockerUnreachable)
	}
	return temporal.NewApplicationError(err.Error(), "Transient")
}

// dockerUnreachable reports an error of a Docker client that could not
// reach its daemon at all (the socket refuses or is gone).
func dockerUnreachable(err error) bool {
	return dockerclient.IsErrConnectionFailed(err)
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
