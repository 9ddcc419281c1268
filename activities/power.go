package activities

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/power"
	"github.com/sparklane/sparklane/internal/fault"
)

func (a *ControlActivities) powerTarget(name string) (power.Target, error) {
	for _, n := range a.Config.Nodes {
		if n.Name == name {
			return power.NodeTarget(n), nil
		}
	}
	for _, d := range a.Config.Devices {
		if d.Name == name {
			return power.DeviceTarget(d), nil
		}
	}
	return power.Target{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%q is neither a node nor a device in %s", name, a.Config.File))
}

// polling reports whether a worker polled node.NAME lately (the server keeps
// a poller's last access; a live worker long-polls at least every minute).
func (a *ControlActivities) polling(ctx context.Context, name string) error {
	if a.Temporal == nil {
		return nil
	}
	resp, err := a.Temporal.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
		Namespace: a.Config.Temporal.Namespace, TaskQueue: &taskqueuepb.TaskQueue{Name: "node." + name, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		TaskQueueType: enumspb.TASK_QUEUE_TYPE_ACTIVITY,
	})
	if err != nil {
		return err
	}
	for _, p := range resp.GetPollers() {
		if p.GetLastAccessTime() != nil && time.Since(p.GetLastAccessTime().AsTime()) < 90*time.Second {
			return nil
		}
	}
	return fmt.Errorf("no worker polls node.%s", name)
}

// powerEngine checks worker polling through Temporal's task queue view.
func (a *ControlActivities) powerEngine() *power.Engine {
	return &power.Engine{Polling: func(ctx context.Context, t power.Target) error { return a.polling(ctx, t.Name) }}
}

// NodePolling says whether a worker polls node.NAME, for runs that wait for
// a node to come back.
func (a *ControlActivities) NodePolling(ctx context.Context, in contract.NodePollingInput) (contract.NodePollingResult, error) {
	err := a.polling(ctx, in.Node)
	if err == nil {
		a.Metrics.NodeOutage(in.Node, 0)
	} else {
		a.Metrics.NodeOutage(in.Node, time.Duration(in.DownSeconds*float64(time.Second)))
	}
	return contract.NodePollingResult{Node: in.Node, Polling: err == nil}, nil
}

// PowerShutdown is the graceful shutdown step (SSH command or RouterOS API).
func (a *ControlActivities) PowerShutdown(ctx context.Context, in contract.PowerStepInput) (contract.PowerStepResult, error) {
	t, err := a.powerTarget(in.Target)
	if err != nil {
		return contract.PowerStepResult{}, classify(err)
	}
	r, err := a.powerEngine().Shutdown(ctx, power.ShutdownInput{Target: t, Timeout: in.Timeout.D()})
	return contract.PowerStepResult{Target: in.Target, Step: "shutdown", Skipped: r.Skipped, Detail: fmt.Sprintf("%s dropped=%v", r.Method, r.Dropped)}, classify(err)
}

// PowerWaitUnreachable waits until the target stopped answering.
func (a *ControlActivities) PowerWaitUnreachable(ctx context.Context, in contract.PowerStepInput) (contract.PowerStepResult, error) {
	return a.powerWait(ctx, in, "wait unreachable", a.powerEngine().WaitUnreachable, nil)
}

// powerWait runs one of the engine's waits on in's target, heartbeating
// while it waits; after (when set) runs once the wait succeeded.
func (a *ControlActivities) powerWait(ctx context.Context, in contract.PowerStepInput, step string, wait func(context.Context, power.WaitInput) (power.WaitResult, error), after func() error) (contract.PowerStepResult, error) {
	t, err := a.powerTarget(in.Target)
	if err != nil {
		return contract.PowerStepResult{}, classify(err)
	}
	stop := keepAlive(ctx)
	defer stop()
	r, err := wait(ctx, power.WaitInput{Target: t, Bound: in.Bound.D(), Interval: in.Interval.D()})
	if err == nil && after != nil {
		err = after()
	}
	return contract.PowerStepResult{Target: in.Target, Step: step, Detail: fmt.Sprintf("%d probes, %s", r.Probes, r.Waited)}, classify(err)
}

// PowerRelayOff switches the outlet off and confirms it.
func (a *ControlActivities) PowerRelayOff(ctx context.Context, in contract.PowerStepInput) (contract.PowerStepResult, error) {
	return a.relay(ctx, in, false)
}

// PowerRelayOn switches the outlet on and confirms it.
func (a *ControlActivities) PowerRelayOn(ctx context.Context, in contract.PowerStepInput) (contract.PowerStepResult, error) {
	return a.relay(ctx, in, true)
}

func (a *ControlActivities) relay(ctx context.Context, in contract.PowerStepInput, on bool) (contract.PowerStepResult, error) {
	t, err := a.powerTarget(in.Target)
	if err != nil {
		return contract.PowerStepResult{}, classify(err)
	}
	e := a.powerEngine()
	var r power.RelayResult
	step := "relay off"
	if on {
		step = "relay on"
		r, err = e.RelayOn(ctx, power.RelayInput{Target: t, Bound: in.Bound.D(), Interval: in.Interval.D()})
	} else {
		r, err = e.RelayOff(ctx, power.RelayInput{Target: t, Bound: in.Bound.D(), Interval: in.Interval.D()})
		// The power-off sequence ends here (relay off, or none to switch):
		// the node is down on purpose, which a nightly verify must know.
		if err == nil {
			err = a.markPoweredOff(in.Target)
		}
	}
	return contract.PowerStepResult{Target: in.Target, Step: step, Skipped: r.Skipped, Detail: r.Entity + " " + r.State}, classify(err)
}

// PowerWake sends Wake-on-LAN.
func (a *ControlActivities) PowerWake(ctx context.Context, in contract.PowerStepInput) (contract.PowerStepResult, error) {
	t, err := a.powerTarget(in.Target)
	if err != nil {
		return contract.PowerStepResult{}, classify(err)
	}
	r, err := a.powerEngine().Wake(ctx, power.WakeInput{Target: t})
	return contract.PowerStepResult{Target: in.Target, Step: "wake-on-lan", Skipped: r.Skipped, Detail: r.MAC}, classify(err)
}

// PowerWaitReachable waits until SSH answers and the node worker polls.
func (a *ControlActivities) PowerWaitReachable(ctx context.Context, in contract.PowerStepInput) (contract.PowerStepResult, error) {
	// Up again: no longer off on purpose.
	return a.powerWait(ctx, in, "wait reachable", a.powerEngine().WaitReachable, func() error { return a.clearPoweredOff(in.Target) })
}

// relayOff reports whether a node's outlet relay is known to be off (for
// the fleet probe's "off" state).
func (a *ControlActivities) relayOff(ctx context.Context, name string) (bool, string) {
	t, err := a.powerTarget(name)
	if err != nil || t.Power.Relay == "" {
		return false, ""
	}
	on, known, err := a.powerEngine().RelayState(ctx, t.Power)
	if err != nil || !known || on {
		return false, ""
	}
	return true, "relay " + t.Power.Relay + " is off"
}
