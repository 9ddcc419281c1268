package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// knownNodes checks that every node in want (--node) is one of cfg's, and
// lists all of cfg's nodes.
func knownNodes(cfg *config.Config, want []string) ([]string, error) {
	all := allNodes(cfg)
	for _, n := range want {
		if !slices.Contains(all, n) {
			return nil, fmt.Errorf("--node %s: no such node in %s (nodes: %s)", n, cfg.File, strings.Join(all, ", "))
		}
	}
	return all, nil
}

// resolveName is the name of the lane (or alias) lane among rs.
func resolveName(rs []*config.Recipe, lane string) (string, error) {
	r, err := config.Resolve(rs, lane)
	if err != nil {
		return "", err
	}
	return r.Name, nil
}

// laneNode checks --node against the lane's plan before any workflow
// starts: a node the lane does not run on would otherwise be leased (and
// a stage queued for it) before the run failed.
func laneNode(plan *contract.LanePlan, node string) error {
	if node == "" {
		return nil
	}
	nodes := nodesOf(plan)
	if !slices.Contains(nodes, node) {
		return fmt.Errorf("--node %s: lane %s does not run on it (cluster %s: %s)", node, plan.Lane, plan.Cluster, strings.Join(nodes, ", "))
	}
	return nil
}
