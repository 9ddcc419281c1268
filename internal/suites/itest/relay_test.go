package itest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/engine/relay"
	"github.com/sparklane/sparklane/internal/pki"
)

// `starter stage` of a 3-node lane through the real server: the node
// workers relay the large blobs between them over mTLS (identities issued
// from the fleet CA under state_dir/pki, as the control service does), the
// NAS is read once per blob, the result says per node how many bytes came
// from the NAS and from which peers, and the verify step finds every node
// clean. A lane with relay = false reads the NAS on every node.
func TestStageRelaysBetweenNodes(t *testing.T) {
	nasDir := filepath.Join(t.TempDir(), "nas")
	nas, err := demo.GenerateNAS(nasDir, 96<<20) // 4 blobs of 24 MiB
	if err != nil {
		t.Fatal(err)
	}
	recipe := func(name, dst, extra string) string {
		return fmt.Sprintf(`name = %q
cluster = "trio"
runtime = "sim"
image = "sparklane/engine-sim:latest"
model = %q
command = "/engine-sim /hub --port {port}"
%s
[[staging]]
kind = "hub-mirror"
id = "weights"
src = %q
dst = %q
repos = [%q]
verify = "sha256"
`, name, demo.ModelRepo, extra, nas.Hub, dst, demo.ModelRepo)
	}
	f := newFleet(t, fleetOptions{nodes: 3, clusters: map[string][]string{"trio": {"n1", "n2", "n3"}}, shared: nasDir,
		recipes: map[string]string{
			"relayed": recipe("relayed", "/srv/relayed", ""),
			"own":     recipe("own", "/srv/own", "relay = false"),
		}})
	if _, err := pki.IssueFleetIdentities(pki.FleetDir(f.cfg.StateDir), config.FleetHosts(f.cfg.Nodes)); err != nil {
		t.Fatal(err)
	}
	f.startControl()
	for _, n := range []string{"n1", "n2", "n3"} {
		f.startNode(n)
	}
	ctx := withTimeout(t, 5*time.Minute)
	type block struct {
		Block string `json:"block"`
		contract.BlockResult
	}
	type out struct {
		Nodes []struct {
			Node   string  `json:"node"`
			Blocks []block `json:"blocks"`
		} `json:"nodes"`
	}
	stage := func(lane string) out {
		t.Helper()
		code, stdout, stderr := f.starter(ctx, "stage", "--lane", lane, "--json")
		if code != 0 {
			t.Fatalf("stage --lane %s: exit %d\n%s\n%s", lane, code, stdout, stderr)
		}
		var o out
		if err := json.Unmarshal([]byte(stdout), &o); err != nil {
			t.Fatalf("stage --json: %v\n%s", err, stdout)
		}
		if len(o.Nodes) != 3 {
			t.Fatalf("stage --lane %s: %d nodes in %s", lane, len(o.Nodes), stdout)
		}
		return o
	}
	var blobs int64
	ents, err := os.ReadDir(filepath.Join(demo.RepoDir(nas.Hub, demo.ModelRepo), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && fi.Size() >= relay.MinRelaySize {
			blobs += fi.Size()
		}
	}
	if blobs == 0 {
		t.Fatal("no blob of the generated NAS is large enough to relay")
	}
	o := stage("relayed")
	var peers int64
	for _, n := range o.Nodes {
		r := n.Blocks[0].BlockResult
		t.Logf("%s: copied %s, from NAS %s, from peers %v, relay %+v", n.Node, contract.HumanBytes(r.CopiedBytes), contract.HumanBytes(r.FromNAS), r.FromPeers, r.Relay)
		if r.Relay == nil || r.Relay.Error != "" || len(r.Relay.PeerFailures) > 0 {
			t.Errorf("%s: relay report %+v", n.Node, r.Relay)
		}
		for p, b := range r.FromPeers {
			if p == n.Node || b < 0 {
				t.Errorf("%s: %d B from %s", n.Node, b, p)
			}
			peers += b
		}
	}
	// Each blob is read from the NAS by one node and relayed to two.
	if peers != 2*blobs {
		t.Errorf("bytes relayed between nodes %d, want 2 × %d (each blob read from the NAS once)", peers, blobs)
	}
	o = stage("own")
	for _, n := range o.Nodes {
		if r := n.Blocks[0].BlockResult; r.Relay != nil || len(r.FromPeers) > 0 {
			t.Errorf("relay = false: %s relayed anyway: %+v", n.Node, r)
		}
	}
}
