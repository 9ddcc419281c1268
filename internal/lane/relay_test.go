package lane

import (
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// relay is on by default for a multi-node lane whose nodes have addresses;
// relay = false in the recipe or the config turns it off; a single node
// has no one to relay to.
func TestRelayPlan(t *testing.T) {
	cfg := simFleet(t)
	cfg.Nodes[0].Address, cfg.Nodes[1].Address = "10.0.0.1", "10.0.0.2"
	r := &config.Recipe{File: "lane.toml", Name: "demo", Cluster: "pair", Runtime: "sim", Image: "sim", Model: "org/m", Command: "engine-sim"}
	plan, err := Render(cfg, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Relay == nil || len(plan.Relay.Peers) != 2 {
		t.Fatalf("relay plan %+v, want both nodes", plan.Relay)
	}
	for n, addr := range plan.Relay.Peers {
		if node := cfg.Node(n); node == nil || addr != node.Address+":7290" {
			t.Errorf("peer %s at %s, want its address and the default relay_port", n, addr)
		}
	}
	off := false
	r.Relay = &off
	if plan, _ := Render(cfg, r, nil); plan.Relay != nil {
		t.Errorf("recipe relay = false: relay plan %+v", plan.Relay)
	}
	r.Relay = nil
	cfg.Relay = &off
	if plan, _ := Render(cfg, r, nil); plan.Relay != nil {
		t.Errorf("config relay = false: relay plan %+v", plan.Relay)
	}
	on := true
	r.Relay = &on
	if plan, _ := Render(cfg, r, nil); plan.Relay == nil {
		t.Error("recipe relay = true does not win over the config's false")
	}
	cfg.Nodes[1].Address = ""
	if plan, _ := Render(cfg, r, nil); plan.Relay != nil {
		t.Errorf("a node without an address: relay plan %+v", plan.Relay)
	}
}
