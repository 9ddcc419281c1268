package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

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

// startWorkerHint is how to get node's worker polling again, by the kind
// of node: a remote node's worker is the node service `starter fleet
// install` puts there (the workflows' own hint, "worker node --node N",
// is wrong advice for it); a local node's runs inside the control
// service, which loads its nodes when it starts — or, beside an external
// cluster, in a `worker node` of its own.
func startWorkerHint(cfg *config.Config, node string) string {
	n := cfg.Node(node)
	if n != nil && n.SSH == "" {
		return fmt.Sprintf("no worker polls %s: %s is a local node, whose worker runs inside the control service — restart it so it loads the node (starter control stop; the next command starts it), or run 'worker node --node %s --config %s' beside an external cluster", contract.NodeQueue(node), node, node, cfg.File)
	}
	return fmt.Sprintf("no node service polls %s: install or restart it with: starter fleet install %s (its state: starter fleet status %s)", contract.NodeQueue(node), node, node)
}

// queueIdle says no worker polls node's activity queue now (asked of the
// server, so a hint never rests on an error's text); false when unknown.
func (a *App) queueIdle(ctx context.Context, node string) bool {
	if a.env == nil {
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := a.env.Client.DescribeTaskQueue(qctx, contract.NodeQueue(node), enumspb.TASK_QUEUE_TYPE_ACTIVITY)
	return err == nil && len(d.GetPollers()) == 0
}
