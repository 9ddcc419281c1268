package cli

import (
	"context"
	"fmt"

	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/simimage"
)

// imageHaver says whether a node's Docker has an image (by name).
type imageHaver interface {
	HasImage(ctx context.Context, node, image string) (bool, error)
}

// simImageBuildable reports whether a lane's image is one this control
// host builds itself when no node has it: a sim lane whose image is the
// engine-sim repository (any tag) with no digest pinned. An image that
// names another repository (a registry host in its name, say) comes from
// its registry, as every other lane's does.
func simImageBuildable(plan *contract.LanePlan) bool {
	if plan.Runtime != "sim" || len(plan.Nodes) == 0 {
		return false
	}
	img := plan.Nodes[0].Image
	return img.Digest == "" && img.Name != "" && img.Repo == simimage.Repo
}

// simImageMissing reports whether the lane's engine-sim image must be
// built here before its run: the lane's image is buildable
// (simImageBuildable) and no node of the plan has it. A node whose Docker
// cannot be asked is an error naming it: building blind could replace an
// image a node serves.
func simImageMissing(ctx context.Context, plan *contract.LanePlan, have imageHaver) (bool, error) {
	if !simImageBuildable(plan) {
		return false, nil
	}
	img := plan.Nodes[0].Image.Name
	for _, n := range plan.Nodes {
		ok, err := have.HasImage(ctx, n.Node, img)
		if err != nil {
			return false, err
		}
		if ok {
			return false, nil
		}
	}
	return true, nil
}

// simBuildNode is where a missing engine-sim image is built: only when
// given (stage --node), else the lane's head.
func simBuildNode(plan *contract.LanePlan, only string) string {
	if only != "" {
		return only
	}
	for _, n := range plan.Nodes {
		if n.Head {
			return n.Node
		}
	}
	return plan.Nodes[0].Node
}

// nodeImages is imageHaver over the nodes' own Docker (nodeDocker: this
// machine's for a local node, the node's socket over SSH otherwise), one
// client per node until Close.
type nodeImages struct {
	cfg     *config.Config
	clients map[string]*client.Client
}

func (d *nodeImages) HasImage(ctx context.Context, node, image string) (bool, error) {
	c, err := d.client(ctx, node)
	if err != nil {
		return false, err
	}
	if _, err := c.ImageInspect(ctx, image); err != nil {
		if errdefs.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("node %s: cannot ask its Docker whether it has image %s (to tell whether to build it here first): %w", node, image, err)
	}
	return true, nil
}

func (d *nodeImages) client(ctx context.Context, node string) (*client.Client, error) {
	if c, ok := d.clients[node]; ok {
		return c, nil
	}
	n := d.cfg.Node(node)
	if n == nil {
		return nil, fmt.Errorf("node %s is not in %s", node, d.cfg.File)
	}
	c, err := nodeDocker(ctx, *n)
	if err != nil {
		return nil, fmt.Errorf("cannot check whether node %s has the lane's image: %w", node, err)
	}
	if d.clients == nil {
		d.clients = map[string]*client.Client{}
	}
	d.clients[node] = c
	return c, nil
}

// Close closes every client opened.
func (d *nodeImages) Close() {
	for _, c := range d.clients {
		c.Close()
	}
}

// ensureSimImage builds a sim lane's engine-sim image on the head (or
// only) when no node of the plan has it, exactly as `starter image build
// --sim` does (simBuildOn), and says so in one line (on stderr with
// --json). It starts no run: the caller's own image step moves the image
// to the lane's other nodes. Nil when nothing was built.
func (a *App) ensureSimImage(ctx context.Context, cfg *config.Config, plan *contract.LanePlan, only string) (*contract.BuildImageResult, error) {
	if !simImageBuildable(plan) {
		return nil, nil
	}
	have := &nodeImages{cfg: cfg}
	defer have.Close()
	missing, err := simImageMissing(ctx, plan, have)
	if err != nil || !missing {
		return nil, err
	}
	where, img := simBuildNode(plan, only), plan.Nodes[0].Image
	out := a.Out
	if a.JSON {
		out = a.Err
	}
	b, err := a.simBuildOn(ctx, cfg, where, "", img, func(from string) {
		fmt.Fprintf(out, "image %s is on no node of %s: building it on %s from %s (as `starter image build --sim`)\n", img, plan.Lane, where, from)
	})
	if err != nil {
		return nil, fmt.Errorf("lane %s: image %s is on no node and building it failed: %w (or build it yourself: starter image build --sim --lane %s)", plan.Lane, img, err, plan.Lane)
	}
	return &b, nil
}

// drySimImage is what ensureSimImage would do, doing none of it: the node
// the image would be built on and where its engine-sim program would come
// from (both "" when it would build nothing), or why it could not tell.
func (a *App) drySimImage(ctx context.Context, cfg *config.Config, plan *contract.LanePlan, only string) (where, from string, err error) {
	if !simImageBuildable(plan) {
		return "", "", nil
	}
	have := &nodeImages{cfg: cfg}
	defer have.Close()
	missing, err := simImageMissing(ctx, plan, have)
	if err != nil || !missing {
		return "", "", err
	}
	where = simBuildNode(plan, only)
	n := cfg.Node(where)
	if n == nil {
		return "", "", fmt.Errorf("node %s is not in %s", where, cfg.File)
	}
	dc, err := nodeDocker(ctx, *n)
	if err != nil {
		return "", "", err
	}
	defer dc.Close()
	if _, from, err = a.simBinary(ctx, cfg, dc, where, ""); err != nil {
		return "", "", err
	}
	return where, from, nil
}
