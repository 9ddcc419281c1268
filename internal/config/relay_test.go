package config

import (
	"strings"
	"testing"
)

// relay is on by default for a multi-node lane whose nodes have addresses;
// relay = false in the recipe or the config turns it off; a single node
// has no one to relay to.
func TestRelayPlan(t *testing.T) {
	cfg := simFleet(t)
	cfg.Nodes[0].Address, cfg.Nodes[1].Address = "10.0.0.1", "10.0.0.2"
	r := &Recipe{File: "lane.toml", Name: "demo", Cluster: "pair", Runtime: "sim", Image: "sim", Model: "org/m", Command: "engine-sim"}
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

func TestRelayKeysLoadAndValidate(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "sparklane.toml", "relay = false\nrelay_port = 7400\n"+goodConfig)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Relay == nil || *cfg.Relay || cfg.RelayPort != 7400 {
		t.Errorf("relay %v, relay_port %d", cfg.Relay, cfg.RelayPort)
	}
	p = writeFile(t, dir, "bad.toml", "relay_port = 70000\n"+goodConfig)
	bad, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(bad, nil); err == nil || !strings.Contains(err.Error(), "relay_port") {
		t.Errorf("relay_port = 70000: %v, want an error naming relay_port", err)
	}
	p = writeFile(t, dir, "lane.toml", "name = \"lane\"\ncluster = \"pair\"\nruntime = \"sim\"\nimage = \"sim\"\nmodel = \"org/m\"\ncommand = \"engine-sim\"\nrelay = false\n")
	r, err := LoadRecipe(p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Relay == nil || *r.Relay {
		t.Errorf("recipe relay = false loaded as %v", r.Relay)
	}
}
