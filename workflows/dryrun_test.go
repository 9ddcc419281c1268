package workflows

import (
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/hubfetch"
	"github.com/sparklane/sparklane/internal/fault"
)

// From versionDryRunCompletes on, a dry Stage takes every step and
// completes: its fetch child's refusal, a block's refusal on a node and
// every other node's and block's plan are in its result — never a failed
// run in the UI while the starter prints the plan and exits 0.
func TestDryRunStageCompletesWithWhatWouldStopIt(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.env.RegisterWorkflow(Fetch)
	f.mockFetch(map[string]error{"org/b": temporal.NewNonRetryableApplicationError("repo org/b: not found on the Hub", hubfetch.HubNotFound, nil)})
	f.stageErr["new/weights@a"] = temporal.NewNonRetryableApplicationError("repo org/a: /nas/hub/models--org--a is not in src", fault.SourceMissing, nil)
	plan := testFetchPlan("new", "")
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), DryRun: true, Fetch: &plan})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("a dry run failed: %v", err)
	}
	var res contract.StageResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || res.ErrorType != hubfetch.HubNotFound || res.Error != "repo org/b: not found on the Hub" {
		t.Errorf("dry run result: dry %v, error %q (%s): want the fetch's refusal", res.DryRun, res.Error, res.ErrorType)
	}
	if res.Fetch == nil || len(res.Fetch.Repos) != 1 || res.Fetch.Error == "" {
		t.Errorf("the fetch child's result: %+v", res.Fetch)
	}
	blocks := map[string]contract.StageBlockResult{}
	for _, n := range res.Nodes {
		for _, b := range n.Blocks {
			blocks[b.Block+"@"+n.Node] = b
		}
	}
	if b := blocks["weights@a"]; b.ErrorType != fault.SourceMissing || b.Error != "repo org/a: /nas/hub/models--org--a is not in src" {
		t.Errorf("the refused block: %+v", b)
	}
	for _, k := range []string{"rows@a", "weights@b", "rows@b"} {
		if b, ok := blocks[k]; !ok || b.Error != "" || b.Result.CopiedFiles != 2 {
			t.Errorf("block %s after a refused one: %+v (present %v)", k, b, ok)
		}
	}

	// A dry Fetch alone completes with its refusal too.
	f = newFakeFleet(t)
	f.env.RegisterWorkflow(Fetch)
	f.mockFetch(map[string]error{"org/a": temporal.NewNonRetryableApplicationError("repo org/a: 401", hubfetch.HubUnauthorized, nil)})
	f.env.ExecuteWorkflow(Fetch, contract.FetchInput{Plan: testFetchPlan("new", ""), DryRun: true})
	var fr contract.FetchResult
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("a dry fetch failed: %v", err)
	}
	if err := f.env.GetWorkflowResult(&fr); err != nil || fr.ErrorType != hubfetch.HubUnauthorized || fr.Error != "repo org/a: 401" {
		t.Errorf("dry fetch result %+v, %v", fr, err)
	}

	// A real stage still fails at the refused block.
	f = newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.stageErr["new/weights@a"] = temporal.NewNonRetryableApplicationError("not in src", fault.SourceMissing, nil)
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a"), Blocks: testBlocks()})
	if err := f.env.GetWorkflowError(); err == nil {
		t.Fatal("a stage with a refused block succeeded")
	}
}
