package lane

import (
	"path/filepath"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// GatewayQueues are the task queues (contract.GatewayQueue) of c's
// gateways that front cluster, or with cluster "" of every gateway: the
// Gateways a run's input names.
func GatewayQueues(c *config.Config, cluster string) []string {
	var out []string
	for _, g := range c.Gateways() {
		if cluster == "" || g.Fronts(cluster) {
			out = append(out, contract.GatewayQueue(g.Name))
		}
	}
	return out
}

// GatewayStateFile is where gateway g keeps its route table on the
// control host (contract.GatewayTableFile): STATE_DIR/gateway/NAME.json,
// "default.json" for the one [gateway].
func GatewayStateFile(c *config.Config, g config.Gateway) string {
	name := g.Name
	if name == "" {
		name = "default"
	}
	return filepath.Join(c.StateDir, "gateway", name+".json")
}
