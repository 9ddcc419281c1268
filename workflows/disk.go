package workflows

import (
	"fmt"
	"sort"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
)

// Disk lists (and with Prune, prunes) the staged blocks on the nodes. It
// is a workflow so a prune started by a starter that is killed still
// finishes and is visible in the web UI.
func Disk(ctx workflow.Context, in contract.DiskInput) (contract.DiskResult, error) {
	t := newTracker(ctx, "Disk", "")
	pickup := in.PickupTimeout.D()
	run := func(n, what string) workflow.Context {
		return summarize(nodeOpts(ctx, n, pickup, callBudget{run: 30 * time.Minute, heartbeat: time.Minute, attempts: 1}), n, -1, what)
	}
	futs := make([]workflow.Future, len(in.Nodes))
	for i, n := range in.Nodes {
		futs[i] = workflow.ExecuteActivity(run(n, "disk usage"), na.DiskUsage, contract.NodeDiskInput{Blocks: in.Blocks[n], Images: in.Images})
	}
	res := contract.DiskResult{Nodes: make([]contract.DiskNode, len(in.Nodes))}
	running := map[string]bool{}
	for i, n := range in.Nodes {
		res.Nodes[i].Node = n
		var r contract.NodeDiskResult
		if err := futs[i].Get(ctx, &r); err != nil {
			res.Nodes[i].Error = nodeError(n, err)
			continue
		}
		res.Nodes[i].Disk = &r
		for _, l := range r.Running {
			if !running[l] {
				running[l] = true
				res.Running = append(res.Running, l)
			}
		}
	}
	sort.Strings(res.Running)
	if in.Prune == nil {
		return res, nil
	}
	spec := *in.Prune
	spec.Protected = append(append([]string(nil), spec.Protected...), res.Running...)
	if !spec.DryRun {
		// A prune is a mutating run: it holds the nodes it removes blocks
		// on, so no stage, cutover or repair writes them meanwhile
		// (holdNodes is gated by versionNodeLease itself).
		var held []string
		for i, n := range in.Nodes {
			if res.Nodes[i].Error == "" {
				held = append(held, n)
			}
		}
		leases, err := holdNodes(ctx, t, contract.NodeLeaseHolder{Kind: contract.LeasePrune}, held)
		if err != nil {
			return res, err
		}
		defer leases.release()
	}
	for i, n := range in.Nodes {
		futs[i] = nil
		if res.Nodes[i].Error != "" {
			continue
		}
		futs[i] = workflow.ExecuteActivity(run(n, "disk prune"), na.DiskPrune, contract.NodeDiskInput{Blocks: in.Blocks[n], Prune: &spec, Images: in.Images})
	}
	for i, n := range in.Nodes {
		if futs[i] == nil {
			continue
		}
		var r contract.NodeDiskResult
		if err := futs[i].Get(ctx, &r); err != nil {
			res.Nodes[i].Error = nodeError(n, err)
			continue
		}
		res.Nodes[i].Disk = &r
	}
	return res, nil
}

// nodeError says why a node gave no disk answer.
func nodeError(n string, err error) string {
	if isPickupTimeout(err) {
		return fmt.Sprintf("node worker not polling %s; start it with: worker node --node %s", contract.NodeQueue(n), n)
	}
	return errMessage(err)
}
