package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
)

// simDemoFleet is a fleet of n nodes (one cluster of all of them, the
// default) whose recipes_dir holds the shipped recipes/sim-demo.toml as it
// is, and whose NAS hub root is hub ("" for none).
func simDemoFleet(t *testing.T, n int, hub string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "recipes", "sim-demo.toml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeConfigTestFile(t, filepath.Join(dir, "recipes"), "sim-demo.toml", string(b))
	body := fmt.Sprintf("recipes_dir = %q\nstate_dir = %q\nshared_roots = [\"/mnt/nas\"]\ndefault_cluster = \"all\"\n", filepath.Join(dir, "recipes"), filepath.Join(dir, "state"))
	if hub != "" {
		body += fmt.Sprintf("hf_cache_dir = %q\n", hub)
	}
	var names []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("spark%d", i)
		names = append(names, fmt.Sprintf("%q", name))
		body += fmt.Sprintf("[[nodes]]\nname = %q\naddress = \"10.0.0.%d\"\nroots = [\"/mnt/nvme/sparklane\"]\n", name, i)
	}
	body += fmt.Sprintf("[[clusters]]\nname = \"all\"\nnodes = [%s]\n", strings.Join(names, ", "))
	return writeConfigTestFile(t, dir, "sparklane.toml", body)
}

// The shipped sim lane works unedited on a 1-node and a 3-node fleet:
// listed by `lanes`, green in `recipe check`, rendered as one rank per
// node of the cluster it is sent to (the engine's multi-node flags only
// with more than one), staging from the fleet's own NAS hub
// root ({hf_cache_dir}); a fleet without hf_cache_dir is told to set it.
func TestShippedSimDemoOnOneAndThreeNodes(t *testing.T) {
	for _, n := range []int{1, 3} {
		cfgPath := simDemoFleet(t, n, "/mnt/nas/hub")
		code, out, errOut := runStarter(t, "--config", cfgPath, "lanes")
		if code != 0 || !strings.Contains(out, "sim-demo") || strings.Contains(out, "BROKEN") || errOut != "" {
			t.Errorf("%d nodes: lanes: exit %d\n%s%s", n, code, out, errOut)
		}
		code, out, errOut = runStarter(t, "--config", cfgPath, "recipe", "check")
		if code != 0 {
			t.Errorf("%d nodes: recipe check: exit %d\n%s%s", n, code, out, errOut)
		}
		code, out, errOut = runStarter(t, "--config", cfgPath, "--json", "recipe", "render", "--lane", "sim")
		var plan contract.LanePlan
		if code != 0 || json.Unmarshal([]byte(out), &plan) != nil {
			t.Fatalf("%d nodes: render: exit %d\n%s%s", n, code, out, errOut)
		}
		if len(plan.Nodes) != n || plan.TP != n || plan.Runtime != "sim" || plan.Cluster != "all" {
			t.Errorf("%d nodes: plan of %d ranks, tp %d, runtime %s on %s", n, len(plan.Nodes), plan.TP, plan.Runtime, plan.Cluster)
		}
		for _, np := range plan.Nodes {
			if len(np.Mounts) != 1 || np.Mounts[0].Src != "/mnt/nvme/sparklane/sim-demo/hub" || np.Mounts[0].Dst != "/hub" || (n > 1) != strings.Contains(np.Command, fmt.Sprintf("--nnodes %d", n)) {
				t.Errorf("%d nodes: rank %d mounts %+v command %s", n, np.Rank, np.Mounts, np.Command)
			}
		}
		// No control service runs: the plan alone, fetching into the
		// fleet's hub root.
		code, out, errOut = runStarter(t, "--config", cfgPath, "stage", "--lane", "sim", "--fetch", "--dry-run")
		if code != 0 || !strings.Contains(out, "fetch optimum-internal-testing/tiny-random-llama@main from the Hub into /mnt/nas/hub on control") {
			t.Errorf("%d nodes: the block does not fetch into the fleet's hub root: exit %d\n%s%s", n, code, out, errOut)
		}
	}
	cfgPath := simDemoFleet(t, 1, "")
	code, out, errOut := runStarter(t, "--config", cfgPath, "recipe", "check")
	if code == 0 || !strings.Contains(out+errOut, "staging[0].src: {hf_cache_dir}: "+cfgPath+" sets no hf_cache_dir") {
		t.Errorf("no hf_cache_dir: recipe check exit %d\n%s%s", code, out, errOut)
	}
}
