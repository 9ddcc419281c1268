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
//
// Its steps are diskRun's: usage on every node, then (with Prune) the
// node leases and the prune.
func Disk(ctx workflow.Context, in contract.DiskInput) (contract.DiskResult, error) {
	d := &diskRun{ctx: ctx, in: in, t: newTracker(ctx, "Disk", "")}
	// Leases are released on every exit, last.
	defer func() { d.leases.release() }()
	err := d.run()
	return d.res, err
}

// diskRun is one Disk run: its input, its result so far and the node
// leases a prune holds.
type diskRun struct {
	ctx    workflow.Context
	in     contract.DiskInput
	t      *tracker
	res    contract.DiskResult
	leases *nodeLeases
}

// run lists every node's disk, then prunes when asked.
func (d *diskRun) run() error {
	d.usage()
	if d.in.Prune == nil {
		return nil
	}
	spec := *d.in.Prune
	spec.Protected = append(append([]string(nil), spec.Protected...), d.res.Running...)
	if !spec.DryRun {
		if err := d.leaseNodes(); err != nil {
			return err
		}
	}
	d.prune(spec)
	return nil
}

// opts runs a disk activity (what) on node n.
func (d *diskRun) opts(n, what string) workflow.Context {
	return summarize(nodeOpts(d.ctx, n, d.in.PickupTimeout.D(), callBudget{run: 30 * time.Minute, heartbeat: time.Minute, attempts: 1}), n, -1, what)
}

// usage asks every node at once for its staged blocks (and images), and
// lists the lanes running anywhere (never pruned).
func (d *diskRun) usage() {
	in := d.in
	futs := make([]workflow.Future, len(in.Nodes))
	for i, n := range in.Nodes {
		futs[i] = workflow.ExecuteActivity(d.opts(n, "disk usage"), na.DiskUsage, contract.NodeDiskInput{Blocks: in.Blocks[n], Images: in.Images})
	}
	d.res = contract.DiskResult{Nodes: make([]contract.DiskNode, len(in.Nodes))}
	running := map[string]bool{}
	for i, n := range in.Nodes {
		d.res.Nodes[i].Node = n
		var r contract.NodeDiskResult
		if err := futs[i].Get(d.ctx, &r); err != nil {
			d.res.Nodes[i].Error = nodeError(n, err)
			continue
		}
		d.res.Nodes[i].Disk = &r
		for _, l := range r.Running {
			if !running[l] {
				running[l] = true
				d.res.Running = append(d.res.Running, l)
			}
		}
	}
	sort.Strings(d.res.Running)
}

// leaseNodes: a prune is a mutating run, so it holds the nodes it removes
// blocks on (those that answered), and no stage, cutover or repair writes
// them meanwhile (holdNodes is gated by versionNodeLease itself).
func (d *diskRun) leaseNodes() error {
	var held []string
	for i, n := range d.in.Nodes {
		if d.res.Nodes[i].Error == "" {
			held = append(held, n)
		}
	}
	leases, err := holdNodes(d.ctx, d.t, contract.NodeLeaseHolder{Kind: contract.LeasePrune}, held)
	d.leases = leases
	return err
}

// prune prunes by spec on every node that answered, at once.
func (d *diskRun) prune(spec contract.PruneSpec) {
	in := d.in
	futs := make([]workflow.Future, len(in.Nodes))
	for i, n := range in.Nodes {
		if d.res.Nodes[i].Error != "" {
			continue
		}
		futs[i] = workflow.ExecuteActivity(d.opts(n, "disk prune"), na.DiskPrune, contract.NodeDiskInput{Blocks: in.Blocks[n], Prune: &spec, Images: in.Images})
	}
	for i, n := range in.Nodes {
		if futs[i] == nil {
			continue
		}
		var r contract.NodeDiskResult
		if err := futs[i].Get(d.ctx, &r); err != nil {
			d.res.Nodes[i].Error = nodeError(n, err)
			continue
		}
		d.res.Nodes[i].Disk = &r
	}
}

// nodeError says why a node gave no disk answer.
func nodeError(n string, err error) string {
	if isPickupTimeout(err) {
		return fmt.Sprintf("node worker not polling %s; start it with: worker node --node %s", contract.NodeQueue(n), n)
	}
	return errMessage(err)
}
