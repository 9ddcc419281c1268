package power

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fleet states the power sequences end in (the fleet probe's vocabulary).
const (
	StateOff  = "off"
	StateFree = "free"
)

// OffInput configures a whole power-off of one target.
type OffInput struct {
	Target Target `json:"target"`
	// ShutdownTimeout bounds the graceful command (default 60 s).
	ShutdownTimeout time.Duration `json:"shutdown_timeout,omitempty"`
	// UnreachableBound caps the wait for the device to go down (default
	// 5 min); Interval spaces its probes (default 5 s).
	UnreachableBound time.Duration `json:"unreachable_bound,omitempty"`
	Interval         time.Duration `json:"interval,omitempty"`
	// RelayBound caps the relay state confirmation (default 30 s).
	RelayBound    time.Duration `json:"relay_bound,omitempty"`
	RelayInterval time.Duration `json:"relay_interval,omitempty"`
	// Force cuts the relay even when the graceful shutdown failed or the
	// device still answered at the bound (recorded as warnings).
	Force bool `json:"force,omitempty"`
}

// OffResult is the outcome of Off: the per-step results and the warnings
// the operator must see (a relay that failed after a good shutdown).
type OffResult struct {
	Device      string         `json:"device"`
	State       string         `json:"state"`
	Shutdown    ShutdownResult `json:"shutdown"`
	Unreachable WaitResult     `json:"unreachable"`
	Relay       RelayResult    `json:"relay"`
	// Steps lists the steps run, in order, for the UI and tests.
	Steps    []string `json:"steps"`
	Warnings []string `json:"warnings,omitempty"`
}

// Off runs the power-off sequence in-process: graceful shutdown → wait
// until unreachable (bounded) → relay off (+ confirm) → state "off". A
// relay failure after a good shutdown is a warning, not an error: the
// device is down, but the operator must know it may boot back. Workflows
// call the step methods one by one instead (each an activity) and apply the
// same rules; this function is the reference and what tests drive.
func (e *Engine) Off(ctx context.Context, in OffInput) (OffResult, error) {
	t := in.Target
	res := OffResult{Device: t.Name}
	if spec, err := ParseShutdown(t.Power.Shutdown, t.SSH != ""); err == nil && spec.Method == "" && t.Power.Relay == "" {
		return res, fmt.Errorf("%s: %w: set power.relay and/or power.shutdown", t.label(), ErrNoPowerOff)
	}
	sd, err := e.Shutdown(ctx, ShutdownInput{Target: t, Timeout: in.ShutdownTimeout})
	res.Shutdown = sd
	res.Steps = append(res.Steps, "shutdown")
	shutdownOK := err == nil
	if err != nil {
		if ctx.Err() != nil {
			return res, err
		}
		// A device that is already down cannot be asked to shut down; that
		// is fine. One that is up and refused is not, unless forced.
		if aliveErr := e.aliveProbe(t)(ctx); aliveErr == nil && !in.Force {
			return res, fmt.Errorf("%w; relay left on because %s still answers (rerun with --force to cut it anyway)", err, t.label())
		}
		res.Warnings = append(res.Warnings, fmt.Sprintf("graceful shutdown of %s failed: %v", t.label(), err))
	}
	if !sd.Skipped {
		w, err := e.WaitUnreachable(ctx, WaitInput{Target: t, Bound: in.UnreachableBound, Interval: in.Interval})
		res.Unreachable = w
		res.Steps = append(res.Steps, "wait-unreachable")
		if err != nil {
			if !in.Force || ctx.Err() != nil {
				return res, err
			}
			shutdownOK = false
			res.Warnings = append(res.Warnings, fmt.Sprintf("cutting the relay although %v", err))
		}
	}
	r, err := e.RelayOff(ctx, RelayInput{Target: t, Bound: in.RelayBound, Interval: in.RelayInterval})
	res.Relay = r
	res.Steps = append(res.Steps, "relay-off")
	if err != nil {
		if ctx.Err() != nil || !shutdownOK || sd.Skipped {
			return res, err
		}
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"%s is shut down but its relay did not switch off: %v — it may boot back on its own; switch the outlet off by hand", t.label(), err))
	}
	if r.Skipped && !sd.Skipped {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s has no power.relay: it is shut down but stays powered and may boot back", t.label()))
	}
	res.State = StateOff
	return res, nil
}

// ErrNoPowerOff means a target has neither a graceful shutdown nor a relay.
var ErrNoPowerOff = errors.New("no way to power off")

// OnInput configures a whole power-on of one target.
type OnInput struct {
	Target Target `json:"target"`
	// ReachableBound caps the wait for SSH and the worker (default 5 min);
	// Interval spaces the probes (default 5 s).
	ReachableBound time.Duration `json:"reachable_bound,omitempty"`
	Interval       time.Duration `json:"interval,omitempty"`
	RelayBound     time.Duration `json:"relay_bound,omitempty"`
	RelayInterval  time.Duration `json:"relay_interval,omitempty"`
}

// OnResult is the outcome of On.
type OnResult struct {
	Device    string      `json:"device"`
	State     string      `json:"state"`
	Relay     RelayResult `json:"relay"`
	Wake      WakeResult  `json:"wake"`
	Reachable WaitResult  `json:"reachable"`
	Steps     []string    `json:"steps"`
}

// ErrNoPowerOn means a target has neither a relay nor Wake-on-LAN.
var ErrNoPowerOn = errors.New("no way to power on")

// On runs the power-on sequence in-process: relay on (+ confirm) and/or
// Wake-on-LAN → wait until it answers (and its worker polls) → state
// "free". With both configured the relay goes first and the magic packet
// follows, for machines whose BIOS stays off when power returns.
func (e *Engine) On(ctx context.Context, in OnInput) (OnResult, error) {
	t := in.Target
	res := OnResult{Device: t.Name}
	if t.Power.Relay == "" && t.Power.WOL == "" {
		return res, fmt.Errorf("%s: %w: set power.relay or power.wol", t.label(), ErrNoPowerOn)
	}
	r, err := e.RelayOn(ctx, RelayInput{Target: t, Bound: in.RelayBound, Interval: in.RelayInterval})
	res.Relay = r
	if !r.Skipped {
		res.Steps = append(res.Steps, "relay-on")
	}
	if err != nil {
		return res, err
	}
	w, err := e.Wake(ctx, WakeInput{Target: t})
	res.Wake = w
	if !w.Skipped {
		res.Steps = append(res.Steps, "wake-on-lan")
	}
	if err != nil {
		return res, err
	}
	reach, err := e.WaitReachable(ctx, WaitInput{Target: t, Bound: in.ReachableBound, Interval: in.Interval})
	res.Reachable = reach
	res.Steps = append(res.Steps, "wait-reachable")
	if err != nil {
		return res, err
	}
	res.State = StateFree
	return res, nil
}
