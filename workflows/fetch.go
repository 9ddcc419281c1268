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
func Fetch(ctx workflow.Context, in contract.FetchInput) (contract.FetchResult, error) {
	t := newTracker(ctx, "Fetch", in.Plan.Lane)
	return fetchRepos(ctx, t, in)
}

// fetchRepos runs FetchRepo for every repo of in.Plan, stopping at the
// first failure (its type kept: HubNotFound, NASFull, ...).
func fetchRepos(ctx workflow.Context, t *tracker, in contract.FetchInput) (contract.FetchResult, error) {
	res := contract.FetchResult{Lane: in.Plan.Lane}
	hb := in.Heartbeat.D()
	if hb <= 0 {
		hb = fetchHeartbeat
	}
	where := in.Plan.Node
	var actx workflow.Context
	if where == "" {
		where = fetchControl
		actx = controlOpts(ctx, fetchRunTimeout, hb, fetchAttempts)
	} else {
		actx = nodeOpts(ctx, where, in.Pickup.D(), fetchRunTimeout, hb, fetchAttempts)
	}
	verb := "fetch "
	if in.DryRun {
		verb = "plan fetch "
	}
	for _, r := range in.Plan.Repos {
		what := verb + r.Repo + "@" + r.Revision
		i := t.start(what, where)
		ain := contract.FetchRepoInput{Lane: in.Plan.Lane, Repo: r, Endpoint: in.Plan.Endpoint, TokenFile: in.Plan.TokenFile, DryRun: in.DryRun}
		var out contract.FetchRepoResult
		call := func() error {
			return workflow.ExecuteActivity(summarize(actx, where, -1, what), fa.FetchRepo, ain).Get(ctx, &out)
		}
		var err error
		if in.Plan.Node == "" {
			err = call()
		} else {
			err = waitForNode(ctx, t, i, where, in.OutageBudget.D(), call)
		}
		detail := fmt.Sprintf("%s: %d files, %d bytes downloaded, %d resumed, %d blobs reused", short(out.Commit), out.Files, out.DownloadedBytes, out.ResumedBytes, out.ReusedFiles)
		if in.DryRun {
			detail = fmt.Sprintf("%s: %d of %d files missing, %d bytes to download", short(out.Commit), out.MissingFiles, out.Files, out.MissingBytes)
		}
		t.end(i, detail, err)
		if err != nil {
			if in.Plan.Node != "" {
				return res, nodeErr(where, what, err)
			}
			return res, err
		}
		res.Repos = append(res.Repos, out)
	}
	return res, nil
}

// short is a commit's first 12 characters (what the step detail shows).
func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// fetchChild runs Fetch as a child (fetch/LANE) of a Stage and returns its
// result: the NAS holds the lane's repos before any node stages them.
func fetchChild(ctx workflow.Context, t *tracker, in contract.FetchInput, cluster string) (*contract.FetchResult, error) {
	id := contract.FetchID(in.Plan.Lane)
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
