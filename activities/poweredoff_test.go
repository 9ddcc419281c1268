package activities

import (
	"context"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// The record of a node sparklane powered down: written when its power-off
// sequence ends, read by NodeOff, forgotten when it is up again; gear
// ([[devices]]) is never recorded.
func TestPoweredOffRecord(t *testing.T) {
	a := &ControlActivities{Config: &config.Config{StateDir: t.TempDir(), Nodes: []config.Node{{Name: "n2"}}, Devices: []config.Device{{Name: "sw"}}}}
	ctx := context.Background()
	if r, err := a.NodeOff(ctx, contract.NodeOffInput{Node: "n2"}); err != nil || r.Off {
		t.Fatalf("before power off: %+v %v", r, err)
	}
	if _, err := a.PowerRelayOff(ctx, contract.PowerStepInput{Target: "n2"}); err != nil {
		t.Fatal(err)
	}
	r, err := a.NodeOff(ctx, contract.NodeOffInput{Node: "n2"})
	if err != nil || !r.Off || !strings.HasPrefix(r.Why, "powered off by sparklane at ") {
		t.Fatalf("after power off: %+v %v", r, err)
	}
	if _, err := a.PowerRelayOff(ctx, contract.PowerStepInput{Target: "sw"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := a.NodeOff(ctx, contract.NodeOffInput{Node: "sw"}); r.Off {
		t.Errorf("gear recorded as a powered-off node: %+v", r)
	}
	if err := a.clearPoweredOff("n2"); err != nil {
		t.Fatal(err)
	}
	if r, _ := a.NodeOff(ctx, contract.NodeOffInput{Node: "n2"}); r.Off {
		t.Errorf("after power on: %+v, want not off", r)
	}
}
