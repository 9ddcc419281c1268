package workers

import (
	"context"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/metrics"
)

// seedControlMetrics gives the control service's dashboards series from
// the first scrape: sparklane_node_up for every node of the fleet (is a
// worker polling node.NAME?), node outage at 0, and each lane's readiness,
// probe and bench series at 0 until a run records them.
func seedControlMetrics(c client.Client, cfg *config.Config, m *metrics.Metrics) {
	if m == nil {
		return
	}
	for _, n := range cfg.Nodes {
		name := n.Name
		m.ZeroNode(name)
		m.NodeCheck(name, func(ctx context.Context) bool { return polled(ctx, c, name) })
	}
	set, _ := config.LoadRecipeSet(cfg, cfg.File) // what loads: broken recipes are the CLI's to report
	if set == nil {
		return
	}
	for _, r := range set.Recipes {
		m.ZeroLane(r.Name)
	}
}

// seedNodeMetrics marks node name up (this process serves it) and gives
// the staging and verify series of every block of the lanes whose
// cluster holds it, and their image bytes from each other node of the
// cluster, a zero to start from.
func seedNodeMetrics(cfg *config.Config, name string, m *metrics.Metrics) {
	if m == nil {
		return
	}
	m.NodeServed(name)
	set, _ := config.LoadRecipeSet(cfg, cfg.File)
	if set == nil {
		return
	}
	for _, r := range set.Recipes {
		cl := r.Cluster
		if cl == "" {
			cl = cfg.DefaultCluster
		}
		c := cfg.Cluster(cl)
		if c == nil || !slices.Contains(c.Nodes, name) {
			continue
		}
		var blocks []string
		for _, s := range r.Staging {
			blocks = append(blocks, s.ID)
		}
		m.ZeroBlocks(r.Name, name, blocks)
		m.ZeroImages(r.Name, name, c.Nodes)
	}
}

// polled says whether a worker polled node.NAME's activity queue in the
// last 90 s (a live worker long-polls at least every minute).
func polled(ctx context.Context, c client.Client, node string) bool {
	resp, err := c.DescribeTaskQueue(ctx, contract.NodeQueue(node), enumspb.TASK_QUEUE_TYPE_ACTIVITY)
	if err != nil {
		return false
	}
	for _, p := range resp.GetPollers() {
		if t := p.GetLastAccessTime(); t != nil && time.Since(t.AsTime()) < 90*time.Second {
			return true
		}
	}
	return false
}
