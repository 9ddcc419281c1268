package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
)

// Power runs the power sequence on every target in parallel. Off is
// graceful shutdown → wait until unreachable → relay off: off must end with
// the outlet relay off (an API shutdown alone let gear boot back). A relay
// failure after a good shutdown is a warning, said out loud. On is relay on
// (or Wake-on-LAN) → wait until SSH answers and the node worker polls.
// Each step is its own activity with its own retry policy.
func Power(ctx workflow.Context, in contract.PowerInput) (contract.PowerResult, error) {
	t := newTracker(ctx, "Power", "")
	res := contract.PowerResult{Action: in.Action, Targets: make([]contract.PowerTargetResult, len(in.Targets))}
	if in.Action != contract.PowerOn && in.Action != contract.PowerOff {
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("power action %q: use on or off", in.Action), "InvalidSpec", nil)
	}
	bound := in.WaitBound.D()
	if bound <= 0 {
		bound = 5 * time.Minute
	}
	opts := powerOpts{
		once:  controlOpts(ctx, 2*time.Minute, 0, 1),
		retry: controlOpts(ctx, 2*time.Minute, 0, 3),
		wait: workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: contract.ControlQueue, StartToCloseTimeout: bound + time.Minute, HeartbeatTimeout: 30 * time.Second,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2},
		}),
	}
	wg := workflow.NewWaitGroup(ctx)
	failed := 0
	for i, name := range in.Targets {
		i, name := i, name
		wg.Add(1)
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer wg.Done()
			res.Targets[i].Target = name
			p := &powerTarget{ctx: gctx, t: t, r: &res.Targets[i], in: contract.PowerStepInput{Target: name, Bound: contract.Duration(bound)}}
			var ok bool
			if in.Action == contract.PowerOff {
				ok = p.off(opts, in.Force)
			} else {
				ok = p.on(opts)
			}
			if !ok {
				failed++
			}
		})
	}
	wg.Wait(ctx)
	if in.Action == contract.PowerOff && len(in.Gear) > 0 {
		if workflow.GetVersion(ctx, versionPowerGearLast, workflow.DefaultVersion, 1) == 1 {
			res.Targets = append(res.Targets, powerOffGear(ctx, t, in, res.Targets, bound)...)
		}
	}
	if failed > 0 {
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("power %s: %d of %d targets failed", in.Action, failed, len(in.Targets)), "PowerFailed", nil, res)
	}
	return res, nil
}

// powerOpts are the activity options of the power steps: once (a
// shutdown is asked once), retry, and wait (bounded by the wait bound).
type powerOpts struct{ once, retry, wait workflow.Context }

// powerTarget runs one target's power sequence in its own coroutine (ctx),
// filling r.
type powerTarget struct {
	ctx workflow.Context
	t   *tracker
	r   *contract.PowerTargetResult
	in  contract.PowerStepInput
}

// step runs one power step of the target as its own activity.
func (p *powerTarget) step(actx workflow.Context, label string, fn any) (contract.PowerStepResult, error) {
	name := p.in.Target
	k := p.t.start(label, name)
	var sr contract.PowerStepResult
	err := workflow.ExecuteActivity(summarize(actx, name, -1, label), fn, p.in).Get(p.ctx, &sr)
	p.t.end(k, sr.Detail, err)
	if err == nil {
		p.r.Steps = append(p.r.Steps, sr)
	}
	return sr, err
}

// off is graceful shutdown → wait until unreachable → relay off; false
// when the target failed (a relay failure after a good shutdown only
// warns).
func (p *powerTarget) off(o powerOpts, force bool) bool {
	r := p.r
	if _, err := p.step(o.once, "shutdown", ca.PowerShutdown); err != nil {
		r.State, r.Error = "unknown", errMessage(err)
		return false
	}
	if _, err := p.step(o.wait, "wait unreachable", ca.PowerWaitUnreachable); err != nil {
		if !force {
			r.State, r.Error = "on", errMessage(err)+" (relay left on; --force cuts it anyway)"
			return false
		}
		r.Warnings = append(r.Warnings, "still reachable after shutdown: "+errMessage(err)+" — relay cut anyway (--force)")
	}
	if _, err := p.step(o.retry, "relay off", ca.PowerRelayOff); err != nil {
		r.Warnings = append(r.Warnings, "relay off failed after a good shutdown: "+errMessage(err)+" — the device may boot back on its own")
	}
	r.State = contract.NodeOff
	return true
}

// on is relay on (or Wake-on-LAN) → wait until reachable; false when the
// target failed.
func (p *powerTarget) on(o powerOpts) bool {
	r := p.r
	relay, err := p.step(o.retry, "relay on", ca.PowerRelayOn)
	if err != nil {
		r.State, r.Error = contract.NodeOff, errMessage(err)
		return false
	}
	wake, err := p.step(o.retry, "wake-on-lan", ca.PowerWake)
	if err != nil {
		r.Warnings = append(r.Warnings, "wake-on-lan: "+errMessage(err))
	}
	if relay.Skipped && wake.Skipped {
		r.Warnings = append(r.Warnings, "no relay and no wol configured: nothing switched on")
	}
	if _, err := p.step(o.wait, "wait reachable", ca.PowerWaitReachable); err != nil {
		r.State, r.Error = contract.NodeUnreachable, errMessage(err)
		return false
	}
	r.State = contract.NodeFree
	return true
}

// powerOffGear switches network gear off after the nodes (all targets have
// ended): gear with a node behind it that is not off is left on, said so;
// the rest in parallel, API shutdown → wait until unreachable → relay off,
// every failure a warning.
func powerOffGear(ctx workflow.Context, t *tracker, in contract.PowerInput, nodes []contract.PowerTargetResult, bound time.Duration) []contract.PowerTargetResult {
	state := map[string]string{}
	for _, r := range nodes {
		state[r.Target] = r.State
	}
	once := controlOpts(ctx, 2*time.Minute, 0, 1)
	retry := controlOpts(ctx, 2*time.Minute, 0, 3)
	wait := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: contract.ControlQueue, StartToCloseTimeout: bound + time.Minute, HeartbeatTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	// A node behind the gear that this run did not power off must already
	// be down: asked once, briefly.
	check := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: contract.ControlQueue, StartToCloseTimeout: 2 * time.Minute, HeartbeatTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	out := make([]contract.PowerTargetResult, len(in.Gear))
	wg := workflow.NewWaitGroup(ctx)
	for i, g := range in.Gear {
		i, g := i, g
		wg.Add(1)
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer wg.Done()
			r := &out[i]
			r.Target = g.Name
			step := func(actx workflow.Context, label, target string, fn any, stepIn contract.PowerStepInput) (contract.PowerStepResult, error) {
				k := t.start(label, target)
				var sr contract.PowerStepResult
				err := workflow.ExecuteActivity(actx, fn, stepIn).Get(gctx, &sr)
				t.end(k, sr.Detail, err)
				return sr, err
			}
			var up []string
			for _, n := range g.Behind {
				st, ours := state[n]
				switch {
				case ours && st == contract.NodeOff:
				case ours:
					up = append(up, n+" ("+st+")")
				default:
					if _, err := step(check, "check down", n, ca.PowerWaitUnreachable, contract.PowerStepInput{Target: n, Bound: contract.Duration(15 * time.Second)}); err != nil {
						up = append(up, n+" (still answers)")
					}
				}
			}
			if len(up) > 0 {
				r.State = "on"
				r.Warnings = append(r.Warnings, fmt.Sprintf("left on: nodes behind it are not off: %s — switching it off first would cut them off mid-shutdown", strings.Join(up, ", ")))
				return
			}
			in1 := contract.PowerStepInput{Target: g.Name, Bound: contract.Duration(bound)}
			if sr, err := step(once, "shutdown", g.Name, ca.PowerShutdown, in1); err != nil {
				r.Warnings = append(r.Warnings, "API shutdown failed: "+errMessage(err)+" — its relay is cut anyway")
			} else {
				r.Steps = append(r.Steps, sr)
				if !sr.Skipped {
					if sr, err := step(wait, "wait unreachable", g.Name, ca.PowerWaitUnreachable, in1); err != nil {
						r.Warnings = append(r.Warnings, "still answers after its shutdown: "+errMessage(err)+" — its relay is cut anyway")
					} else {
						r.Steps = append(r.Steps, sr)
					}
				}
			}
			if sr, err := step(retry, "relay off", g.Name, ca.PowerRelayOff, in1); err != nil {
				r.Warnings = append(r.Warnings, "relay off failed: "+errMessage(err)+" — it stays powered")
			} else {
				r.Steps = append(r.Steps, sr)
			}
			r.State = contract.NodeOff
		})
	}
	wg.Wait(ctx)
	return out
}
