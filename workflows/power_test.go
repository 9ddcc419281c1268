package workflows

import (
	"errors"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
)

func powerResult(t *testing.T, f *fakeFleet) (contract.PowerResult, error) {
	t.Helper()
	var res contract.PowerResult
	if err := f.env.GetWorkflowError(); err != nil {
		app := appErr(t, err)
		if app.Type() != "PowerFailed" {
			t.Fatalf("error type %q, want PowerFailed: %v", app.Type(), err)
		}
		if derr := app.Details(&res); derr != nil {
			t.Fatal(derr)
		}
		return res, err
	}
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res, nil
}

func TestPowerOffInOrder(t *testing.T) {
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Power, contract.PowerInput{Action: contract.PowerOff, Targets: []string{"a"}})
	res, err := powerResult(t, f)
	if err != nil {
		t.Fatalf("power off: %v", err)
	}
	r := res.Targets[0]
	if r.Target != "a" || r.State != contract.NodeOff || len(r.Warnings) != 0 || r.Error != "" || len(r.Steps) != 3 {
		t.Errorf("target %+v, want a off after 3 steps", r)
	}
	f.expectPhases([]string{"PowerShutdown a"}, []string{"PowerWaitUnreachable a"}, []string{"PowerRelayOff a"})
}

func TestPowerOffRelayFailureIsAWarning(t *testing.T) {
	f := newFakeFleet(t)
	f.relayOffErr = newAppErr("home assistant: switch.a_outlet unavailable", "Permanent")
	f.env.ExecuteWorkflow(Power, contract.PowerInput{Action: contract.PowerOff, Targets: []string{"a", "b"}})
	res, err := powerResult(t, f)
	if err != nil {
		t.Fatalf("a relay failure after a good shutdown must not fail the run: %v", err)
	}
	for _, r := range res.Targets {
		if r.State != contract.NodeOff || r.Error != "" || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "relay off failed after a good shutdown: home assistant: switch.a_outlet unavailable") {
			t.Errorf("target %+v, want off with one relay warning", r)
		}
	}
	if n := f.count("PowerRelayOff"); n != 2 {
		t.Errorf("%d relay-off calls, want 2 (permanent fault, no retry)", n)
	}
}

func TestPowerOffStillAnsweringLeavesRelayOn(t *testing.T) {
	f := newFakeFleet(t)
	f.unreachErr = errors.New("a still answers ssh after 5m0s")
	f.env.ExecuteWorkflow(Power, contract.PowerInput{Action: contract.PowerOff, Targets: []string{"a"}})
	res, err := powerResult(t, f)
	if err == nil {
		t.Fatal("power off succeeded although a never went down")
	}
	r := res.Targets[0]
	if r.State != "on" || !strings.Contains(r.Error, "a still answers ssh") || !strings.Contains(r.Error, "relay left on") {
		t.Errorf("target %+v, want on with the relay left on", r)
	}
	// The wait's retry policy allows 2 attempts; the relay is never cut.
	f.expectPhases([]string{"PowerShutdown a"}, []string{"PowerWaitUnreachable a"}, []string{"PowerWaitUnreachable a"})
}

func TestPowerOffForceCutsRelayAnyway(t *testing.T) {
	f := newFakeFleet(t)
	f.unreachErr = newAppErr("a still answers ssh after 5m0s", "Permanent")
	f.env.ExecuteWorkflow(Power, contract.PowerInput{Action: contract.PowerOff, Targets: []string{"a"}, Force: true})
	res, err := powerResult(t, f)
	if err != nil {
		t.Fatalf("power off --force: %v", err)
	}
	r := res.Targets[0]
	if r.State != contract.NodeOff || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "still reachable after shutdown: a still answers ssh") {
		t.Errorf("target %+v, want off with a warning that the relay was cut on a live device", r)
	}
	f.expectPhases([]string{"PowerShutdown a"}, []string{"PowerWaitUnreachable a"}, []string{"PowerRelayOff a"})
}

func TestPowerRejectsUnknownAction(t *testing.T) {
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Power, contract.PowerInput{Action: "reboot", Targets: []string{"a"}})
	app := appErr(t, f.env.GetWorkflowError())
	if app.Type() != "InvalidSpec" || !strings.Contains(app.Message(), `"reboot"`) {
		t.Errorf("error %q type %q, want InvalidSpec naming the action", app.Message(), app.Type())
	}
	if calls := f.callList(); len(calls) != 0 {
		t.Errorf("an invalid action ran activities: %v", calls)
	}
}

// TestPowerOffGearAfterTheNodesBehindIt: network gear goes off only after
// every node behind it is off — the nodes' whole sequence first, then the
// switch's API shutdown, wait and relay.
func TestPowerOffGearAfterTheNodesBehindIt(t *testing.T) {
	f := newFakeFleet(t)
	f.env.ExecuteWorkflow(Power, contract.PowerInput{Action: contract.PowerOff, Targets: []string{"a", "b"}, Gear: []contract.PowerGear{{Name: "sw", Behind: []string{"a", "b"}}}})
	res, err := powerResult(t, f)
	if err != nil {
		t.Fatalf("power off: %v", err)
	}
	if len(res.Targets) != 3 || res.Targets[2].Target != "sw" || res.Targets[2].State != contract.NodeOff || len(res.Targets[2].Steps) != 3 || len(res.Targets[2].Warnings) != 0 {
		t.Fatalf("targets %+v, want a, b, then sw off after 3 steps", res.Targets)
	}
	// Each node runs its own sequence (in parallel with the other); the
	// switch's whole sequence comes after both.
	calls := f.callList()
	if len(calls) != 9 {
		t.Fatalf("calls %v, want 9", calls)
	}
	for _, c := range calls[:6] {
		if strings.HasSuffix(c, " sw") {
			t.Fatalf("the switch was touched before its nodes were off: %v", calls)
		}
	}
	if strings.Join(calls[6:], ",") != "PowerShutdown sw,PowerWaitUnreachable sw,PowerRelayOff sw" {
		t.Errorf("switch sequence %v", calls[6:])
	}
}

// TestPowerOffGearStaysOnWhileANodeBehindItIsUp: a node behind the switch
// that failed to go off, or that is not in this run and still answers,
// keeps the switch on, with a warning naming it; the run fails only for
// the node.
func TestPowerOffGearStaysOnWhileANodeBehindItIsUp(t *testing.T) {
	f := newFakeFleet(t)
	f.powerErrs = map[string]error{"PowerShutdown b": newAppErr("ssh b: connection refused", "Permanent"), "PowerWaitUnreachable c": newAppErr("c still answers", "Permanent")}
	f.env.ExecuteWorkflow(Power, contract.PowerInput{Action: contract.PowerOff, Targets: []string{"a", "b"}, Gear: []contract.PowerGear{
		{Name: "sw1", Behind: []string{"a", "b"}}, {Name: "sw2", Behind: []string{"a", "c"}}, {Name: "sw3", Behind: []string{"a", "d"}}}})
	res, err := powerResult(t, f)
	if err == nil {
		t.Fatal("a node that failed to go off must fail the run")
	}
	byName := map[string]contract.PowerTargetResult{}
	for _, r := range res.Targets {
		byName[r.Target] = r
	}
	if r := byName["sw1"]; r.State != "on" || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "left on: nodes behind it are not off: b (unknown)") {
		t.Errorf("sw1 %+v, want on, naming b", r)
	}
	if r := byName["sw2"]; r.State != "on" || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "c (still answers)") {
		t.Errorf("sw2 %+v, want on, naming c", r)
	}
	if r := byName["sw3"]; r.State != contract.NodeOff || r.Error != "" {
		t.Errorf("sw3 %+v: d is down, so it goes off", r)
	}
	for _, sw := range []string{"sw1", "sw2"} {
		if n := f.count("PowerShutdown "+sw) + f.count("PowerRelayOff "+sw); n != 0 {
			t.Errorf("%s: %d power calls, want none while a node behind it is up", sw, n)
		}
	}
}

// TestPowerOffGearFailuresOnlyWarn: the switch's API shutdown and relay
// failing are warnings (its relay is still tried); the run succeeds.
func TestPowerOffGearFailuresOnlyWarn(t *testing.T) {
	f := newFakeFleet(t)
	f.powerErrs = map[string]error{"PowerShutdown sw": newAppErr("routeros: login refused", "Permanent"), "PowerRelayOff sw": newAppErr("home assistant: switch.sw unavailable", "Permanent")}
	f.env.ExecuteWorkflow(Power, contract.PowerInput{Action: contract.PowerOff, Targets: []string{"a"}, Gear: []contract.PowerGear{{Name: "sw", Behind: []string{"a"}}}})
	res, err := powerResult(t, f)
	if err != nil {
		t.Fatalf("gear failures must not fail the run: %v", err)
	}
	r := res.Targets[1]
	w := strings.Join(r.Warnings, "\n")
	if r.Target != "sw" || len(r.Warnings) != 2 || !strings.Contains(w, "API shutdown failed: routeros: login refused") || !strings.Contains(w, "relay off failed: home assistant: switch.sw unavailable") {
		t.Errorf("sw %+v", r)
	}
}
