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
//
// Its steps are powerRun's: every target at once, then (off, with gear)
// the network gear.
func Power(ctx workflow.Context, in contract.PowerInput) (contract.PowerResult, error) {
	p := &powerRun{ctx: ctx, in: in, t: newTracker(ctx, "Power", ""),
		res: contract.PowerResult{Action: in.Action, Targets: make([]contract.PowerTargetResult, len(in.Targets))}}
	if in.Action != contract.PowerOn && in.Action != contract.PowerOff {
		return p.res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("power action %q: use on or off", in.Action), "InvalidSpec", nil)
	}
	p.bound = in.WaitBound.D()
	if p.bound <= 0 {
		p.bound = 5 * time.Minute
	}
	p.gatewaysOff()
	p.targets()
	p.gear()
	if p.failed > 0 {
		return p.res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("power %s: %d of %d targets failed", in.Action, p.failed, len(in.Targets)), "PowerFailed", nil, p.res)
	}
	return p.res, nil
}

// powerRun is one Power run: its input, the wait bound, its result so far
// and how many targets failed.
type powerRun struct {
	ctx    workflow.Context
	in     contract.PowerInput
	t      *tracker
	res    contract.PowerResult
	bound  time.Duration
	failed int
}

// targets runs every target's sequence at once, each in its own
// coroutine, and waits for all of them.
func (p *powerRun) targets() {
	ctx, in := p.ctx, p.in
	opts := powerOpts{
		once:  controlOpts(ctx, 2*time.Minute, 0, 1),
		retry: controlOpts(ctx, 2*time.Minute, 0, 3),
		wait: workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: contract.ControlQueue, StartToCloseTimeout: p.bound + time.Minute, HeartbeatTimeout: 30 * time.Second,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2},
		}),
	}
	wg := workflow.NewWaitGroup(ctx)
	for i, name := range in.Targets {
		wg.Add(1)
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer wg.Done()
			p.res.Targets[i].Target = name
			pt := &powerTarget{ctx: gctx, t: p.t, r: &p.res.Targets[i], in: contract.PowerStepInput{Target: name, Bound: contract.Duration(p.bound)}}
			var ok bool
			if in.Action == contract.PowerOff {
				ok = pt.off(opts, in.Force)
			} else {
				ok = pt.on(opts)
			}
			if !ok {
				p.failed++
			}
		})
	}
	wg.Wait(ctx)
}

// gear switches the network gear off after the nodes (power off with
// gear, from versionPowerGearLast on).
func (p *powerRun) gear() {
	if p.in.Action != contract.PowerOff || len(p.in.Gear) == 0 {
		return
	}
	if workflow.GetVersion(p.ctx, versionPowerGearLast, workflow.DefaultVersion, 1) == 1 {
		p.res.Targets = append(p.res.Targets, p.offGear()...)
	}
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

// offGear switches network gear off after the nodes (all targets have
// ended): gear with a node behind it that is not off is left on, said so;
// the rest in parallel, API shutdown → wait until unreachable → relay off,
// every failure a warning.
func (p *powerRun) offGear() []contract.PowerTargetResult {
	ctx := p.ctx
	state := map[string]string{}
	for _, r := range p.res.Targets {
		state[r.Target] = r.State
	}
	o := gearOpts{
		powerOpts: powerOpts{
			once:  controlOpts(ctx, 2*time.Minute, 0, 1),
			retry: controlOpts(ctx, 2*time.Minute, 0, 3),
			wait: workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				TaskQueue: contract.ControlQueue, StartToCloseTimeout: p.bound + time.Minute, HeartbeatTimeout: 30 * time.Second,
				RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
			}),
		},
		// A node behind the gear that this run did not power off must
		// already be down: asked once, briefly.
		check: workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: contract.ControlQueue, StartToCloseTimeout: 2 * time.Minute, HeartbeatTimeout: 30 * time.Second,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
		}),
	}
	out := make([]contract.PowerTargetResult, len(p.in.Gear))
	wg := workflow.NewWaitGroup(ctx)
	for i, g := range p.in.Gear {
		wg.Add(1)
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer wg.Done()
			out[i].Target = g.Name
			gt := &gearTarget{ctx: gctx, t: p.t, r: &out[i], g: g}
			if up := gt.nodesUp(state, o.check); len(up) > 0 {
				gt.r.State = "on"
				gt.r.Warnings = append(gt.r.Warnings, fmt.Sprintf("left on: nodes behind it are not off: %s — switching it off first would cut them off mid-shutdown", strings.Join(up, ", ")))
				return
			}
			gt.off(o.powerOpts, contract.PowerStepInput{Target: g.Name, Bound: contract.Duration(p.bound)})
		})
	}
	wg.Wait(ctx)
	return out
}

// gearOpts are the gear's power steps' options: powerOpts (its wait
// asked once), and check, the one brief look at a node behind it.
type gearOpts struct {
	powerOpts
	check workflow.Context
}

// gearTarget runs one piece of gear's power-off in its own coroutine
// (ctx), filling r.
type gearTarget struct {
	ctx workflow.Context
	t   *tracker
	r   *contract.PowerTargetResult
	g   contract.PowerGear
}

// step runs one power step (in names its target) as its own activity.
func (g *gearTarget) step(actx workflow.Context, label string, fn any, in contract.PowerStepInput) (contract.PowerStepResult, error) {
	k := g.t.start(label, in.Target)
	var sr contract.PowerStepResult
	err := workflow.ExecuteActivity(actx, fn, in).Get(g.ctx, &sr)
	g.t.end(k, sr.Detail, err)
	return sr, err
}

// nodesUp are the nodes behind the gear that are not off: a target of
// this run that did not reach off (state), or another node that still
// answers (asked once with check).
func (g *gearTarget) nodesUp(state map[string]string, check workflow.Context) []string {
	var up []string
	for _, n := range g.g.Behind {
		st, ours := state[n]
		switch {
		case ours && st == contract.NodeOff:
		case ours:
			up = append(up, n+" ("+st+")")
		default:
			if _, err := g.step(check, "check down", ca.PowerWaitUnreachable, contract.PowerStepInput{Target: n, Bound: contract.Duration(15 * time.Second)}); err != nil {
				up = append(up, n+" (still answers)")
			}
		}
	}
	return up
}

// off is API shutdown → wait until unreachable → relay off, every
// failure a warning (the relay is cut anyway).
func (g *gearTarget) off(o powerOpts, in contract.PowerStepInput) {
	r := g.r
	if sr, err := g.step(o.once, "shutdown", ca.PowerShutdown, in); err != nil {
		r.Warnings = append(r.Warnings, "API shutdown failed: "+errMessage(err)+" — its relay is cut anyway")
	} else {
		r.Steps = append(r.Steps, sr)
		if !sr.Skipped {
			if sr, err := g.step(o.wait, "wait unreachable", ca.PowerWaitUnreachable, in); err != nil {
				r.Warnings = append(r.Warnings, "still answers after its shutdown: "+errMessage(err)+" — its relay is cut anyway")
			} else {
				r.Steps = append(r.Steps, sr)
			}
		}
	}
	if sr, err := g.step(o.retry, "relay off", ca.PowerRelayOff, in); err != nil {
		r.Warnings = append(r.Warnings, "relay off failed: "+errMessage(err)+" — it stays powered")
	} else {
		r.Steps = append(r.Steps, sr)
	}
	r.State = contract.NodeOff
}
