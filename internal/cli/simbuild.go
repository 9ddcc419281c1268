package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fleet"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/simimage"
)

// SimLane is the lane `starter image build --sim` builds for when no
// --lane is given: the shipped recipes/sim-demo.toml.
const SimLane = "sim-demo"

// simBuild is `starter image build --sim`: the engine-sim image built
// from scratch on one node of a sim lane (--node, else the cluster's
// head) by simBuildOn, tagged also as the lane's image, then moved to the
// lane's other nodes by the stage's image step (stage/LANE, image only).
func (a *App) simBuild(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan, only, binary string) error {
	if plan.Runtime != "sim" {
		return fmt.Errorf("--sim builds engine-sim, but lane %s runs %s (%s): drop --sim to build its [build], or name a sim lane with --lane", r.Name, plan.Runtime, r.File)
	}
	img := plan.Nodes[0].Image
	if img.Digest != "" || img.Name == "" {
		return fmt.Errorf("lane %s's image %s pins a digest: an image built here has none; name it without @sha256 (%s)", r.Name, img, r.File)
	}
	where := only
	if where == "" {
		where = plan.Nodes[0].Node
	}
	built, err := a.simBuildOn(ctx, cfg, where, binary, img, func(from string) {
		if !a.JSON {
			fmt.Fprintf(a.Err, "building the engine-sim image on %s from %s\n", where, from)
		}
	})
	if err != nil {
		return err
	}
	var res contract.StageResult
	if err := a.startFollow(ctx, runSpec{ID: contract.StageID(r.Name), Workflow: contract.WorkflowStage, Lane: r.Name, Cluster: r.Cluster,
		Input: contract.StageInput{Plan: *plan, Mode: contract.StageAuto, ImageOnly: true}}, &res); err != nil {
		return err
	}
	res.Built = &built
	return a.printImageBuild(res)
}

// simBuildOn is the build core of `starter image build --sim` and of the
// sim lane's image built before a cutover, stage or up (ensureSimImage):
// the engine-sim image built from scratch on node where through that
// node's Docker — reached over SSH as `starter logs` reaches it —, from
// the release's engine-sim of the node's architecture (or binary, or, in
// the source tree, one compiled here), so neither the node nor this host
// needs Go; tagged also as img. announce is told where the program comes
// from before the build starts.
func (a *App) simBuildOn(ctx context.Context, cfg *config.Config, where, binary string, img contract.ImageRef, announce func(from string)) (contract.BuildImageResult, error) {
	var res contract.BuildImageResult
	n := cfg.Node(where)
	if n == nil {
		return res, fmt.Errorf("node %s is not in %s", where, cfg.File)
	}
	dc, err := nodeDocker(ctx, *n)
	if err != nil {
		return res, err
	}
	defer dc.Close()
	opt, from, err := a.simBinary(ctx, cfg, dc, where, binary)
	if err != nil {
		return res, err
	}
	announce(from)
	ref, err := simimage.Build(ctx, dc, opt)
	if err != nil {
		return res, fmt.Errorf("node %s: build the engine-sim image: %w", where, err)
	}
	if img.Name != ref && img.Name != simimage.Repo+":latest" {
		if err := dc.ImageTag(ctx, ref, img.Name); err != nil {
			return res, fmt.Errorf("node %s: tag %s as %s: %w", where, ref, img.Name, err)
		}
	}
	inspect, err := dc.ImageInspect(ctx, ref)
	if err != nil {
		return res, fmt.Errorf("node %s: the built image %s: %w", where, ref, err)
	}
	return contract.BuildImageResult{Node: where, ID: inspect.ID, Tail: []string{"engine-sim image " + ref + " (" + from + ")"}}, nil
}

// simBinary is where the engine-sim program comes from for the Docker
// daemon dc of node where: --engine-sim, the release of the daemon's
// architecture (this starter's, or a tarball beside it), else this
// source tree (compiled by simimage for that architecture).
func (a *App) simBinary(ctx context.Context, cfg *config.Config, dc client.APIClient, where, binary string) (simimage.Options, string, error) {
	opt := simimage.Options{Log: io.Discard}
	if binary != "" {
		opt.Binary = binary
		return opt, binary, nil
	}
	v, err := dc.ServerVersion(ctx)
	if err != nil {
		return opt, "", fmt.Errorf("node %s: Docker version: %w", where, err)
	}
	goarch := fleet.GoArch(v.Arch)
	if goarch == "" {
		return opt, "", fmt.Errorf("node %s's Docker runs on %q, not an architecture sparklane builds engine-sim for (amd64, arm64): pass --engine-sim PATH", where, v.Arch)
	}
	if rs := (&fleetOpts{}).releaseSet(cfg); rs != nil {
		p, err := rs.EngineSim(goarch)
		if err != nil {
			return opt, "", fmt.Errorf("node %s is linux/%s: %w", where, goarch, err)
		}
		opt.Binary = p
		return opt, fmt.Sprintf("the release's linux/%s engine-sim %s, sha256 checked", goarch, p), nil
	}
	src, err := sourceTree()
	if err != nil {
		return opt, "", fmt.Errorf("no engine-sim program: run the starter of a release (it ships engine-sim/), from the source tree, or pass --engine-sim PATH")
	}
	opt.ModuleDir = src
	return opt, fmt.Sprintf("./engine-sim of %s, compiled for linux/%s", src, goarch), nil
}

// nodeDocker reaches node n's Docker: this machine's for a local node,
// the node's socket through SSH (host key checked) otherwise.
func nodeDocker(ctx context.Context, n config.Node) (*client.Client, error) {
	var t *node.SSHTarget
	if n.SSH != "" {
		tt, err := node.ParseSSH(n.SSH)
		if err != nil {
			return nil, fmt.Errorf("node %s: ssh %q: %w", n.Name, n.SSH, err)
		}
		tt.KnownHosts, tt.Identity = n.KnownHosts, n.Identity
		t = &tt
	}
	c, err := node.DockerClient(ctx, n.Docker, t)
	if err != nil {
		return nil, fmt.Errorf("node %s: docker: %w", n.Name, err)
	}
	return c, nil
}
