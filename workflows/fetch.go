package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
)

// Hub fetch budgets: a 400 GB checkpoint over a slow link runs for hours;
// the heartbeat timeout notices a dead worker, and the retry resumes from
// the partial files on the NAS. The heartbeat timeout is longer than the
// engine's read-idle abort (FetchRepo keeps 2/5 of it for that, and ends
// an attempt silent for 4/5 of it), so a stalled request is aborted and
// resumed inside its attempt and no attempt outlives its heartbeat: two
// never run side by side. (An activity option, not a command: no version
// gate.)
const (
	fetchRunTimeout = 48 * time.Hour
	fetchAttempts   = 20
	fetchHeartbeat  = 5 * time.Minute
)

// fetchControl names the control service's worker in fetch steps and
// results (config fetch_node = "control").
const fetchControl = "control"

// fa names the fetch activities (registered on the control worker and on
// every node worker).
var fa *activities.FetchActivities

// Fetch downloads a lane's hub-mirror repos from the Hub into the NAS at
// their pinned revisions, one repo after another (each one's files and
// ranges in parallel), on the worker fetch_node names: a node's queue
// (waited for within the outage budget, like staging) or the control
// queue. ID fetch/LANE.
//
// Its steps are fetchRun's: one repo step per repo, in plan order.
func Fetch(ctx workflow.Context, in contract.FetchInput) (contract.FetchResult, error) {
	f := newFetchRun(ctx, newTracker(ctx, "Fetch", in.Plan.Lane), in)
	err := f.run()
	if err != nil && in.DryRun && workflow.GetVersion(ctx, versionDryRunCompletes, workflow.DefaultVersion, 1) >= 1 {
		// A dry run completes with what a fetch would stop with.
		f.res.Error, f.res.ErrorType = errMessage(err), errType(err)
		return f.res, nil
	}
	return f.res, err
}

// fetchRun is one Fetch run: its input, where it runs (a node, or
// fetchControl) with which activity options, and its result so far.
type fetchRun struct {
	ctx   workflow.Context
	t     *tracker
	in    contract.FetchInput
	res   contract.FetchResult
	where string
	actx  workflow.Context
}

func newFetchRun(ctx workflow.Context, t *tracker, in contract.FetchInput) *fetchRun {
	f := &fetchRun{ctx: ctx, t: t, in: in, res: contract.FetchResult{Lane: in.Plan.Lane}, where: in.Plan.Node}
	hb := in.Heartbeat.D()
	if hb <= 0 {
		hb = fetchHeartbeat
	}
	if f.where == "" {
		f.where = fetchControl
		f.actx = controlOpts(ctx, fetchRunTimeout, hb, fetchAttempts)
	} else {
		f.actx = nodeOpts(ctx, f.where, in.Pickup.D(), callBudget{run: fetchRunTimeout, heartbeat: hb, attempts: fetchAttempts})
	}
	return f
}

// run fetches every repo of the plan, stopping at the first failure (its
// type kept: HubNotFound, NASFull, ...).
func (f *fetchRun) run() error {
	for _, r := range f.in.Plan.Repos {
		if err := f.repo(r); err != nil {
			return err
		}
	}
	return nil
}

// repo runs FetchRepo for one repo (a dry run: what it would download)
// where the fetch runs; a fetch node gone is waited for within the outage
// budget.
func (f *fetchRun) repo(r contract.FetchRepo) error {
	in := f.in
	verb := "fetch "
	if in.DryRun {
		verb = "plan fetch "
	}
	what := verb + r.Repo + "@" + r.Revision
	i := f.t.start(what, f.where)
	ain := contract.FetchRepoInput{Lane: in.Plan.Lane, Repo: r, Endpoint: in.Plan.Endpoint, TokenFile: in.Plan.TokenFile, DryRun: in.DryRun}
	var out contract.FetchRepoResult
	call := func() error {
		return workflow.ExecuteActivity(summarize(f.actx, f.where, -1, what), fa.FetchRepo, ain).Get(f.ctx, &out)
	}
	var err error
	if in.Plan.Node == "" {
		err = call()
	} else {
		err = waitForNode(f.ctx, nodeStep{t: f.t, step: i, node: f.where, budget: in.OutageBudget.D()}, call)
	}
	detail := fmt.Sprintf("%s: %d files, %d bytes downloaded, %d resumed, %d blobs reused", short(out.Commit), out.Files, out.DownloadedBytes, out.ResumedBytes, out.ReusedFiles)
	if in.DryRun {
		detail = fmt.Sprintf("%s: %d of %d files missing, %d bytes to download", short(out.Commit), out.MissingFiles, out.Files, out.MissingBytes)
	}
	f.t.end(i, detail, err)
	if err != nil {
		if in.Plan.Node != "" {
			return nodeErr(f.where, what, err)
		}
		return err
	}
	f.res.Repos = append(f.res.Repos, out)
	return nil
}

// short is a commit's first 12 characters (what the step detail shows).
func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// fetchChild runs Fetch as a child (id: fetch/LANE, a dry run's
// fetch/LANE/dry-run) of a Stage and returns its result: the NAS holds
// the lane's repos before any node stages them.
func fetchChild(ctx workflow.Context, t *tracker, in contract.FetchInput, cluster, id string) (*contract.FetchResult, error) {
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            id,
		TaskQueue:             contract.ControlQueue,
		StaticSummary:         "fetch " + in.Plan.Lane + " from the Hub into the NAS",
		TypedSearchAttributes: searchattr.For(in.Plan.Lane, cluster),
	})
	t.child(id)
	i := t.start("fetch", in.Plan.Node)
	var r contract.FetchResult
	err := workflow.ExecuteChildWorkflow(cctx, Fetch, in).Get(ctx, &r)
	t.end(i, fmt.Sprintf("%d repos", len(r.Repos)), err)
	if err != nil {
		return nil, err
	}
	return &r, nil
}
