package itest

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/memfit"
)

// A 3-node local fleet with one node's worker stopped: that node is
// unreachable with the reason, the others free — through the real CLI.
func TestStatusNamesTheNodeWhoseWorkerIsStopped(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 3, clusters: map[string][]string{"trio": {"n1", "n2", "n3"}}})
	f.startControl()
	f.startNode("n1")
	f.startNode("n2")
	f.startNode("n3")
	f.stopNode("n3")
	ctx := withTimeout(t, 2*time.Minute)
	start := time.Now()
	code, out, errOut := f.starter(ctx, "status", "--json")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("status exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var res contract.FleetProbeResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, out)
	}
	got := map[string]contract.NodeState{}
	for _, n := range res.Nodes {
		got[n.Node] = n
	}
	for _, n := range []string{"n1", "n2"} {
		if got[n].State != contract.NodeFree {
			t.Errorf("%s: state %q (%s), want free", n, got[n].State, got[n].Why)
		}
		if len(got[n].Roots) != 1 || got[n].Roots[0].Free <= 0 {
			t.Errorf("%s: roots %+v, want one root with free bytes", n, got[n].Roots)
		}
	}
	if got["n3"].State != contract.NodeUnreachable || !strings.Contains(got["n3"].Why, "node.n3") {
		t.Errorf("n3: %+v, want unreachable naming its queue node.n3", got["n3"])
	}
	// Each live worker reports this host's memory, and the starter keeps
	// it for the memory fit of recipe check and cutover.
	mem, err := memfit.ReadMemTotal("")
	if err != nil {
		t.Fatal(err)
	}
	kept := memfit.LoadDiscovered(filepath.Join(f.dir, "state"))
	for _, n := range []string{"n1", "n2"} {
		if got[n].Memory != mem || kept[n] != mem {
			t.Errorf("%s: memory %d, recorded %d; want MemTotal %d", n, got[n].Memory, kept[n], mem)
		}
	}
	if _, ok := kept["n3"]; ok {
		t.Error("the unreachable node's memory was recorded")
	}
	t.Logf("status of 3 nodes (one down) took %s", took)
	if took > 30*time.Second {
		t.Errorf("status took %s; the pickup timeout should bound it", took)
	}
}

// With --lane, a required node that stays unreachable makes the probe retry
// once after probe_grace and then fail listing every node's state.
func TestStatusForLaneReprobesThenFailsListingEveryNode(t *testing.T) {
	recipe := `name = "pair"
cluster = "duo"
runtime = "sim"
image = "sparklane/engine-sim:latest"
model = "demo/sim-model"
command = "/engine-sim /hub --port {port}"
`
	f := newFleet(t, fleetOptions{nodes: 2, clusters: map[string][]string{"duo": {"n1", "n2"}}, recipes: map[string]string{"pair": recipe}})
	f.startControl()
	f.startNode("n1")
	ctx := withTimeout(t, 2*time.Minute)
	code, out, errOut := f.starter(ctx, "status", "--lane", "pair", "--json")
	if code == 0 {
		t.Fatalf("status --lane with n2 down exited 0\n%s", out)
	}
	var res contract.FleetProbeResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("no JSON states on failure: %v\n%s\n%s", err, out, errOut)
	}
	if res.Attempt != 2 {
		t.Errorf("attempt %d, want 2 (one re-probe after the grace period)", res.Attempt)
	}
	for _, want := range []string{"n1: free", "n2: unreachable", "attempt 2"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("error %q does not say %q", errOut, want)
		}
	}
}
