package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// Image step budgets: an inventory is a few Docker calls; a transfer of a
// 30 GB image runs for minutes, heartbeating while it streams.
const (
	imageInventoryTimeout = 2 * time.Minute
	imageTransferTimeout  = 6 * time.Hour
	imageTransferBeat     = time.Minute
	// imageRounds: a failed transfer is planned again from a fresh
	// inventory (the nodes that got the image are sources then).
	imageRounds = 3
)

// ensureImages puts each image of plan on every node that runs it, before
// any container starts (stage, and so cutover): nodes that lack it receive
// only the layers they lack from a node of the cluster that has it, in a
// chain (contract.ImagePlan). With only, only that node receives. A dry run
// reports per node whether the image is there and what would move.
//
// src.build, when set, builds its image first (Force) or when no node of
// the cluster has it (versionStageBuild); src.pull, when set, pulls it
// from a registry on one node before that (versionStageRegistry).
func ensureImages(ctx workflow.Context, t *tracker, plan contract.LanePlan, only string, dryRun bool, pickup time.Duration, src imageSources) ([]contract.ImageNodeResult, error) {
	var order []string
	byImage := map[string][]string{}
	for _, n := range plan.Nodes {
		if _, ok := byImage[n.Image]; !ok {
			order = append(order, n.Image)
		}
		byImage[n.Image] = append(byImage[n.Image], n.Node)
	}
	var out []contract.ImageNodeResult
	for _, img := range order {
		s := src
		if s.build != nil && s.build.Image != img {
			s.build = nil
		}
		if s.pull != nil && s.pull.Image != img {
			s.pull = nil
		}
		r, err := ensureImage(ctx, t, plan.Lane, img, byImage[img], only, dryRun, pickup, s)
		out = append(out, r...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// recipeBuild is how a cutover builds the recipe's image when no node
// has it: its [build], on the [build] node or the cluster's head.
func recipeBuild(rc contract.Recipe, plan contract.LanePlan) *contract.ImageBuild {
	if rc.Build == nil || len(plan.Nodes) == 0 {
		return nil
	}
	b := &contract.ImageBuild{Image: rc.Image, Spec: *rc.Build, Node: rc.Build.Node}
	if b.Node == "" {
		b.Node = plan.Nodes[0].Node
	}
	return b
}

// imageSources are the image step's sources besides the cluster's nodes:
// a registry pull and a build, and where each reports what it did.
type imageSources struct {
	pull   *contract.ImagePull
	pulled **contract.PullImageResult
	build  *contract.ImageBuild
	built  **contract.BuildImageResult
}

// recipePull is how a cutover pulls the recipe's image when no node has
// it: from its image_registry, on the cluster's head.
func recipePull(rc contract.Recipe, plan contract.LanePlan) *contract.ImagePull {
	if rc.ImageRegistry == "" || len(plan.Nodes) == 0 {
		return nil
	}
	return &contract.ImagePull{Image: rc.Image, Registry: rc.ImageRegistry, AuthFile: rc.ImageRegistryAuthFile, Node: plan.Nodes[0].Node}
}

// permanent turns an engine's or the image plan's typed error into the
// workflow's.
func permanent(err error) error {
	typ, ok := fault.TypeOf(err)
	var ie *contract.ImageError
	if errors.As(err, &ie) {
		typ, ok = ie.Type, true
	}
	if !ok {
		typ = fault.InvalidSpec
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), typ, nil)
}

func ensureImage(ctx workflow.Context, t *tracker, lane, img string, nodes []string, only string, dryRun bool, pickup time.Duration, src imageSources) ([]contract.ImageNodeResult, error) {
	build, built, pull := src.build, src.built, src.pull
	ref, err := contract.ParseImageRef(img)
	if err != nil {
		i := t.start("image "+img, "")
		err = permanent(fault.Permanent(fault.InvalidSpec, err))
		t.end(i, "", err)
		return nil, err
	}
	if build != nil && workflow.GetVersion(ctx, versionStageBuild, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		build = nil
	}
	if pull != nil && workflow.GetVersion(ctx, versionStageRegistry, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		pull = nil
	}
	if build != nil && build.Force && !dryRun {
		if err := buildImage(ctx, t, *build, pickup, built); err != nil {
			return nil, err
		}
		build = nil
	}
	for round := 1; ; round++ {
		i := t.start("image "+img, "")
		res, p, invs, err := planImage(ctx, ref, nodes, only, builtID(built), pickup)
		if pull != nil && errType(err) == fault.ImageMissing && len(p.Present) == 0 {
			// On no node, and a registry is named: one node pulls it.
			if dryRun {
				for k := range res {
					res[k].State += "; would be pulled from " + pull.Registry + " on " + pull.Node + " and moved from there"
				}
				t.end(i, imageSummary(res), nil)
				return res, nil
			}
			t.end(i, "missing everywhere: pulling from "+pull.Registry+" on "+pull.Node, nil)
			perr := pullImage(ctx, t, *pull, pickup, src.pulled)
			if perr != nil && (build == nil || errType(perr) != fault.ImageMissing) {
				return res, perr
			}
			pull, round = nil, round-1 // the pull round is not a transfer round
			continue
		}
		if build != nil && errType(err) == fault.ImageMissing && len(p.Present) == 0 {
			// On no node, and the recipe says how to build it.
			if dryRun {
				for k := range res {
					res[k].State += "; would be built on " + build.Node + " and moved from there"
				}
				t.end(i, imageSummary(res), nil)
				return res, nil
			}
			t.end(i, "missing everywhere: building on "+build.Node, nil)
			if err := buildImage(ctx, t, *build, pickup, built); err != nil {
				return res, err
			}
			build, round = nil, round-1 // the build round is not a transfer round
			continue
		}
		if err != nil || dryRun || len(p.Chain) == 0 {
			if dryRun && err != nil {
				// A dry run reports the refusal per node and goes on.
				for k := range res {
					res[k].Error = errMessage(err)
				}
				err = nil
			}
			t.end(i, imageSummary(res), err)
			return res, err
		}
		moved, err := transferImage(ctx, lane, ref, p, invs, pickup)
		for k := range res {
			if m, ok := moved[res[k].Node]; ok {
				res[k].BytesIn, res[k].BytesOut, res[k].Layers = m.BytesIn, m.BytesOut, m.Layers
				if m.BytesIn > 0 || res[k].Node != p.Source() {
					res[k].State = fmt.Sprintf("received %d layers (%d bytes)", m.Layers, m.BytesIn)
					res[k].ID = p.ID
				}
			}
		}
		t.end(i, imageSummary(res), err)
		if err == nil {
			return res, nil
		}
		var app *temporal.ApplicationError
		if round >= imageRounds || (asApp(err, &app) && app.NonRetryable()) {
			return res, err
		}
	}
}

func asApp(err error, app **temporal.ApplicationError) bool {
	for e := err; e != nil; {
		if a, ok := e.(*temporal.ApplicationError); ok {
			*app = a
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// planImage asks every node what it has (twice for those that lack the
// image: how many of its layers they have) and plans the transfer. With
// only, that node is asked first and the others (the sources) only when
// it lacks the image: a stage --node N does not wait on the other nodes'
// workers when N has it.
//
// want, when set, is the image ID the run moves (the one it just built):
// a node with another image under the tag lacks it, and its layers count.
func planImage(ctx workflow.Context, ref contract.ImageRef, nodes []string, only, want string, pickup time.Duration) ([]contract.ImageNodeResult, contract.ImagePlan, map[string]contract.ImageInventoryResult, error) {
	invs := map[string]contract.ImageInventoryResult{}
	if only != "" {
		if !slices.Contains(nodes, only) {
			return nil, contract.ImagePlan{}, invs, nil
		}
		if err := imageInventory(ctx, ref, []string{only}, nil, want, pickup, invs); err != nil {
			return []contract.ImageNodeResult{{Node: only, Image: ref.String()}}, contract.ImagePlan{}, invs, err
		}
		if invs[only].Present {
			nodes = []string{only}
		}
	}
	res := make([]contract.ImageNodeResult, len(nodes))
	var ask []string
	for k, n := range nodes {
		res[k] = contract.ImageNodeResult{Node: n, Image: ref.String()}
		if _, asked := invs[n]; !asked {
			ask = append(ask, n)
		}
	}
	if err := imageInventory(ctx, ref, ask, nil, want, pickup, invs); err != nil {
		return res, contract.ImagePlan{}, invs, err
	}
	var diff []string
	var lack []string
	for _, n := range nodes {
		if invs[n].Present && diff == nil {
			diff = invs[n].DiffIDs
		}
	}
	for _, n := range nodes {
		if !invs[n].Present && diff != nil {
			lack = append(lack, n)
		}
	}
	if len(lack) > 0 {
		if err := imageInventory(ctx, ref, lack, diff, want, pickup, invs); err != nil {
			return res, contract.ImagePlan{}, invs, err
		}
	}
	var planned []contract.ImageInventory
	for k, n := range nodes {
		inv := invs[n]
		if inv.Present {
			res[k].State, res[k].ID = contract.DescribeImage(inv.ImageInventory, len(inv.DiffIDs)), inv.ID
		} else if diff != nil {
			res[k].State = contract.DescribeImage(inv.ImageInventory, len(diff))
		} else {
			res[k].State = "missing"
		}
		if inv.Present || only == "" || n == only {
			planned = append(planned, inv.ImageInventory)
		}
	}
	p, err := contract.PlanImage(ref, planned)
	if err != nil {
		return res, p, invs, permanent(err)
	}
	for k, n := range p.Chain {
		if invs[n].Addr == "" {
			return res, p, invs, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("image %s cannot move to %s: %s", ref, strings.Join(p.Chain[1:], ", "), invs[n].NoTransfer), fault.ImageMissing, nil)
		}
		if k > 0 {
			for j := range res {
				if res[j].Node == n {
					res[j].From = p.Chain[k-1]
				}
			}
		}
	}
	return res, p, invs, nil
}

// builtID is the ID of the image the run built, "" before a build.
func builtID(built **contract.BuildImageResult) string {
	if built == nil || *built == nil {
		return ""
	}
	return (*built).ID
}

// buildImage runs BuildImage on the build's node: one attempt (a failing
// Dockerfile step fails the same way again), heartbeating its log.
func buildImage(ctx workflow.Context, t *tracker, b contract.ImageBuild, pickup time.Duration, built **contract.BuildImageResult) error {
	i := t.start("image build "+b.Image, b.Node)
	var r contract.BuildImageResult
	err := workflow.ExecuteActivity(summarize(nodeOpts(ctx, b.Node, pickup, callBudget{run: imageTransferTimeout, heartbeat: imageTransferBeat, attempts: 1}), b.Node, -1, "build "+b.Image), na.BuildImage,
		contract.BuildImageInput{Image: b.Image, Build: b.Spec}).Get(ctx, &r)
	t.end(i, r.ID, err)
	if err != nil {
		return nodeErr(b.Node, "image build", err)
	}
	if built != nil {
		*built = &r
	}
	return nil
}

// pullImage runs PullImage on the pull's node: one attempt per activity
// retry policy of three (a network blip passes; a registry without the
// image or with another digest is permanent), heartbeating its progress.
func pullImage(ctx workflow.Context, t *tracker, p contract.ImagePull, pickup time.Duration, pulled **contract.PullImageResult) error {
	i := t.start("image pull "+p.Image+" from "+p.Registry, p.Node)
	var r contract.PullImageResult
	err := workflow.ExecuteActivity(summarize(nodeOpts(ctx, p.Node, pickup, callBudget{run: imageTransferTimeout, heartbeat: imageTransferBeat, attempts: 3}), p.Node, -1, "pull "+p.Image+" from "+p.Registry), na.PullImage,
		contract.PullImageInput{Image: p.Image, Registry: p.Registry, AuthFile: p.AuthFile}).Get(ctx, &r)
	t.end(i, r.ID, err)
	if err != nil {
		return nodeErr(p.Node, "image pull", err)
	}
	if pulled != nil {
		*pulled = &r
	}
	return nil
}

// imageInventory runs ImageInventory on nodes in parallel into invs.
func imageInventory(ctx workflow.Context, ref contract.ImageRef, nodes, diffIDs []string, want string, pickup time.Duration, invs map[string]contract.ImageInventoryResult) error {
	futs := make([]workflow.Future, len(nodes))
	for k, n := range nodes {
		what := "image inventory " + ref.String()
		futs[k] = workflow.ExecuteActivity(summarize(nodeOpts(ctx, n, pickup, callBudget{run: imageInventoryTimeout, attempts: 3}), n, -1, what), na.ImageInventory,
			contract.ImageInventoryInput{Image: ref.String(), DiffIDs: diffIDs, Want: want})
	}
	var first error
	for k, n := range nodes {
		var r contract.ImageInventoryResult
		if err := futs[k].Get(ctx, &r); err != nil {
			if first == nil {
				first = nodeErr(n, "image inventory", err)
			}
			continue
		}
		r.Node = n // the node asked, whatever an old worker reports
		if want != "" && r.Present && r.ID != want {
			// Another image under the tag (a worker older than Want
			// reports it present): it lacks the one moved.
			r.Present, r.Unpinned = false, false
		}
		invs[n] = r
	}
	return first
}

// transferImage runs every chain member's TransferImage at once and
// waits for all of them.
func transferImage(ctx workflow.Context, lane string, ref contract.ImageRef, p contract.ImagePlan, invs map[string]contract.ImageInventoryResult, pickup time.Duration) (map[string]contract.ImageMoved, error) {
	spec := contract.ImageSpec{ID: p.ID, DiffIDs: p.DiffIDs, From: p.From, Tag: ref.Name}
	hops := p.Hops()
	futs := make([]workflow.Future, len(hops))
	for k, h := range hops {
		in := contract.TransferImageInput{Spec: spec, Have: invs[h.Node].HaveLayers, Upstream: h.Upstream, Downstream: h.Downstream, Lane: lane}
		if h.Upstream != "" {
			in.UpstreamAddr = invs[h.Upstream].Addr
		}
		what := "image " + ref.String()
		switch {
		case h.Upstream == "":
			what += " → " + h.Downstream
		default:
			what += " ← " + h.Upstream
		}
		futs[k] = workflow.ExecuteActivity(summarize(nodeOpts(ctx, h.Node, pickup, callBudget{run: imageTransferTimeout, heartbeat: imageTransferBeat, attempts: 1}), h.Node, -1, what), na.TransferImage, in)
	}
	moved := map[string]contract.ImageMoved{}
	var errs []string
	var first error
	for k, h := range hops {
		var r contract.TransferImageResult
		if err := futs[k].Get(ctx, &r); err != nil {
			errs = append(errs, h.Node+": "+errMessage(err))
			if first == nil {
				first = err
			}
			continue
		}
		moved[h.Node] = r.ImageMoved
	}
	if first != nil {
		msg := fmt.Sprintf("image %s transfer %s: %s", ref, strings.Join(p.Chain, " → "), strings.Join(errs, "; "))
		if typ := errType(first); typ != "" && typ != "Transient" {
			var app *temporal.ApplicationError
			if asApp(first, &app) && app.NonRetryable() {
				return moved, temporal.NewNonRetryableApplicationError(msg, typ, nil)
			}
		}
		return moved, temporal.NewApplicationError(msg, "ImageTransfer")
	}
	return moved, nil
}

// imageSummary is the image step's one-line detail.
func imageSummary(res []contract.ImageNodeResult) string {
	var parts []string
	for _, r := range res {
		s := r.Node + ": " + r.State
		if r.Error != "" {
			s += " (" + r.Error + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
