package itest

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
	"github.com/sparklane/sparklane/workflows"
)

// The replay corpus: every workflow type and its failure paths run through
// the real server, real workers, real files and real containers, each run
// checked, and (with SPARKLANE_WRITE_HISTORIES=1) its history written to
// workflows/testdata/histories for TestReplayCommittedHistories. The paths:
// stage and its per-node children, verify clean and with drift, serve (up),
// probe, bench, stop, a cutover with bench (and its fleet-probe child), and
// a cutover cancelled mid-stage that rolls back to the lane it stopped.
// Power has its own fleet (TestReplayCorpusPower).
func TestReplayCorpusEveryWorkflowType(t *testing.T) {
	pause := testworker.NewStagePause(0, "") // armed for the cancelled cutover below
	f, dc := demoFleet(t, 24<<20, func(o *fleetOptions) { o.seams = &activities.Seams{StageHold: pause.Hold} })
	ctx := withTimeout(t, 15*time.Minute)
	run := func(args ...string) (int, string) {
		t.Helper()
		code, out, errOut := f.starter(ctx, args...)
		return code, out + errOut
	}
	must := func(args ...string) {
		t.Helper()
		if code, out := run(args...); code != 0 {
			t.Fatalf("starter %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}

	must("stage", "--lane", "demo-2x")
	saveHistory(t, f, contract.StageID("demo-2x"), "stage-ok")
	// stagenode-ok was recorded before versionStageVerifyInBlock (a
	// VerifyBlock after the blocks) and is kept; this run records the
	// verify inside each StageBlock.
	if n := activitiesScheduled(t, f, contract.StageNodeID("demo-2x", "n1"), "VerifyBlock"); n != 0 {
		t.Errorf("stage's per-node run scheduled %d VerifyBlock activities; the verify runs inside StageBlock", n)
	}
	saveHistory(t, f, contract.StageNodeID("demo-2x", "n1"), "stagenode-verify-in-block")
	must("verify", "--lane", "demo-2x")
	saveHistory(t, f, contract.VerifyID("demo-2x"), "verify-clean")

	// Drift: a staged blob on n1 changes under the ledger.
	blob := largestFile(t, filepath.Join(f.dir, "nodes", "n1", "srv", "sparklane", "hf"))
	fh, err := os.OpenFile(blob, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt([]byte("drift!"), 0); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	code, out := run("verify", "--lane", "demo-2x")
	if code != 1 || !strings.Contains(out, "n1") {
		t.Fatalf("verify after drift: exit %d, want 1 naming n1\n%s", code, out)
	}
	saveHistory(t, f, contract.VerifyID("demo-2x"), "verify-drift")
	must("stage", "--lane", "demo-2x", "--stage=force")
	must("verify", "--lane", "demo-2x")

	must("up", "--lane", "demo-2x")
	saveHistory(t, f, contract.UpID("demo-2x"), "serve-ok")
	must("probe", "--lane", "demo-2x")
	saveHistory(t, f, "probe/demo-2x", "probe-ok")
	must("bench", "--lane", "demo-2x", "--label", "corpus")
	saveHistory(t, f, contract.BenchID("demo-2x"), "bench-ok")
	must("stop", "--lane", "demo-2x")
	saveHistory(t, f, contract.StopID("demo-2x"), "stop-ok")
	if _, all := laneContainers(t, dc, "demo-2x"); all != 0 {
		t.Fatalf("stop left %d demo-2x containers", all)
	}

	code, res, errOut := cutover(t, f, "--lane", "demo-2x", "--bench", "--label", "corpus")
	if code != 0 || !res.OK || res.Bench == nil {
		t.Fatalf("cutover demo-2x --bench: exit %d %+v\n%s", code, res, errOut)
	}
	saveHistory(t, f, contract.CutoverID("demo-2x"), "cutover-bench")
	saveHistory(t, f, contract.CutoverID("demo-2x")+"/probe", "fleetprobe-ok")

	// Cancelled mid-stage: every staging pass of demo-4x holds at its
	// first byte (the staging fault point) until the cancel reaches it;
	// the rollback serves demo-2x again.
	pause.Arm(1)
	crun := startCutover(ctx, t, f, "demo-4x")
	hctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	pendingStage(hctx, t, f.env.Client, contract.StageNodeID("demo-4x", "n3"), func(p contract.StageProgress) bool { return p.Paused })
	cancel()
	if err := f.env.Client.CancelWorkflow(ctx, contract.CutoverID("demo-4x"), ""); err != nil {
		t.Fatal(err)
	}
	err = crun.Get(ctx, nil)
	pause.Arm(0)
	// A cancelled run ends cancelled (its rollback ran under a
	// disconnected context first: checked on the containers below).
	if !temporal.IsCanceledError(err) {
		t.Fatalf("cancelled cutover: err %v, want canceled", err)
	}
	saveHistory(t, f, contract.CutoverID("demo-4x"), "cutover-cancelled")
	if r, _ := laneContainers(t, dc, "demo-2x"); r != 2 {
		var p contract.Progress
		if v, err := f.env.Client.QueryWorkflow(ctx, contract.CutoverID("demo-4x"), "", contract.ProgressQuery); err == nil {
			_ = v.Get(&p)
		}
		t.Errorf("demo-2x runs %d containers after the cancelled cutover's rollback, want 2; steps: %+v", r, p.Steps)
	}
	if _, all := laneContainers(t, dc, "demo-4x"); all != 0 {
		t.Errorf("the cancelled lane left %d containers", all)
	}
	must("stop", "--cluster", "demo-4x")
}

// startCutover starts Cutover for lane through the client, as the CLI
// does, and returns the run without waiting for it.
func startCutover(ctx context.Context, t *testing.T, f *fleet, lane string) client.WorkflowRun {
	t.Helper()
	r, plan := f.lanePlan(lane)
	var fleetNodes []string
	for _, n := range f.cfg.Nodes {
		fleetNodes = append(fleetNodes, n.Name)
	}
	run, err := f.env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.CutoverID(plan.Cluster), TaskQueue: contract.ControlQueue},
		workflows.Cutover, contract.CutoverInput{Recipe: *r, Plan: *plan, Stage: contract.StageAuto, Fleet: fleetNodes, Grace: contract.Duration(time.Second)})
	if err != nil {
		t.Fatalf("start cutover %s: %v", lane, err)
	}
	return run
}

// largestFile is the biggest regular file under dir (a staged blob).
func largestFile(t *testing.T, dir string) string {
	t.Helper()
	var best string
	var size int64 = -1
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if st, err := d.Info(); err == nil && st.Size() > size {
			best, size = p, st.Size()
		}
		return nil
	})
	if err != nil || best == "" {
		t.Fatalf("no staged file under %s: %v", dir, err)
	}
	return best
}
