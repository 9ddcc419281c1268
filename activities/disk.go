package activities

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/disk"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// localBlocks fills each block's Local path (fs_root applied).
func (a *NodeActivities) localBlocks(in []contract.DiskBlock) []disk.Block {
	out := make([]disk.Block, len(in))
	for i, b := range each(in, engineBlock) {
		b.Local = a.local(b.Dst)
		b.LocalExports = nil
		for _, e := range b.Exports {
			b.LocalExports = append(b.LocalExports, a.local(e))
		}
		out[i] = b
	}
	return out
}

// runningLanes are the lanes with a running container on this node.
func (a *NodeActivities) runningLanes(ctx context.Context) ([]string, error) {
	d, err := a.dockerClient(ctx)
	if err != nil {
		return nil, err
	}
	cs, err := d.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", contract.LabelLane), filters.Arg("label", contract.LabelNode+"="+a.Node.Name))})
	if err != nil {
		return nil, fmt.Errorf("node %s: list containers: %w", a.Node.Name, err)
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range cs {
		if l := c.Labels[contract.LabelLane]; !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out, nil
}

// DiskUsage lists this node's roots (free space) and every given block
// beneath them: bytes on disk, last served, last verified.
func (a *NodeActivities) DiskUsage(ctx context.Context, in contract.NodeDiskInput) (contract.NodeDiskResult, error) {
	res := contract.NodeDiskResult{Node: a.Node.Name}
	running, err := a.runningLanes(ctx)
	if err != nil {
		return res, classify(err)
	}
	res.Running = running
	res.Roots = each(disk.Scan(a.roots(), a.localBlocks(in.Blocks)), diskRoot)
	a.listImages(ctx, in, &res)
	return res, nil
}

// listImages fills res.Images when the input asks (an old starter does
// not); a Docker that cannot list them is said, not a failed listing.
func (a *NodeActivities) listImages(ctx context.Context, in contract.NodeDiskInput, res *contract.NodeDiskResult) []images.Listed {
	if in.Images == nil {
		return nil
	}
	d, err := a.dockerClient(ctx)
	if err == nil {
		st, ok := d.(images.Store)
		if !ok {
			res.ImageError = "node " + a.Node.Name + ": its Docker client cannot list images"
			return nil
		}
		var l []images.Listed
		if l, err = images.List(ctx, st, a.Node.Name, in.Images, time.Now()); err == nil {
			res.Images = each(l, imageListed)
			return l
		}
	}
	res.ImageError = err.Error()
	return nil
}

// DiskPrune removes whole blocks on this node as in.Prune says, beneath
// the node's roots only, never a block of a lane running here or named
// protected (running on another node).
func (a *NodeActivities) DiskPrune(ctx context.Context, in contract.NodeDiskInput) (contract.NodeDiskResult, error) {
	res := contract.NodeDiskResult{Node: a.Node.Name}
	if in.Prune == nil {
		return res, fmt.Errorf("node %s: DiskPrune without a prune spec", a.Node.Name)
	}
	running, err := a.runningLanes(ctx)
	if err != nil {
		return res, classify(err)
	}
	res.Running = running
	spec := disk.PruneSpec(*in.Prune)
	spec.Protected = append(append([]string(nil), spec.Protected...), running...)
	stop := keepAlive(ctx)
	pr := pruneResult(disk.Prune(a.roots(), a.localBlocks(in.Blocks), spec))
	stop()
	res.Prune = &pr
	res.Roots = each(disk.Scan(a.roots(), a.localBlocks(in.Blocks)), diskRoot)
	listed := a.listImages(ctx, in, &res)
	if spec.LRU && spec.Images && listed != nil {
		d, err := a.dockerClient(ctx)
		if err != nil {
			return res, classify(err)
		}
		st, ok := d.(images.Store)
		if !ok {
			return res, fmt.Errorf("node %s: its Docker client cannot remove images", a.Node.Name)
		}
		ip := imagePrune(images.Prune(ctx, st, a.Node.Name, listed, spec.Free, spec.DryRun, staging.FreeBytes))
		res.ImagePrune = &ip
		a.listImages(ctx, in, &res)
	}
	return res, nil
}
