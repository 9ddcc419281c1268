package itest

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/hatest"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// The replay corpus's Power paths, through the real server and workers: a
// forced power off (graceful shutdown over real sshd, the switch still
// answering, the relay cut anyway on a Home Assistant test double) and a
// power on that fails on a refused token. Histories are written with
// SPARKLANE_WRITE_HISTORIES=1.
func TestReplayCorpusPower(t *testing.T) {
	const tokenEnv = "SPARKLANE_ITEST_CORPUS_HA_TOKEN"
	t.Setenv(tokenEnv, "corpus-ha-token")
	ha := hatest.Start(t, "corpus-ha-token")
	ha.AddSwitch("switch.rack_switch", "on")
	sshd := sshdtest.Start(t)
	marker := filepath.Join(t.TempDir(), "shutdown-ran")
	tail := switchDevice(sshd, "", ha.URL, tokenEnv, marker)
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"solo": {"n1"}}, tail: tail})
	f.startControl()
	f.startNode("n1")
	ctx := withTimeout(t, 3*time.Minute)

	code, out, errOut := f.starter(ctx, "power", "off", "switch1", "--force", "--wait", "3s", "--json")
	if code != 0 || ha.State("switch.rack_switch") != "off" {
		t.Fatalf("power off --force: exit %d, relay %s\n%s\n%s", code, ha.State("switch.rack_switch"), out, errOut)
	}
	saveHistory(t, f, contract.PowerID("off", "switch1"), "power-off-forced")

	t.Setenv(tokenEnv, "refused-token")
	code, out, errOut = f.starter(ctx, "power", "on", "switch1", "--wait", "3s")
	if code == 0 || !strings.Contains(out+errOut, "401") {
		t.Fatalf("power on with a refused token: exit %d, want a 401 failure\n%s\n%s", code, out, errOut)
	}
	saveHistory(t, f, contract.PowerID("on", "switch1"), "power-on-refused")
}
