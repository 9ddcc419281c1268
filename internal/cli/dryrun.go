package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/report"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/lane"
)

// DryRun is the stable JSON of `starter cutover|up|stage --dry-run --json`.
// Fields are only ever added.
type DryRun struct {
	// Action is cutover, up or stage.
	Action     string   `json:"action"`
	Lane       string   `json:"lane"`
	Cluster    string   `json:"cluster"`
	Runtime    string   `json:"runtime"`
	Model      string   `json:"model"`
	RecipeFile string   `json:"recipe_file"`
	RecipeHash string   `json:"recipe_hash"`
	TP         int      `json:"tp"`
	HeadAddr   string   `json:"head_addr"`
	APIPort    int      `json:"api_port"`
	Warnings   []string `json:"warnings"`
	// PostExec, PostCommands and StopAfterPost are the post hooks as
	// rendered (placeholders filled), run once the lane answers.
	PostExec      []string `json:"post_exec,omitempty"`
	PostCommands  []string `json:"post_commands,omitempty"`
	StopAfterPost bool     `json:"stop_after_post,omitempty"`
	// Probe is empty when the fleet was probed, else why it could not be.
	Probe string       `json:"probe_error,omitempty"`
	Nodes []DryRunNode `json:"nodes"`
	// Steps are the workflow's steps in the order it would run them.
	Steps []string `json:"steps"`
	// Fetch is what a stage would download from the Hub into the NAS
	// first (stage --fetch, blocks with fetch = true); FetchDry is its
	// dry run (what the NAS lacks of each repo), as starter fetch
	// --dry-run reports it.
	Fetch    *contract.FetchPlan   `json:"fetch,omitempty"`
	FetchDry *contract.FetchResult `json:"fetch_dry_run,omitempty"`
	// StageError is the first refusal the stage's dry run met (a fetch
	// the Hub refuses, an image pin given in part): the run would stop
	// there. Each block's own refusal is on the block.
	StageError string `json:"stage_error,omitempty"`
	// Memory is the lane's memory fit (weights and KV cache against each
	// node's memory); nil when it could not be estimated, MemoryNote says
	// why. MemoryError is the refusal a run would meet (without --force).
	Memory      *lane.FitEstimate `json:"memory,omitempty"`
	MemoryNote  string            `json:"memory_note,omitempty"`
	MemoryError string            `json:"memory_error,omitempty"`
	// ImageBuild says that a sim lane's engine-sim image is on no node and
	// would be built on which node, from what, before the run (as
	// `starter image build --sim`); ImageBuildError is why a node's
	// Docker could not be asked (the run would stop there).
	ImageBuild      string `json:"image_build,omitempty"`
	ImageBuildError string `json:"image_build_error,omitempty"`
}

// DryRunNode is one node's part of a dry run.
type DryRunNode struct {
	Node      string   `json:"node"`
	Rank      int      `json:"rank"`
	Head      bool     `json:"head"`
	State     string   `json:"state"`
	Why       string   `json:"why,omitempty"`
	Lanes     []string `json:"running_lanes,omitempty"`
	Container string   `json:"container"`
	Image     string   `json:"image"`
	// ImageState is whether the image is on the node and, if not, what
	// would move to it and from which node (stage's image step, dry run).
	ImageState string            `json:"image_state,omitempty"`
	Command    string            `json:"command"`
	Argv       []string          `json:"argv"`
	Env        map[string]string `json:"env"`
	// EnvFrom names where the node worker reads each secret variable
	// (env:NAME, file:/path) when it creates the container; values are
	// never in a plan.
	EnvFrom map[string]string `json:"env_from,omitempty"`
	Mounts  []DryRunMount     `json:"mounts"`
	// Docker is the container shape as docker run flags; PreExec what runs
	// in the container before the command (mods).
	Docker []string `json:"docker"`
	// DetectRDMA says the node worker adds the RDMA devices and
	// interfaces it finds there at start.
	DetectRDMA bool               `json:"detect_rdma,omitempty"`
	PreExec    []contract.PreExec `json:"pre_exec,omitempty"`
	Staging    []DryRunBlock      `json:"staging"`
	// StageOrder is a cutover's stage order on this node: ahead of the
	// stop (room beside the running lane) or after it, and why.
	StageOrder string `json:"stage_order,omitempty"`
}

// DryRunMount is a bind with its mode (ro|rw).
type DryRunMount struct {
	Src  string `json:"src"`
	Dst  string `json:"dst"`
	Mode string `json:"mode"`
}

// DryRunBlock is one staging block's plan on one node: what would be
// copied, verified, adopted and skipped (bytes and files, or rows).
type DryRunBlock struct {
	Block string                `json:"block"`
	Kind  string                `json:"kind"`
	Plan  *contract.BlockResult `json:"plan,omitempty"`
	Error string                `json:"error,omitempty"`
	// ErrorType is the refusal's type (SourceMissing, NASFull, …).
	ErrorType string `json:"error_type,omitempty"`
	// AfterFetch: the block's repos are not on the NAS yet and the run
	// fetches them first: these are the fetch's dry runs of them (the
	// files and bytes it writes), against which the block is staged.
	AfterFetch []contract.FetchRepoResult `json:"after_fetch,omitempty"`
}

// NotChecked is a dry run's node state when no control service ran to
// probe the fleet: a dry run starts none.
const NotChecked = "not checked"

// dryRun prints what action would do with the lane, starting nothing: no
// control service and no build of its program. When a control service
// runs (or temporal.address names a cluster), the fleet is read through
// it — every node's state, free space and running lanes, and the staging
// engines' own plan; when none runs, the plan is printed all the same,
// saying which facts were not checked.
func (a *App) dryRun(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan, action string) error {
	d := DryRun{Action: action, Lane: plan.Lane, Cluster: plan.Cluster, Runtime: plan.Runtime, Model: plan.Model,
		RecipeFile: r.File, RecipeHash: plan.RecipeHash, TP: plan.TP, HeadAddr: plan.HeadAddr, APIPort: plan.APIPort,
		Warnings: append([]string{}, plan.Warnings...),
		PostExec: plan.PostExec, PostCommands: plan.PostCommands, StopAfterPost: plan.StopAfterPost}
	pr := a.probeForDryRun(ctx, cfg, plan)
	if pr.err != nil {
		d.Probe = rootMessage(pr.err)
	}
	fresh := map[string]int64{}
	for n, st := range pr.states {
		fresh[n] = st.Memory
	}
	var fitErr error
	if action == "cutover" {
		d.Memory, d.MemoryNote, fitErr = a.laneFit(cfg, r, plan, fresh)
		if fitErr != nil {
			d.MemoryError = fitErr.Error()
		}
	}
	if pr.notChecked != "" {
		d.Probe = pr.notChecked
	}
	// Staging plan on the reachable nodes (the engines' own dry run: nothing written).
	ds := dryStage{plans: map[string][]DryRunBlock{}, images: map[string]string{}}
	if len(pr.reachable) > 0 && action != "up" {
		ds = a.stageForDryRun(ctx, r, plan, pr.reachable)
		d.FetchDry, d.StageError = ds.fetch, ds.err
	}
	stagePlans, imageStates := ds.plans, ds.images
	// A sim lane's engine-sim image on no node is built before the run
	// (ensureSimImage): say so, where and from what, building nothing.
	buildOn, buildFrom, buildErr := a.drySimImage(ctx, cfg, plan, a.dryBuildOn)
	if buildErr != nil {
		d.ImageBuildError = rootMessage(buildErr)
	}
	if buildOn != "" {
		d.ImageBuild = fmt.Sprintf("on no node of %s: would be built on %s from %s (as `starter image build --sim`)", plan.Lane, buildOn, buildFrom)
		for _, n := range plan.Nodes {
			if n.Node == buildOn {
				imageStates[n.Node] = "missing: would be built here before the run, from " + buildFrom
			} else {
				imageStates[n.Node] = "missing: would receive it from " + buildOn + " once built there (the image step)"
			}
		}
	}
	// The one masker of plans (the reports' too): secret-looking [env]
	// values and --token style argv values become ***.
	masked, _ := report.MaskPlan(*plan)
	for _, n := range masked.Nodes {
		dn := dryRunNode(n, r, action, pr, stagePlans[n.Node], imageStates[n.Node])
		if action == "cutover" && len(r.Staging) > 0 {
			dn.StageOrder = dryStageOrder(dn, r, pr.states[n.Node], plan.Lane)
		}
		d.Nodes = append(d.Nodes, dn)
	}
	ahead := action == "cutover"
	for _, n := range d.Nodes {
		ahead = ahead && !strings.HasPrefix(n.StageOrder, "stage after stop")
	}
	d.Steps = dryRunSteps(action, r, plan, pr.states, pr.notChecked != "")
	if ahead {
		d.Steps = stageAheadSteps(d.Steps)
	}
	if fp := a.dryFetch; fp != nil {
		d.Fetch = fp
		d.Steps = append(fetchSteps(fp, d.FetchDry, plan.Lane), d.Steps...)
	}
	if d.ImageBuild != "" {
		d.Steps = append([]string{"image " + plan.Nodes[0].Image.String() + " " + d.ImageBuild}, d.Steps...)
	}
	if err := a.output(d, func() { printDryRun(a, d) }); err != nil {
		return err
	}
	if fitErr != nil {
		return fitErr
	}
	return buildErr
}

// dryProbe is what a dry run learned of the fleet: each probed node's
// state, which nodes answered, and why the fleet was not probed
// (notChecked: no control service runs) or how the probe failed (err).
type dryProbe struct {
	states     map[string]contract.NodeState
	reachable  map[string]bool
	notChecked string
	err        error
}

// probeForDryRun probes the plan's nodes through a running control
// service, starting none.
func (a *App) probeForDryRun(ctx context.Context, cfg *config.Config, plan *contract.LanePlan) dryProbe {
	pr := dryProbe{states: map[string]contract.NodeState{}, reachable: map[string]bool{}}
	_, why, err := a.connectRunning(ctx, cfg)
	if err != nil {
		pr.err = err
		return pr
	}
	if why != "" {
		pr.notChecked = why
		return pr
	}
	in := contract.FleetProbeInput{Nodes: nodesOf(plan), PickupTimeout: contract.Duration(3 * time.Second)}
	run, err := a.start(ctx, runSpec{ID: fmt.Sprintf("dry-run/%s/%d", plan.Lane, time.Now().UnixNano()), Workflow: contract.WorkflowFleetProbe, Input: in, Lane: plan.Lane, Cluster: plan.Cluster})
	if err == nil {
		var res contract.FleetProbeResult
		err = run.Get(ctx, &res)
		for _, st := range res.Nodes {
			pr.states[st.Node] = st
			pr.reachable[st.Node] = st.State == contract.NodeFree || st.State == contract.NodeOccupied
		}
	}
	pr.err = err
	return pr
}

// dryStage is what the stage's dry run found: each reachable node's
// block plans and image state, the fetch's dry run (when the stage
// fetches first) and the first refusal that is no block's own.
type dryStage struct {
	plans  map[string][]DryRunBlock
	images map[string]string
	fetch  *contract.FetchResult
	err    string
}

// stageForDryRun runs the stage workflow dry on the reachable nodes (the
// engines' own dry run: nothing written), with the fetch first when the
// stage fetches. The run completes whatever it finds (each refusal is in
// its result); a run that fails all the same (a control service older
// than versionDryRunCompletes) gives each block of a node without a plan
// the failure as its error.
func (a *App) stageForDryRun(ctx context.Context, r *contract.Recipe, plan *contract.LanePlan, reachable map[string]bool) dryStage {
	ds := dryStage{plans: map[string][]DryRunBlock{}, images: map[string]string{}}
	sub := *plan
	sub.Nodes = nil
	for _, n := range plan.Nodes {
		if reachable[n.Node] {
			sub.Nodes = append(sub.Nodes, n)
		}
	}
	if len(sub.Nodes) == 0 {
		return ds
	}
	run, err := a.start(ctx, runSpec{ID: contract.StageID(plan.Lane) + "/dry-run", Workflow: contract.WorkflowStage, Lane: plan.Lane, Cluster: plan.Cluster,
		Input: contract.StageInput{Plan: sub, Blocks: r.Staging, Mode: contract.StageAuto, DryRun: true, Build: r.BuildFor(*plan, ""), Pull: r.PullFor(*plan, ""), Fetch: a.dryFetch}})
	var res contract.StageResult
	if err == nil {
		err = run.Get(ctx, &res)
	}
	ds.fetch, ds.err = res.Fetch, res.Error
	for _, im := range res.Images {
		s := im.State
		if im.From != "" {
			s += " (from " + im.From + ")"
		}
		if im.Error != "" {
			s += ": " + im.Error
		}
		ds.images[im.Node] = s
	}
	for _, n := range res.Nodes {
		for _, b := range n.Blocks {
			ds.plans[n.Node] = append(ds.plans[n.Node], dryBlock(b, a.dryFetch, res.Fetch))
		}
	}
	if err != nil {
		for _, n := range sub.Nodes {
			if _, ok := ds.plans[n.Node]; !ok {
				for _, b := range r.Staging {
					ds.plans[n.Node] = append(ds.plans[n.Node], DryRunBlock{Block: b.ID, Kind: b.Kind, Error: rootMessage(err)})
				}
			}
		}
	}
	return ds
}

// dryBlock is one block's dry run on one node: its plan, or its refusal —
// but a hub-mirror block whose repos are not (wholly) on the NAS yet
// (SourceMissing, SourceIncomplete) while the run fetches them first is
// planned after the fetch: what the
// fetch writes (its dry run, fr) is what the node would copy.
func dryBlock(b contract.StageBlockResult, fp *contract.FetchPlan, fr *contract.FetchResult) DryRunBlock {
	if b.Error == "" {
		p := b.Result
		return DryRunBlock{Block: b.Block, Kind: b.Kind, Plan: &p}
	}
	out := DryRunBlock{Block: b.Block, Kind: b.Kind, Error: b.Error, ErrorType: b.ErrorType}
	if (b.ErrorType != fault.SourceMissing && b.ErrorType != fault.SourceIncomplete) || b.Kind != "hub-mirror" || fp == nil {
		return out
	}
	fetched := false
	for _, r := range fp.Repos {
		fetched = fetched || r.Block == b.Block
	}
	if !fetched {
		return out
	}
	out.Error, out.ErrorType = "", ""
	out.AfterFetch = []contract.FetchRepoResult{}
	if fr != nil {
		for _, r := range fr.Repos {
			if r.Block == b.Block {
				out.AfterFetch = append(out.AfterFetch, r)
			}
		}
	}
	return out
}

// fetchSteps are the fetch's steps of a dry run, with what its own dry
// run found (fr: the files and bytes the NAS lacks, or its refusal).
func fetchSteps(fp *contract.FetchPlan, fr *contract.FetchResult, lane string) []string {
	var steps []string
	for _, r := range fp.Repos {
		s := fmt.Sprintf("fetch %s@%s from the Hub into %s on %s", r.Repo, r.Revision, r.CacheDir, fetchWhere(fp))
		var got *contract.FetchRepoResult
		if fr != nil {
			for i := range fr.Repos {
				if fr.Repos[i].Repo == r.Repo && fr.Repos[i].Block == r.Block {
					got = &fr.Repos[i]
				}
			}
		}
		switch {
		case got != nil:
			s += fmt.Sprintf(": %d of %d files (%s of %s) to download", got.MissingFiles, got.Files, contract.HumanBytes(got.MissingBytes), contract.HumanBytes(got.Bytes))
		case fr != nil && fr.Error != "":
			s += ": would stop: " + fr.Error
		default:
			s += fmt.Sprintf(" (starter fetch --lane %s --dry-run says what is missing)", lane)
		}
		steps = append(steps, s)
	}
	return steps
}

// dryRunNode is node n's part of the dry run, from its (masked) plan,
// its probed state and its staging plan; a node without one says why.
func dryRunNode(n contract.NodePlan, r *contract.Recipe, action string, pr dryProbe, staging []DryRunBlock, imageState string) DryRunNode {
	dn := DryRunNode{Node: n.Node, Rank: n.Rank, Head: n.Head, Container: n.ContainerName, Image: n.Image.String(),
		Command: n.Command, Argv: n.Argv, Env: map[string]string{}, EnvFrom: n.EnvFrom, Mounts: []DryRunMount{}, Staging: staging,
		Docker: n.Container.DockerArgs(), DetectRDMA: n.Container.DetectRDMA, PreExec: n.PreExec, ImageState: imageState}
	if st, ok := pr.states[n.Node]; ok {
		dn.State, dn.Why, dn.Lanes = st.State, st.Why, st.Lanes
	} else if pr.notChecked != "" {
		dn.State = NotChecked
	} else {
		dn.State = "unknown"
	}
	for k, v := range n.Env {
		dn.Env[k] = v
	}
	for _, m := range n.Mounts {
		dn.Mounts = append(dn.Mounts, DryRunMount{Src: m.Src, Dst: m.Dst, Mode: mountMode(m.ReadOnly)})
	}
	if dn.Staging == nil {
		dn.Staging = []DryRunBlock{}
		for _, b := range r.Staging {
			if action == "up" {
				break
			}
			why := "node not reachable: plan unknown"
			if pr.notChecked != "" {
				why = "plan not checked: no control service runs"
			}
			dn.Staging = append(dn.Staging, DryRunBlock{Block: b.ID, Kind: b.Kind, Error: why})
		}
	}
	return dn
}

// dryRunSteps are the steps the run would take, in order; unprobed says
// the fleet was not probed, so which lanes a cutover stops is not known.
func dryRunSteps(action string, r *contract.Recipe, plan *contract.LanePlan, states map[string]contract.NodeState, unprobed bool) []string {
	var steps []string
	nodes := strings.Join(nodesOf(plan), ", ")
	if action == "cutover" {
		steps = append(steps, "probe fleet ("+nodes+"; re-probe once after probe_grace)")
		if unprobed {
			steps = append(steps, "stop the lanes running on "+nodes+", if any (not checked: the fleet was not probed)")
		}
		seen := map[string]bool{}
		for _, n := range plan.Nodes {
			for _, l := range states[n.Node].Lanes {
				if l != plan.Lane && !seen[l] {
					seen[l] = true
					steps = append(steps, "stop lane "+l+" (verified)")
				}
			}
		}
	}
	if action != "up" {
		steps = append(steps, "image "+plan.Nodes[0].Image.String()+" on "+nodes+": a node that lacks it receives the layers it lacks from one that has it (chain)")
		for _, b := range r.Staging {
			steps = append(steps, fmt.Sprintf("stage %s (%s) on %s in parallel", b.ID, b.Kind, nodes))
		}
		if len(r.Staging) > 0 {
			steps = append(steps, "verify staged blocks (ledger, verify-only)")
		}
	}
	if action == "stage" {
		return steps
	}
	steps = append(steps, "ensure image "+plan.Nodes[0].Image.String()+" on "+nodes)
	if len(r.Hooks.BeforeServe) > 0 || len(r.Hooks.Clear) > 0 {
		steps = append(steps, fmt.Sprintf("before_serve hooks on %s: clear %v, run %v", nodes, r.Hooks.Clear, r.Hooks.BeforeServe))
	}
	for _, n := range plan.Nodes {
		steps = append(steps, fmt.Sprintf("start rank %d on %s (%s)", n.Rank, n.Node, n.ContainerName))
	}
	steps = append(steps, fmt.Sprintf("wait ready at http://%s:%d", plan.HeadAddr, plan.APIPort))
	if len(r.Probe.Smoke) > 0 {
		steps = append(steps, fmt.Sprintf("smoke %d prompt(s)", len(r.Probe.Smoke)))
	}
	steps = append(steps, "decode probe")
	for i, c := range plan.PostExec {
		steps = append(steps, fmt.Sprintf("post_exec[%d] in %s on %s: %s", i, plan.Nodes[0].ContainerName, plan.Nodes[0].Node, c))
	}
	for i, c := range plan.PostCommands {
		steps = append(steps, fmt.Sprintf("post_commands[%d] on the control host: %s", i, c))
	}
	if plan.StopAfterPost {
		steps = append(steps, "stop the lane (stop_after_post)")
	}
	if action == "cutover" {
		steps = append(steps, "bench (with --bench)", "on failure after the stop: remove the new lane, serve and probe the previous lane again")
	}
	return steps
}

func printDryRun(a *App, d DryRun) {
	fmt.Fprintf(a.Out, "DRY RUN — %s of lane %s on cluster %s (%s, tp %d, recipe %s %s). Nothing is written or started.\n",
		d.Action, d.Lane, d.Cluster, d.Runtime, d.TP, d.RecipeFile, short(d.RecipeHash))
	if d.Probe != "" {
		fmt.Fprintf(a.Out, "fleet not probed: %s\n", d.Probe)
	}
	for _, w := range d.Warnings {
		fmt.Fprintf(a.Out, "warning: %s\n", w)
	}
	printFit(a, d.Memory, d.MemoryNote)
	if d.MemoryError != "" {
		fmt.Fprintf(a.Out, "REFUSED: %s\n", d.MemoryError)
	}
	if d.ImageBuild != "" {
		fmt.Fprintf(a.Out, "image: %s\n", d.ImageBuild)
	}
	if d.ImageBuildError != "" {
		fmt.Fprintf(a.Out, "the run would stop before it starts: %s\n", d.ImageBuildError)
	}
	for _, n := range d.Nodes {
		state := n.State
		if n.Why != "" {
			state += " (" + n.Why + ")"
		}
		if len(n.Lanes) > 0 {
			state += " running " + strings.Join(n.Lanes, ", ")
		}
		img := n.Image
		if n.ImageState != "" {
			img += " — " + n.ImageState
		}
		fmt.Fprintf(a.Out, "\n[%s] rank %d  %s  container %s\n  image   %s\n  command %s\n  env:\n", n.Node, n.Rank, state, n.Container, img, n.Command)
		printEnv(a, n.Env, n.EnvFrom)
		fmt.Fprintln(a.Out, "  mounts:")
		for _, m := range n.Mounts {
			fmt.Fprintf(a.Out, "    %s -> %s (%s)\n", m.Src, m.Dst, m.Mode)
		}
		printDocker(a, n.Docker, n.DetectRDMA, n.PreExec)
		if n.StageOrder != "" {
			fmt.Fprintf(a.Out, "  %s\n", n.StageOrder)
		}
		for _, b := range n.Staging {
			if b.AfterFetch != nil {
				fmt.Fprintf(a.Out, "  staging %s (%s): %s\n", b.Block, b.Kind, afterFetchText(b.AfterFetch))
				continue
			}
			if b.Plan == nil {
				fmt.Fprintf(a.Out, "  staging %s (%s): %s\n", b.Block, b.Kind, b.Error)
				continue
			}
			p := b.Plan
			fmt.Fprintf(a.Out, "  staging %s (%s): copy %d files / %s, verify %d, adopt %d, skip %d (%s), links %d, total %s",
				b.Block, b.Kind, p.CopiedFiles, contract.HumanBytes(p.CopiedBytes), p.VerifiedFiles, p.AdoptedFiles, p.SkippedFiles,
				contract.HumanBytes(p.SkippedBytes), p.Links, contract.HumanBytes(p.TotalBytes))
			if p.Rows > 0 {
				fmt.Fprintf(a.Out, ", rows %d", p.Rows)
			}
			if len(p.Exports) > 0 {
				fmt.Fprintf(a.Out, ", exports %v", p.Exports)
			}
			fmt.Fprintln(a.Out)
		}
	}
	if d.StageError != "" {
		fmt.Fprintf(a.Out, "\nthe stage would stop: %s\n", d.StageError)
	}
	fmt.Fprintln(a.Out, "\nsteps, in order:")
	for i, s := range d.Steps {
		fmt.Fprintf(a.Out, "  %2d. %s\n", i+1, s)
	}
}

// fetchWhere names the worker a fetch plan runs on.
func fetchWhere(fp *contract.FetchPlan) string {
	if fp.Node == "" {
		return config.FetchControl
	}
	return fp.Node
}

// afterFetchText is a block planned after the fetch: its repos are not on
// the NAS yet, so the node copies what the fetch writes (all of it, but
// what its ledger already holds).
func afterFetchText(repos []contract.FetchRepoResult) string {
	if len(repos) == 0 {
		return "after the fetch: its repos are not on the NAS yet; the fetch writes them first, then the node copies them"
	}
	var parts []string
	var files int
	var bytes int64
	for _, r := range repos {
		files += r.Files
		bytes += r.Bytes
		parts = append(parts, fmt.Sprintf("%s@%s %d files / %s", r.Repo, short(r.Commit), r.Files, contract.HumanBytes(r.Bytes)))
	}
	return fmt.Sprintf("after the fetch: copy up to %d files / %s (what the fetch writes: %s), less what the node already holds", files, contract.HumanBytes(bytes), strings.Join(parts, ", "))
}
