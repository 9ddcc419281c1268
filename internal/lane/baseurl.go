package lane

import (
	"net"
	"strconv"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// BaseURL is the lane's OpenAI-compatible API on its head node.
func BaseURL(cfg *config.Config, plan contract.LanePlan) string {
	host := plan.HeadAddr
	for _, n := range cfg.Nodes {
		if len(plan.Nodes) > 0 && n.Name == plan.Nodes[0].Node && n.Address != "" {
			host = n.Address
		}
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(plan.APIPort))
}
