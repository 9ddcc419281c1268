package itest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/hatest"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// power off --cluster through the real CLI, server and workers: the
// cluster's nodes go off first (their relays on a Home Assistant test
// double), then the switch they sit behind — API shutdown over real sshd,
// then its relay — never the switch before them. The run's history is the
// replay corpus's power-off-gear.
func TestReplayCorpusPowerOffClusterGearLast(t *testing.T) {
	const tokenEnv = "SPARKLANE_ITEST_GEAR_HA_TOKEN"
	t.Setenv(tokenEnv, "gear-ha-token")
	ha := hatest.Start(t, "gear-ha-token") // test double of Home Assistant's REST API
	for _, e := range []string{"switch.rack_switch", "switch.n1_outlet", "switch.n2_outlet"} {
		ha.AddSwitch(e, "on")
	}
	sshd := sshdtest.Start(t)
	marker := filepath.Join(t.TempDir(), "switch-shutdown-ran")
	tail := switchDevice(sshd, "behind = [\"n1\", \"n2\"]\n", ha.URL, tokenEnv, marker)
	relay := func(n string) string {
		return fmt.Sprintf("[nodes.power]\nrelay = \"switch.%s_outlet\"\nha_url = %q\ntoken_env = %q\n", n, ha.URL, tokenEnv)
	}
	f := newFleet(t, fleetOptions{nodes: 2, clusters: map[string][]string{"duo": {"n1", "n2"}}, nodeExtra: map[string]string{"n1": relay("n1"), "n2": relay("n2")}, tail: tail})
	f.startControl()
	ctx := withTimeout(t, 3*time.Minute)

	// The nodes here have no SSH to probe, and the switch's sshd stays up
	// on loopback: --force cuts the relays after the bounded wait.
	code, out, errOut := f.starter(ctx, "power", "off", "--cluster", "duo", "--force", "--wait", "2s", "--json")
	if code != 0 {
		t.Fatalf("power off --cluster duo: exit %d\n%s\n%s", code, out, errOut)
	}
	var res contract.PowerResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Targets) != 3 || res.Targets[2].Target != "switch1" || res.Targets[2].State != contract.NodeOff {
		t.Fatalf("power result %+v, want n1, n2, then switch1 off", res.Targets)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the switch's API shutdown did not run over SSH: %v", err)
	}
	calls := ha.ServiceCalls()
	last := -1
	for i, c := range calls {
		if strings.HasSuffix(c, "switch.rack_switch") {
			last = i
		}
	}
	if last < 0 || ha.State("switch.rack_switch") != "off" || ha.State("switch.n1_outlet") != "off" || ha.State("switch.n2_outlet") != "off" {
		t.Fatalf("relays after power off: %v", calls)
	}
	for _, c := range calls[last:] {
		if strings.Contains(c, "_outlet") {
			t.Errorf("a node relay was switched after the switch: %v", calls)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		if !strings.Contains(strings.Join(calls[:last], ","), "turn_off switch."+n+"_outlet") {
			t.Errorf("node %s relay not switched off before the switch: %v", n, calls)
		}
	}
	saveHistory(t, f, contract.PowerID("off", "n1,n2,switch1"), "power-off-gear")
}
