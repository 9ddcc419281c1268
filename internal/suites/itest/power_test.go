package itest

import (
	"context"
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

// Power off through the real CLI and workflow: graceful shutdown over real
// sshd (host key checked), then the outlet relay off on a Home Assistant
// test double; a node whose relay is off shows as "off" in the fleet probe;
// a wrong token is a clear error; the token never enters the history.
func TestPowerOffRelayAndTokenStaysOutOfHistory(t *testing.T) {
	const token = "ha-secret-token-7f3c9e"
	const tokenEnv = "SPARKLANE_ITEST_HA_TOKEN"
	t.Setenv(tokenEnv, token)
	ha := hatest.Start(t, token) // test double of Home Assistant's REST API
	ha.AddSwitch("switch.rack_switch", "on")
	ha.AddSwitch("switch.n2_outlet", "off")
	sshd := sshdtest.Start(t)
	marker := filepath.Join(t.TempDir(), "shutdown-ran")
	tail := switchDevice(sshd, "", ha.URL, tokenEnv, marker)
	n2 := fmt.Sprintf("[nodes.power]\nrelay = \"switch.n2_outlet\"\nha_url = %q\ntoken_env = %q\n", ha.URL, tokenEnv)
	f := newFleet(t, fleetOptions{nodes: 2, clusters: map[string][]string{"duo": {"n1", "n2"}}, nodeExtra: map[string]string{"n2": n2}, tail: tail})
	f.startControl()
	f.startNode("n1")
	ctx := withTimeout(t, 3*time.Minute)

	// The fleet probe says n2 is off (its relay is), not merely unreachable.
	code, out, errOut := f.starter(ctx, "status", "--json")
	if code != 0 {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	var probe contract.FleetProbeResult
	if err := json.Unmarshal([]byte(out), &probe); err != nil {
		t.Fatal(err)
	}
	for _, n := range probe.Nodes {
		if n.Node == "n2" && (n.State != contract.NodeOff || !strings.Contains(n.Why, "switch.n2_outlet")) {
			t.Errorf("n2: %+v, want off naming its relay", n)
		}
	}

	// The switch keeps answering on loopback (sshd stays up), so without
	// --force the relay would be left on; with it, off ends with the relay off.
	code, out, errOut = f.starter(ctx, "power", "off", "switch1", "--force", "--wait", "3s", "--json")
	if code != 0 {
		t.Fatalf("power off: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("graceful shutdown command did not run over SSH: %v", err)
	}
	if got := ha.State("switch.rack_switch"); got != "off" {
		t.Errorf("relay state %q after power off, want off", got)
	}
	var res contract.PowerResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Targets) != 1 || res.Targets[0].State != contract.NodeOff {
		t.Errorf("power result %+v", res)
	}
	if calls := strings.Join(ha.ServiceCalls(), ","); !strings.Contains(calls, "turn_off") {
		t.Errorf("HA service calls %q: want turn_off", calls)
	}

	// A wrong token: a clear error that names the variable, not the token.
	t.Setenv(tokenEnv, "wrong-token-value")
	code, out, errOut = f.starter(ctx, "power", "on", "switch1", "--wait", "3s")
	if code == 0 || !strings.Contains(out+errOut, "401") || !strings.Contains(out+errOut, tokenEnv) {
		t.Errorf("wrong token: exit %d, output %q %q; want a 401 error naming %s", code, out, errOut, tokenEnv)
	}
	if strings.Contains(out+errOut, "wrong-token-value") {
		t.Errorf("the token leaked into the CLI output")
	}

	// Read every power run's history back through the client and search it.
	for _, action := range []string{"off", "on"} {
		id := contract.PowerID(action, "switch1")
		events := 0
		for _, e := range historyEvents(context.Background(), t, f.env.Client, id) {
			events++
			b, _ := json.Marshal(e)
			if strings.Contains(string(b), token) || strings.Contains(string(b), "wrong-token-value") {
				t.Fatalf("history of %s holds the token (event %d)", id, e.GetEventId())
			}
		}
		if events < 5 {
			t.Errorf("history of %s has %d events; searched nothing?", id, events)
		}
	}
}

// switchDevice is the [[devices]] entry of switch1 for a fleet's tail:
// reached over sshd, powered through the Home Assistant relay
// switch.rack_switch, shut down by touching marker; extra lines (behind)
// go before its [devices.power].
func switchDevice(sshd *sshdtest.Server, extra, haURL, tokenEnv, marker string) string {
	return fmt.Sprintf(`[[devices]]
name = "switch1"
ssh = "root@127.0.0.1:%d"
known_hosts = %q
identity = %q
%s[devices.power]
relay = "switch.rack_switch"
ha_url = %q
token_env = %q
shutdown = "ssh:touch %s"
`, sshd.Port, sshd.KnownHostsFile, sshd.IdentityFile, extra, haURL, tokenEnv, marker)
}
