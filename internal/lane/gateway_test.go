package lane

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// A run names the queues of the gateways that front its cluster (every
// gateway for a run by lane or nodes); each gateway keeps its table under
// state_dir by its name.
func TestGatewayQueuesAndStateFiles(t *testing.T) {
	cfg := &config.Config{StateDir: "/var/lib/sparklane", GatewayList: []config.Gateway{{Name: "a"}, {Name: "b", Clusters: []string{"c2"}}}}
	if q := GatewayQueues(cfg, ""); strings.Join(q, ",") != "gateway.a,gateway.b" {
		t.Errorf("queues %v, want gateway.a and gateway.b", q)
	}
	if q := GatewayQueues(cfg, "c1"); strings.Join(q, ",") != "gateway.a" {
		t.Errorf("queues for c1 %v, want gateway.a only (b fronts c2)", q)
	}
	if f := GatewayStateFile(cfg, cfg.Gateways()[0]); f != "/var/lib/sparklane/gateway/a.json" {
		t.Errorf("state file %s", f)
	}
	one := &config.Config{StateDir: "/s", Gateway: &config.Gateway{}}
	if f := GatewayStateFile(one, one.Gateways()[0]); f != "/s/gateway/default.json" || strings.Join(GatewayQueues(one, "x"), ",") != "gateway" {
		t.Errorf("the one [gateway]: %s %v", f, GatewayQueues(one, "x"))
	}
}
