package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/hubfetch"
)

func testFetchPlan(lane, node string) contract.FetchPlan {
	return contract.FetchPlan{Lane: lane, Node: node, Repos: []contract.FetchRepo{
		{Block: "weights", Repo: "org/a", Revision: "main", CacheDir: "/nas/hub"},
		{Block: "weights", Repo: "org/b", Revision: "v1", CacheDir: "/nas/hub"},
	}}
}

// mockFetch mocks FetchRepo: it records the repo on the queue it ran on;
// fail maps a repo to the error its fetch returns.
func (f *fakeFleet) mockFetch(fail map[string]error) {
	f.env.OnActivity("FetchRepo", any2...).Return(func(ctx context.Context, in contract.FetchRepoInput) (contract.FetchRepoResult, error) {
		f.record(ctx, "FetchRepo "+in.Repo.Repo)
		if err := fail[in.Repo.Repo]; err != nil {
			return contract.FetchRepoResult{}, err
		}
		return contract.FetchRepoResult{Repo: in.Repo.Repo, Revision: in.Repo.Revision, Commit: strings.Repeat("a", 40), Files: 3, DownloadedBytes: 10}, nil
	})
}

// Fetch runs one FetchRepo per repo, in plan order, on the fetch node's
// queue (or the control queue); a permanent Hub error stops it with its
// type, naming the node.
func TestFetchRunsEachRepoOnTheFetchNode(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Fetch)
	f.mockFetch(nil)
	f.env.ExecuteWorkflow(Fetch, contract.FetchInput{Plan: testFetchPlan("new", "a")})
	var res contract.FetchResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.callList(), ","); got != "FetchRepo org/a@a,FetchRepo org/b@a" {
		t.Fatalf("calls %s", got)
	}
	if len(res.Repos) != 2 || res.Repos[1].Revision != "v1" {
		t.Fatalf("result %+v", res)
	}

	f = newFakeFleet(t)
	f.env.RegisterWorkflow(Fetch)
	f.mockFetch(nil)
	f.env.ExecuteWorkflow(Fetch, contract.FetchInput{Plan: testFetchPlan("new", "")})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.callList(), ","); got != "FetchRepo org/a,FetchRepo org/b" {
		t.Fatalf("fetch_node = control: calls %s", got)
	}

	f = newFakeFleet(t)
	f.env.RegisterWorkflow(Fetch)
	f.mockFetch(map[string]error{"org/a": temporal.NewNonRetryableApplicationError("repo org/a: 401", hubfetch.HubUnauthorized, nil)})
	f.env.ExecuteWorkflow(Fetch, contract.FetchInput{Plan: testFetchPlan("new", "a")})
	err := f.env.GetWorkflowError()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != hubfetch.HubUnauthorized || !strings.Contains(err.Error(), "node a") || f.count("FetchRepo org/b") != 0 {
		t.Fatalf("a 401: %v (calls %v)", err, f.callList())
	}
}

// From versionStageFetch on, a Stage with a fetch plan runs the Fetch
// child before any StageBlock; without one it stages as before.
func TestStageFetchesFirst(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.env.RegisterWorkflow(Fetch)
	f.mockFetch(nil)
	plan := testFetchPlan("new", "")
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Fetch: &plan})
	var res contract.StageResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	calls := f.callList()
	if len(calls) < 3 || calls[0] != "FetchRepo org/a" || calls[1] != "FetchRepo org/b" || !strings.HasPrefix(calls[2], "StageBlock") {
		t.Fatalf("calls %v: want both fetches before any StageBlock", calls)
	}
	if res.Fetch == nil || len(res.Fetch.Repos) != 2 || len(res.Nodes) != 2 {
		t.Fatalf("result %+v", res)
	}

	f = newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.env.RegisterWorkflow(Fetch)
	f.mockFetch(map[string]error{"org/b": temporal.NewNonRetryableApplicationError("repo org/b: not found", hubfetch.HubNotFound, nil)})
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Fetch: &plan})
	if err := f.env.GetWorkflowError(); err == nil || f.count("StageBlock") != 0 {
		t.Fatalf("a failed fetch: %v, calls %v: want the stage to stop before staging", err, f.callList())
	}
}

// From versionCutoverFetch on, a cutover with a fetch plan runs the Fetch
// child before its stage step; a failed fetch fails the cutover at
// "fetch" before anything is staged, and rolls back.
func TestCutoverFetchesBeforeStaging(t *testing.T) {
	c := newCutover(t)
	c.env.RegisterWorkflow(Fetch)
	c.mockFetch(nil)
	plan := testFetchPlan("new", "")
	c.in.Fetch = &plan
	res, err := c.run()
	if err != nil {
		t.Fatalf("cutover: %v", err)
	}
	calls := c.callList()
	first := func(prefix string) int {
		for i, x := range calls {
			if strings.HasPrefix(x, prefix) {
				return i
			}
		}
		return -1
	}
	if f, s := first("FetchRepo org/b"), first("StageBlock"); f < 0 || s < 0 || f > s {
		t.Fatalf("calls %v: want both fetches before any StageBlock", calls)
	}
	if res.Fetch == nil || len(res.Fetch.Repos) != 2 || !res.OK {
		t.Fatalf("result %+v", res)
	}

	c = newCutover(t)
	c.env.RegisterWorkflow(Fetch)
	c.mockFetch(map[string]error{"org/a": temporal.NewNonRetryableApplicationError("repo org/a: gated", hubfetch.HubGated, nil)})
	c.in.Fetch = &plan
	res, err = c.run()
	if err == nil || res.FailedStep != "fetch" || c.count("StageBlock") != 0 {
		t.Fatalf("a gated repo: %v, failed step %q, calls %v", err, res.FailedStep, c.callList())
	}
}
