package workflows

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

func TestFleetProbeAllFree(t *testing.T) {
	f := newFakeFleet(t)
	f.local["a"] = true
	f.env.ExecuteWorkflow(FleetProbe, contract.FleetProbeInput{Nodes: []string{"a", "b", "c"}, Require: []string{"a", "b"}, Lane: "new"})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("FleetProbe: %v", err)
	}
	var res contract.FleetProbeResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Attempt != 1 || len(res.Nodes) != 3 {
		t.Fatalf("result %+v: want attempt 1 and 3 nodes", res)
	}
	for i, want := range []string{"a", "b", "c"} {
		st := res.Nodes[i]
		if st.Node != want || st.State != contract.NodeFree || st.Worker != "polling" || len(st.Roots) != 1 || st.Memory != 128e9 {
			t.Errorf("node %d = %+v, want %s free with a polling worker, its roots and its memory", i, st, want)
		}
	}
	if res.Nodes[0].SSH != "local" || res.Nodes[1].SSH != "ok" {
		t.Errorf("ssh column: a=%q b=%q, want local and ok", res.Nodes[0].SSH, res.Nodes[1].SSH)
	}
	f.expectPhases(cat([]string{"CheckSSH a", "CheckSSH b", "CheckSSH c"}, on("NodeStatus", "a", "b", "c")))
}

func TestFleetProbeOccupiedUnreachableAndOff(t *testing.T) {
	f := newFakeFleet(t)
	f.lanesOn["a"] = []string{"old"}
	f.notPolling["b"] = true
	f.sshOff["c"] = "relay switch.c_outlet is off"
	f.sshDown["d"] = "dial tcp 10.0.0.4:22: connection refused"
	f.env.ExecuteWorkflow(FleetProbe, contract.FleetProbeInput{Nodes: []string{"a", "b", "c", "d"}})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("FleetProbe without Require must not fail: %v", err)
	}
	var res contract.FleetProbeResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	a, b, c, d := res.Nodes[0], res.Nodes[1], res.Nodes[2], res.Nodes[3]
	if a.State != contract.NodeOccupied || len(a.Lanes) != 1 || a.Lanes[0] != "old" || a.String() != "occupied (lane old)" {
		t.Errorf("a = %+v (%s), want occupied by old", a, a)
	}
	if b.State != contract.NodeUnreachable || b.Worker != "not polling" || !strings.Contains(b.Why, "node.b") || !strings.Contains(b.Why, "worker node --node b") {
		t.Errorf("b = %+v, want unreachable naming queue node.b and how to start its worker", b)
	}
	if c.State != contract.NodeOff || c.Why != "relay switch.c_outlet is off" {
		t.Errorf("c = %+v, want off with the relay's reason", c)
	}
	if d.State != contract.NodeUnreachable || d.SSH != "failed" || !strings.Contains(d.Why, "ssh: dial tcp") {
		t.Errorf("d = %+v, want unreachable over ssh", d)
	}
}

func TestFleetProbeRequireFailsWithNotEnoughNodes(t *testing.T) {
	f := newFakeFleet(t)
	f.notPolling["b"] = true
	f.env.ExecuteWorkflow(FleetProbe, contract.FleetProbeInput{Nodes: []string{"a", "b"}, Require: []string{"a", "b"}, Lane: "new"})
	app := appErr(t, f.env.GetWorkflowError())
	if app.Type() != fault.NotEnoughNodes {
		t.Fatalf("error type %q, want %s: %v", app.Type(), fault.NotEnoughNodes, app)
	}
	if app.NonRetryable() {
		t.Error("NotEnoughNodes must stay retryable: the caller's retry policy is the re-probe")
	}
	for _, want := range []string{"lane new", "but b not usable", "a: free", "b: unreachable (node worker not polling node.b"} {
		if !strings.Contains(app.Message(), want) {
			t.Errorf("message %q lacks %q", app.Message(), want)
		}
	}
	var res contract.FleetProbeResult
	if err := app.Details(&res); err != nil {
		t.Fatalf("details: %v", err)
	}
	if len(res.Nodes) != 2 || res.Nodes[0].State != contract.NodeFree || res.Nodes[1].State != contract.NodeUnreachable {
		t.Errorf("details %+v, want a free and b unreachable", res)
	}
}
