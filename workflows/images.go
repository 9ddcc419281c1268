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
	// imageOutageRounds bounds the rounds a member whose node went away
	// mid-stream may cost (each waits for the node within the budget).
	imageOutageRounds = 5
)

// imageStep is the image step of a stage (and so of a cutover): each
// image of plan on every node that runs it, before any container starts.
// Nodes that lack it receive only the layers they lack from a node of the
// cluster that has it, in a chain (contract.ImagePlan). With only, only
// that node receives. A dry run reports per node whether the image is
// there and what would move.
//
// src.build, when set, builds its image first (Force) or when no node of
// the cluster has it (versionStageBuild); src.pull, when set, pulls it
// from a registry on one node before that (versionStageRegistry). What
// the step found and did is in res, built and pulled.
type imageStep struct {
	ctx    workflow.Context
	t      *tracker
	plan   contract.LanePlan
	only   string
	dryRun bool
	pickup time.Duration
	src    imageSources
	// budget is how long a node may be gone (its worker or its Docker)
	// before the step fails naming it; waitV: the step waits for such a
	// node at all (versionImageOutageWait).
	budget time.Duration
	waitV  bool

	// res is each node's image as the step left it, image after image;
	// built and pulled are what the build and the pull did (nil: none
	// ran).
	res    []contract.ImageNodeResult
	built  *contract.BuildImageResult
	pulled *contract.PullImageResult
}

// imageSources are the image step's sources besides the cluster's nodes:
// a registry pull and a build.
type imageSources struct {
	pull  *contract.ImagePull
	build *contract.ImageBuild
}

// run ensures each image of the plan in turn (in plan order), stopping at
// the first that fails.
func (s *imageStep) run() error {
	s.waitV = workflow.GetVersion(s.ctx, versionImageOutageWait, workflow.DefaultVersion, 1) >= 1
	var order []contract.ImageRef
	byImage := map[contract.ImageRef][]string{}
	for _, n := range s.plan.Nodes {
		if _, ok := byImage[n.Image]; !ok {
			order = append(order, n.Image)
		}
		byImage[n.Image] = append(byImage[n.Image], n.Node)
	}
	for _, img := range order {
		r := &imageRun{imageStep: s, ref: img, nodes: byImage[img], src: s.src}
		if r.src.build != nil && r.src.build.Image != img {
			r.src.build = nil
		}
		if r.src.pull != nil && r.src.pull.Image != img {
			r.src.pull = nil
		}
		res, err := r.ensure()
		s.res = append(s.res, res...)
		if err != nil {
			return err
		}
	}
	return nil
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

// imageRun is the image step for one image: the nodes that run it and
// the sources (of the step's) still to try for it.
type imageRun struct {
	*imageStep
	ref   contract.ImageRef
	nodes []string
	src   imageSources
	// step is the round's tracked step (a node waited for shows there);
	// outages counts the rounds a gone node failed (not transfer rounds).
	step    int
	outages int
}

// imageNext is what follows one round of an image.
type imageNext int

const (
	// imageDone: the round's results and error are the image's.
	imageDone imageNext = iota
	// imageSourced: the image was pulled or built on one node; it is
	// planned again (that round is not a transfer round).
	imageSourced
	// imageRetry: a transfer failed and is planned again from a fresh
	// inventory (the nodes that got the image are sources then).
	imageRetry
)

// ensure puts the image on its nodes: up to imageRounds transfer rounds,
// each planned from a fresh inventory, besides at most one pull round and
// one build round (each source is tried once).
func (r *imageRun) ensure() ([]contract.ImageNodeResult, error) {
	if err := r.prepare(); err != nil {
		return nil, err
	}
	for round := 1; ; {
		res, next, err := r.round(round)
		switch next {
		case imageDone:
			return res, err
		case imageSourced:
			// Pulled or built: planned again, the same transfer round.
		case imageRetry:
			round++
		}
	}
}

// prepare parses the image's reference, drops the sources this run's
// history does not know (versionStageBuild, versionStageRegistry) and
// builds first when the build is forced.
func (r *imageRun) prepare() error {
	if err := r.ref.Pinned(); err != nil {
		// A digest given in part pins nothing sparklane can check.
		i := r.t.start("image "+r.ref.String(), "")
		err = permanent(fault.Permanent(fault.InvalidSpec, err))
		r.t.end(i, "", err)
		return err
	}
	if r.src.build != nil && workflow.GetVersion(r.ctx, versionStageBuild, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		r.src.build = nil
	}
	if r.src.pull != nil && workflow.GetVersion(r.ctx, versionStageRegistry, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		r.src.pull = nil
	}
	if r.src.build != nil && r.src.build.Force && !r.dryRun {
		if err := r.buildImage(*r.src.build); err != nil {
			return err
		}
		r.src.build = nil
	}
	return nil
}

// round is one "image IMG" step: plan from every node's inventory, then
// pull or build it when no node has it, or move it along the plan's
// chain.
func (r *imageRun) round(round int) ([]contract.ImageNodeResult, imageNext, error) {
	i := r.t.start("image "+r.ref.String(), "")
	r.step = i
	pl := r.planMove()
	missing := errType(pl.err) == fault.ImageMissing && len(pl.plan.Present) == 0
	if r.src.pull != nil && missing {
		return r.pullFirst(i, pl)
	}
	if r.src.build != nil && missing {
		return r.buildFirst(i, pl)
	}
	if pl.err != nil || r.dryRun || len(pl.plan.Chain) == 0 {
		if r.dryRun && pl.err != nil {
			// A dry run reports the refusal per node and goes on.
			for k := range pl.res {
				pl.res[k].Error = errMessage(pl.err)
			}
			pl.err = nil
		}
		r.t.end(i, imageSummary(pl.res), pl.err)
		return pl.res, imageDone, pl.err
	}
	res, gone, err := r.move(i, pl)
	var app *temporal.ApplicationError
	if err != nil && gone && r.waitV && r.outages < imageOutageRounds && !(errors.As(err, &app) && app.NonRetryable()) {
		// A member's node went away mid-stream: the next round's
		// inventory waits for it (what it loaded stays: the stream
		// resumes above it), and the round does not count.
		r.outages++
		return res, imageSourced, err
	}
	if err == nil || round >= imageRounds || (errors.As(err, &app) && app.NonRetryable()) {
		return res, imageDone, err
	}
	return res, imageRetry, err
}

// pullFirst (step i): the image is on no node, and a registry is named:
// one node pulls it (a dry run says it would).
func (r *imageRun) pullFirst(i int, pl imagePlanned) ([]contract.ImageNodeResult, imageNext, error) {
	pull := r.src.pull
	if r.dryRun {
		wouldBe(pl.res, "pulled from "+pull.Registry+" on "+pull.Node)
		r.t.end(i, imageSummary(pl.res), nil)
		return pl.res, imageDone, nil
	}
	r.t.end(i, "missing everywhere: pulling from "+pull.Registry+" on "+pull.Node, nil)
	perr := r.pullImage(*pull)
	if perr != nil && (r.src.build == nil || errType(perr) != fault.ImageMissing) {
		return pl.res, imageDone, perr
	}
	r.src.pull = nil
	return pl.res, imageSourced, nil
}

// buildFirst (step i): the image is on no node, and the recipe says how
// to build it: its build node builds it (a dry run says it would).
func (r *imageRun) buildFirst(i int, pl imagePlanned) ([]contract.ImageNodeResult, imageNext, error) {
	build := r.src.build
	if r.dryRun {
		wouldBe(pl.res, "built on "+build.Node)
		r.t.end(i, imageSummary(pl.res), nil)
		return pl.res, imageDone, nil
	}
	r.t.end(i, "missing everywhere: building on "+build.Node, nil)
	if err := r.buildImage(*build); err != nil {
		return pl.res, imageDone, err
	}
	r.src.build = nil
	return pl.res, imageSourced, nil
}

// wouldBe tells a dry run's every node how the image would come.
func wouldBe(res []contract.ImageNodeResult, how string) {
	for k := range res {
		res[k].State += "; would be " + how + " and moved from there"
	}
}

// move (step i) moves the image along the plan's chain and records what
// each node received.
func (r *imageRun) move(i int, pl imagePlanned) ([]contract.ImageNodeResult, bool, error) {
	res, p := pl.res, pl.plan
	moved, gone, err := r.transfer(p, pl.invs)
	for k := range res {
		if m, ok := moved[res[k].Node]; ok {
			res[k].BytesIn, res[k].BytesOut, res[k].Layers = m.BytesIn, m.BytesOut, m.Layers
			if m.BytesIn > 0 || res[k].Node != p.Source() {
				res[k].State = fmt.Sprintf("received %d layers (%d bytes)", m.Layers, m.BytesIn)
				res[k].ID = p.ID
			}
		}
	}
	r.t.end(i, imageSummary(res), err)
	return res, gone, err
}

// imagePlanned is one planning of an image: what each node has (res),
// the transfer plan, every node asked's inventory, and why there is no
// plan (err).
type imagePlanned struct {
	res  []contract.ImageNodeResult
	plan contract.ImagePlan
	invs map[string]contract.ImageInventoryResult
	err  error
}

// planMove asks every node what it has (twice for those that lack the image:
// how many of its layers they have) and plans the transfer. With only,
// that node is asked first and the others (the sources) only when it
// lacks the image: a stage --node N does not wait on the other nodes'
// workers when N has it.
//
// The image the run built, if any, is the one moved: a node with another
// image under the tag lacks it, and its layers count.
func (r *imageRun) planMove() imagePlanned {
	want := r.builtID()
	pl := imagePlanned{invs: map[string]contract.ImageInventoryResult{}}
	nodes := r.nodes
	if r.only != "" {
		if !slices.Contains(nodes, r.only) {
			return pl
		}
		if pl.err = r.inventory([]string{r.only}, nil, want, pl.invs); pl.err != nil {
			pl.res = []contract.ImageNodeResult{{Node: r.only, Image: r.ref}}
			return pl
		}
		if pl.invs[r.only].Present {
			nodes = []string{r.only}
		}
	}
	pl.res = make([]contract.ImageNodeResult, len(nodes))
	var ask []string
	for k, n := range nodes {
		pl.res[k] = contract.ImageNodeResult{Node: n, Image: r.ref}
		if _, asked := pl.invs[n]; !asked {
			ask = append(ask, n)
		}
	}
	if pl.err = r.inventory(ask, nil, want, pl.invs); pl.err != nil {
		return pl
	}
	diff, lack := layersToAsk(nodes, pl.invs)
	if len(lack) > 0 {
		if pl.err = r.inventory(lack, diff, want, pl.invs); pl.err != nil {
			return pl
		}
	}
	pl.plan, pl.err = r.chain(&pl, nodes, diff)
	return pl
}

// layersToAsk are the layers of the image as the first node that has it
// lists them (diff; nil when no node has it), and the nodes that lack it
// (asked again: how many of those layers they have).
func layersToAsk(nodes []string, invs map[string]contract.ImageInventoryResult) (diff, lack []string) {
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
	return diff, lack
}

// chain describes each node's image in pl.res and plans the transfer
// from the nodes' inventories: which node sends and the chain the
// layers go down; a chain member with no transfer address refuses it.
func (r *imageRun) chain(pl *imagePlanned, nodes, diff []string) (contract.ImagePlan, error) {
	res, invs := pl.res, pl.invs
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
		if inv.Present || r.only == "" || n == r.only {
			planned = append(planned, inv.ImageInventory)
		}
	}
	p, err := contract.PlanImage(r.ref, planned)
	if err != nil {
		return p, permanent(err)
	}
	for k, n := range p.Chain {
		if invs[n].Addr == "" {
			return p, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("image %s cannot move to %s: %s", r.ref, strings.Join(p.Chain[1:], ", "), invs[n].NoTransfer), fault.ImageMissing, nil)
		}
		if k > 0 {
			for j := range res {
				if res[j].Node == n {
					res[j].From = p.Chain[k-1]
				}
			}
		}
	}
	return p, nil
}

// builtID is the ID of the image the run built, "" before a build.
func (s *imageStep) builtID() string {
	if s.built == nil {
		return ""
	}
	return s.built.ID
}

// buildImage runs BuildImage on the build's node: one attempt (a failing
// Dockerfile step fails the same way again), heartbeating its log. Its
// result is kept in built.
func (s *imageStep) buildImage(b contract.ImageBuild) error {
	i := s.t.start("image build "+b.Image.String(), b.Node)
	var r contract.BuildImageResult
	err := workflow.ExecuteActivity(summarize(nodeOpts(s.ctx, b.Node, s.pickup, callBudget{run: imageTransferTimeout, heartbeat: imageTransferBeat, attempts: 1}), b.Node, -1, "build "+b.Image.String()), na.BuildImage,
		contract.BuildImageInput{Image: b.Image, Build: b.Spec}).Get(s.ctx, &r)
	s.t.end(i, r.ID, err)
	if err != nil {
		return nodeErr(b.Node, "image build", err)
	}
	s.built = &r
	return nil
}

// pullImage runs PullImage on the pull's node: three attempts (a network
// blip passes; a registry without the image or with another digest is
// permanent), heartbeating its progress. With an auth file (on the
// control host since versionPullCredentials) each attempt gets the
// registry's login handed to the node for it alone (pullWithLogin). Its
// result is kept in pulled.
func (s *imageStep) pullImage(p contract.ImagePull) error {
	i := s.t.start("image pull "+p.Image.String()+" from "+p.Registry, p.Node)
	var r contract.PullImageResult
	in := contract.PullImageInput{Image: p.Image, Registry: p.Registry, Insecure: p.Insecure, ConfigFile: p.ConfigFile}
	var err error
	if p.AuthFile != "" && workflow.GetVersion(s.ctx, versionPullCredentials, workflow.DefaultVersion, 1) >= 1 {
		in.AuthFrom = p.AuthFile
		r, err = s.pullWithLogin(p, in)
	} else {
		in.AuthFile = p.AuthFile // a run from before: a file on the node
		err = s.pullOnce(p, in, 3, &r)
	}
	s.t.end(i, r.ID, err)
	if err != nil {
		return nodeErr(p.Node, "image pull", err)
	}
	s.pulled = &r
	return nil
}

// pullOnce runs PullImage with in on p's node, with attempts.
func (s *imageStep) pullOnce(p contract.ImagePull, in contract.PullImageInput, attempts int32, r *contract.PullImageResult) error {
	ctx := summarize(nodeOpts(s.ctx, p.Node, s.pickup, callBudget{run: imageTransferTimeout, heartbeat: imageTransferBeat, attempts: attempts}), p.Node, -1, "pull "+p.Image.String()+" from "+p.Registry)
	return workflow.ExecuteActivity(ctx, na.PullImage, in).Get(s.ctx, r)
}

// pullWithLogin is up to three pull attempts, each handed the registry's
// login anew: SendRegistryAuth (control queue) writes it from the auth
// file on the control host into a file on the node and returns its path
// (only the path enters the history), PullImage reads and removes it as
// it starts, and DropRegistryAuth removes it after the attempt however it
// ended (disconnected: even when the run is cancelled), so a login waits
// on a node no longer than its pull.
func (s *imageStep) pullWithLogin(p contract.ImagePull, in contract.PullImageInput) (contract.PullImageResult, error) {
	ctl := controlOpts(s.ctx, time.Minute, 0, 3)
	for attempt := 1; ; attempt++ {
		var r contract.PullImageResult
		var login contract.RegistryAuthResult
		if err := workflow.ExecuteActivity(ctl, ca.SendRegistryAuth, contract.RegistryAuthInput{Node: p.Node, Registry: p.Registry, AuthFile: p.AuthFile}).Get(s.ctx, &login); err != nil {
			return r, err
		}
		in.Credentials = login.Path
		err := s.pullOnce(p, in, 1, &r)
		if login.Path != "" {
			dctx, _ := workflow.NewDisconnectedContext(s.ctx)
			_ = workflow.ExecuteActivity(controlOpts(dctx, time.Minute, 0, 3), ca.DropRegistryAuth, contract.RegistryAuthDrop{Node: p.Node, Path: login.Path}).Get(dctx, nil)
		}
		var app *temporal.ApplicationError
		if err == nil || attempt >= 3 || (errors.As(err, &app) && app.NonRetryable()) || s.ctx.Err() != nil {
			return r, err
		}
	}
}

// inventory runs ImageInventory on nodes in parallel into invs.
func (r *imageRun) inventory(nodes, diffIDs []string, want string, invs map[string]contract.ImageInventoryResult) error {
	ref := r.ref
	got := make([]contract.ImageInventoryResult, len(nodes))
	steps := make([]int, len(nodes))
	for k := range steps {
		steps[k] = r.step
	}
	// With waitV a node whose worker or Docker is gone (a reboot) is
	// waited for within the budget, as staging waits; else the old
	// sequence (every inventory scheduled, then each awaited).
	errs := perNode(r.ctx, nodeFan{t: r.t, wait: r.waitV, budget: r.budget, steps: steps, nodes: nodes, docker: true},
		func(ctx workflow.Context, k int) workflow.Future {
			n := nodes[k]
			return workflow.ExecuteActivity(summarize(nodeOpts(ctx, n, r.pickup, callBudget{run: imageInventoryTimeout, attempts: 3}), n, -1, "image inventory "+ref.String()), na.ImageInventory,
				contract.ImageInventoryInput{Image: ref, DiffIDs: diffIDs, Want: want})
		},
		func(ctx workflow.Context, k int, f workflow.Future) error { return f.Get(ctx, &got[k]) })
	var first error
	for k, n := range nodes {
		res := got[k]
		if err := errs[k]; err != nil {
			if first == nil {
				first = nodeErr(n, "image inventory", err)
			}
			continue
		}
		res.Node = n // the node asked, whatever an old worker reports
		if want != "" && res.Present && res.ID != want {
			// Another image under the tag (a worker older than Want
			// reports it present): it lacks the one moved.
			res.Present, res.Unpinned = false, false
		}
		invs[n] = res
	}
	return first
}

// transfer runs every chain member's TransferImage at once and waits for
// all of them.
func (r *imageRun) transfer(p contract.ImagePlan, invs map[string]contract.ImageInventoryResult) (map[string]contract.ImageMoved, bool, error) {
	ref := r.ref
	spec := contract.ImageSpec{ID: p.ID, DiffIDs: p.DiffIDs, From: p.From, Tag: ref.Name}
	hops := p.Hops()
	futs := make([]workflow.Future, len(hops))
	for k, h := range hops {
		in := contract.TransferImageInput{Spec: spec, Have: invs[h.Node].HaveLayers, Upstream: h.Upstream, Downstream: h.Downstream, Lane: r.plan.Lane}
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
		futs[k] = workflow.ExecuteActivity(summarize(nodeOpts(r.ctx, h.Node, r.pickup, callBudget{run: imageTransferTimeout, heartbeat: imageTransferBeat, attempts: 1}), h.Node, -1, what), na.TransferImage, in)
	}
	moved := map[string]contract.ImageMoved{}
	var errs []string
	var first error
	gone := false
	for k, h := range hops {
		var res contract.TransferImageResult
		if err := futs[k].Get(r.ctx, &res); err != nil {
			errs = append(errs, h.Node+": "+errMessage(err))
			if first == nil {
				first = err
			}
			gone = gone || nodeGone(err) || errType(err) == contract.DockerUnreachable
			continue
		}
		moved[h.Node] = res.ImageMoved
	}
	if first != nil {
		return moved, gone, transferFailed(fmt.Sprintf("image %s transfer %s: %s", ref, strings.Join(p.Chain, " → "), strings.Join(errs, "; ")), first)
	}
	return moved, false, nil
}

// transferFailed is a failed transfer's error: permanent when the first
// failure was (its type kept), else a retryable ImageTransfer.
func transferFailed(msg string, first error) error {
	if typ := errType(first); typ != "" && typ != "Transient" {
		var app *temporal.ApplicationError
		if errors.As(first, &app) && app.NonRetryable() {
			return temporal.NewNonRetryableApplicationError(msg, typ, nil)
		}
	}
	return temporal.NewApplicationError(msg, "ImageTransfer")
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
