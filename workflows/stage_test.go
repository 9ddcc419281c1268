package workflows

import (
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// From versionStageVerifyInBlock on, `starter stage`'s post-stage verify
// runs inside each block's StageBlock: no VerifyBlock activity, every
// block's verify in the result, and a bad file still fails the run as a
// content mismatch naming node, block and file.
func TestStageVerifiesInsideEachStageBlock(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Verify: true})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res contract.StageResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if n := f.count("VerifyBlock"); n != 0 {
		t.Errorf("%d VerifyBlock activities, want none (the verify runs in StageBlock): %v", n, f.callList())
	}
	if n := f.count("verify in StageBlock"); n != 4 {
		t.Errorf("%d verifies inside StageBlock, want 4 (2 blocks x 2 nodes): %v", n, f.callList())
	}
	if len(res.Nodes) != 2 {
		t.Fatalf("result for %d nodes, want 2: %+v", len(res.Nodes), res)
	}
	for _, n := range res.Nodes {
		if len(n.Verified) != 2 || n.Verified[0].Block != "weights" || n.Verified[1].Block != "rows" || n.Verified[0].Result.OK != 3 {
			t.Errorf("node %s verified %+v, want weights then rows, 3 ok each", n.Node, n.Verified)
		}
		for _, b := range n.Blocks {
			if b.Verified != nil {
				t.Errorf("node %s block %s: the verify is reported twice (in Blocks too)", n.Node, b.Block)
			}
		}
	}

	f = newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.verifyBad = map[string][]string{"new/rows@b": {"rows/layer3.bin"}}
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Verify: true})
	err := f.env.GetWorkflowError()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != fault.ContentMismatch || !strings.Contains(err.Error(), "node b block rows: 1 bad") || !strings.Contains(err.Error(), "rows/layer3.bin") {
		t.Fatalf("a bad file after staging: %v", err)
	}
}

// A node worker that ignores StageBlockInput.Verify (older than the
// workflow) returns no verify: the run fails saying to upgrade it, rather
// than passing a block nobody verified.
func TestStageRefusesAStageBlockWithoutItsVerify(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.noVerifyInBlock = true
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a"), Blocks: testBlocks(), Verify: true})
	err := f.env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "returned no verify") || !strings.Contains(err.Error(), "starter fleet upgrade") {
		t.Fatalf("a StageBlock without its verify: %v", err)
	}
}
