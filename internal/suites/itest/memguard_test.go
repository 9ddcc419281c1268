package itest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
)

// Issue 53, item 3, end to end: a cutover stages the next lane on the
// nodes where the previous one serves (real containers), so its node
// workers stage beside it under the fleet's [staging] min_available.
// With MemAvailable (the workers' seam) under the floor, the stage pauses
// and the pending StageBlock's heartbeat, read from the server as the
// starter reads it, says why and beside which lane; once the test frees
// the memory the stage resumes and the cutover completes. The first
// cutover, on idle nodes, stages under the same low memory unpaused.
func TestStageAheadPausesUnderTheMemoryFloor(t *testing.T) {
	var freed atomic.Bool
	seams := &activities.Seams{MemAvailable: func(string) int64 {
		if freed.Load() {
			return 64 << 30
		}
		return 2 << 30
	}}
	f, dc := demoFleet(t, 24<<20, func(o *fleetOptions) {
		o.seams = seams
		o.tail = "\n[staging]\nmin_available = \"4G\"\n"
	})
	if f.cfg.Staging.Floor() != 4<<30 {
		t.Fatalf("the fleet's [staging] did not load: %+v", f.cfg.Staging)
	}
	code, res, errOut := cutover(t, f, "--lane", "demo-4x")
	if code != 0 || !res.OK {
		t.Fatalf("cutover demo-4x on idle nodes, under the same low memory: exit %d, %+v\n%s", code, res, errOut)
	}

	ctx := withTimeout(t, 10*time.Minute)
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "demo-2x", "--no-wait", "--json")
	if code != 0 {
		t.Fatalf("cutover demo-2x --no-wait: exit %d\n%s\n%s", code, out, errOut)
	}
	// The stage heartbeats at the SDK's throttle (under a minute).
	hctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	want := "paused: MemAvailable 2.0 GiB under min_available 4.0 GiB"
	p := pendingStage(hctx, t, f.env.Client, contract.StageNodeID("demo-2x", "n1"), func(p contract.StageProgress) bool { return p.Waiting != "" })
	cancel()
	if p.Waiting != want || strings.Join(p.Beside, ",") != "demo-4x" {
		t.Fatalf("n1's stage heartbeat: waiting %q beside %q; want %q beside demo-4x", p.Waiting, p.Beside, want)
	}
	if r, _ := laneContainers(t, dc, "demo-4x"); r != 4 {
		t.Fatalf("demo-4x: %d containers running while demo-2x stages beside it, want 4", r)
	}
	freed.Store(true)

	cutoverServesAfter(ctx, t, f, contract.CutoverID("demo-2x"), "the memory was freed")
	var done contract.CutoverResult
	if err := f.env.Client.GetWorkflow(ctx, contract.CutoverID("demo-2x"), "").Get(ctx, &done); err != nil {
		t.Fatal(err)
	}
	if len(done.Previous) != 1 || done.Previous[0] != "demo-4x" {
		t.Errorf("previous lanes %v, want [demo-4x]", done.Previous)
	}
	rows := int64(0)
	for _, n := range done.Stage {
		for _, b := range n.Blocks {
			rows += b.Result.Rows
		}
	}
	if rows == 0 {
		t.Errorf("demo-2x's stage wrote no rows beside demo-4x: %+v", done.Stage)
	}
}
