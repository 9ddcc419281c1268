package power_test

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/engine/power"
	"github.com/sparklane/sparklane/internal/fault"
)

func TestValidate(t *testing.T) {
	good := []power.Target{
		power.NodeTarget(config.Node{Name: "dgx1", SSH: "root@10.0.0.11:22", Power: config.Power{
			Relay: "switch.dgx1_outlet", HAURL: "http://ha.local:8123", TokenEnv: "HA_TOKEN", WOL: "3c:ec:ef:01:02:03", Broadcast: "10.0.0.255"}}),
		power.DeviceTarget(config.Device{Name: "sw1", Power: config.Power{
			Relay: "switch.sw1", HAURL: "https://ha", TokenFile: "/etc/sparklane/ha.token", Shutdown: "routeros:admin@10.0.0.2?password_env=SW_PW"}}),
		power.NodeTarget(config.Node{Name: "plain"}),
	}
	for _, g := range good {
		if err := power.Validate(g); err != nil {
			t.Errorf("%s: %v", g.Name, err)
		}
	}
	bad := power.DeviceTarget(config.Device{Name: "sw2", Power: config.Power{
		Relay: "outlet", WOL: "nope", Broadcast: "lan", Shutdown: "ssh:poweroff"}})
	err := power.Validate(bad)
	if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec {
		t.Fatalf("want InvalidSpec, got %v", err)
	}
	for _, want := range []string{"device sw2: power.relay", "power.ha_url", "power.token_env", "power.wol", "power.broadcast", "power.shutdown: ssh shutdown needs ssh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
