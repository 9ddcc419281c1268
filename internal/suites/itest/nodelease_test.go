package itest

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
)

// One mutating run per node across overlapping clusters: demo-4x (n1–n4)
// and demo-2x (n1, n2) share n1 and n2. A cutover of demo-4x held
// mid-stage by the staging fault point holds n1–n4 (node-lease.NODE on the
// real server); a cutover and a stage of demo-2x, reached through the
// other cluster, are refused naming the holder and what to do; once the
// first is cancelled (its rollback done under its leases), the stage of
// demo-2x runs.
func TestOverlappingClustersOneMutatingRunPerNode(t *testing.T) {
	pause := testworker.NewStagePause(0, "")
	f, dc := demoFleet(t, 24<<20, func(o *fleetOptions) { o.seams = &activities.Seams{StageHold: pause.Hold} })
	ctx := withTimeout(t, 10*time.Minute)
	run := func(args ...string) (int, string) {
		t.Helper()
		code, out, errOut := f.starter(ctx, args...)
		return code, out + errOut
	}

	pause.Arm(1) // every staging pass holds at its first byte
	first := startCutover(ctx, t, f, "demo-4x")
	hctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	pendingStage(hctx, t, f.env.Client, contract.StageNodeID("demo-4x", "n2"), func(p contract.StageProgress) bool { return p.Paused })
	cancel()
	// The lease of a shared node names its holder on the server.
	v, err := f.env.Client.QueryWorkflow(ctx, contract.NodeLeaseID("n1"), "", contract.LeaseHolderQuery)
	if err != nil {
		t.Fatalf("query node-lease.n1 while the demo-4x cutover stages: %v", err)
	}
	var h contract.NodeLeaseHolder
	if err := v.Get(&h); err != nil || h.WorkflowID != contract.CutoverID("demo-4x") || h.Kind != "cutover" || h.Lane != "demo-4x" {
		t.Fatalf("node-lease.n1 holder %+v (%v), want the demo-4x cutover", h, err)
	}

	holder := "node n1 is held by cutover cutover/demo-4x (lane demo-4x, cluster demo-4x)"
	todo := "wait for it to finish and retry this %s, follow it with `starter attach cutover/demo-4x`, or cancel it with `starter cancel cutover/demo-4x`"
	code, out := run("cutover", "--lane", "demo-2x")
	if code == 0 || !strings.Contains(out, holder) || !strings.Contains(out, strings.Replace(todo, "%s", "cutover", 1)) {
		t.Fatalf("cutover demo-2x while demo-4x's cutover holds n1: exit %d, want a refusal naming the holder\n%s", code, out)
	}
	saveHistory(t, f, contract.CutoverID("demo-2x"), "cutover-node-held")
	code, out = run("stage", "--lane", "demo-2x")
	if code == 0 || !strings.Contains(out, holder) || !strings.Contains(out, strings.Replace(todo, "%s", "stage", 1)) {
		t.Fatalf("stage demo-2x while demo-4x's cutover holds n1: exit %d, want a refusal naming the holder\n%s", code, out)
	}
	// Refused before touching anything: no per-node stage of demo-2x ran.
	for _, n := range []string{"n1", "n2"} {
		if _, err := f.env.Client.DescribeWorkflowExecution(ctx, contract.StageNodeID("demo-2x", n), ""); err == nil {
			t.Errorf("the refused runs of demo-2x started %s", contract.StageNodeID("demo-2x", n))
		}
	}

	// The first run is cancelled: its rollback runs, then it lets go.
	if err := f.env.Client.CancelWorkflow(ctx, contract.CutoverID("demo-4x"), ""); err != nil {
		t.Fatal(err)
	}
	err = first.Get(ctx, nil)
	pause.Arm(0)
	if !temporal.IsCanceledError(err) {
		t.Fatalf("cancelled cutover: err %v, want canceled", err)
	}
	saveHistory(t, f, contract.CutoverID("demo-4x"), "cutover-cancelled-node-leases")
	if _, all := laneContainers(t, dc, "demo-4x"); all != 0 {
		t.Errorf("the cancelled lane left %d containers", all)
	}
	code, out = run("stage", "--lane", "demo-2x")
	if code != 0 {
		t.Fatalf("stage demo-2x after the demo-4x cutover was cancelled: exit %d\n%s", code, out)
	}
	saveHistory(t, f, contract.StageID("demo-2x"), "stage-node-leases")
	saveHistory(t, f, contract.NodeLeaseID("n1"), "nodelease-ok")
	// The stage released its leases too: the lease of n1 has ended.
	d, err := f.env.Client.DescribeWorkflowExecution(ctx, contract.NodeLeaseID("n1"), "")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.GetWorkflowExecutionInfo().GetStatus().String(); st != "Completed" {
		t.Errorf("node-lease.n1 is %s after the stage returned, want Completed", st)
	}
}
