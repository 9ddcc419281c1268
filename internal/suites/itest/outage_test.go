package itest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/testkit/diskuse"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
)

// waitForWaiting queries the stage/LANE/NODE child until its progress says
// it waits for node, and returns that step's detail.
func waitForWaiting(ctx context.Context, t *testing.T, c client.Client, id, node string) string {
	t.Helper()
	for {
		if v, err := c.QueryWorkflow(ctx, id, "", contract.ProgressQuery); err == nil {
			var p contract.Progress
			if v.Get(&p) == nil {
				for _, s := range p.Steps {
					if s.Status == contract.StepWaiting && len(p.Waiting) == 1 && p.Waiting[0].Node == node {
						return s.Detail
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never showed that it waits for node %s: %v", id, node, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// A node worker gone mid-copy for longer than its retries and pickup
// timeout (as long as a reboot takes) does not fail the stage: the run
// shows that it waits for the node and, when the worker polls again,
// resumes the block from the bytes already on the node's disk.
func TestStageWaitsForANodeThatReboots(t *testing.T) {
	f, proc := killFleet(t)
	ctx := withTimeout(t, 8*time.Minute)
	proc.stop()
	proc.env = []string{fmt.Sprintf("%s=%d", testworker.PauseAtEnv, 512<<20)}
	proc.start()
	run := startStage(ctx, t, f, "big-hub")
	id := contract.StageNodeID("big-hub", "n2")
	hctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	seen := pendingStage(hctx, t, f.env.Client, id, func(p contract.StageProgress) bool { return p.Paused })
	cancel()
	proc.kill9()
	onDisk := diskuse.WrittenBytes(t, filepath.Join(f.dir, "nodes", "n2", "srv/sparklane/hf"), 0)

	// Gone past the heartbeat timeout, the retry and the pickup timeout:
	// the run now waits, and says so.
	detail := waitForWaiting(ctx, t, f.env.Client, id, "n2")
	if !strings.Contains(detail, "waiting for node n2 (down ") {
		t.Fatalf("waiting step detail %q", detail)
	}
	proc.env = nil
	proc.start()
	var res contract.StageResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("stage after the node came back: %v\nworker log: %s", err, proc.log)
	}
	b, v := res.Nodes[0].Blocks[0].Result, res.Nodes[0].Verified[0].Result
	if !v.Clean() {
		t.Fatalf("verify after the outage: %d bad, %d missing", len(v.Bad), len(v.Missing))
	}
	recopied := onDisk + b.CopiedBytes - b.TotalBytes
	t.Logf("held at %s; %s on disk when the node went away; re-copied %s after it came back (%s)", contract.HumanBytes(seen.BytesDone), contract.HumanBytes(onDisk), contract.HumanBytes(max(0, recopied)), detail)
	// The worker was killed, the machine was not: within the boot its temp
	// files were written in, nothing of a big file is copied again, a small
	// file in flight may be.
	if recopied > 4*hubmirror.SmallMax {
		t.Errorf("re-copied %d bytes after the outage, more than one small file per file in flight (%d)", recopied, 4*hubmirror.SmallMax)
	}
}

// A node that never comes back fails the stage after the outage budget,
// naming the node and how long it was gone.
func TestStageFailsWhenANodeStaysGonePastItsBudget(t *testing.T) {
	f, proc := killFleet(t)
	ctx := withTimeout(t, 6*time.Minute)
	proc.stop()
	proc.env = []string{fmt.Sprintf("%s=%d", testworker.PauseAtEnv, 256<<20)}
	proc.start()
	run := startStage(ctx, t, f, "big-hub", 20*time.Second)
	hctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	pendingStage(hctx, t, f.env.Client, contract.StageNodeID("big-hub", "n2"), func(p contract.StageProgress) bool { return p.Paused })
	cancel()
	proc.kill9()
	err := run.Get(ctx, nil)
	if err == nil {
		t.Fatal("the stage succeeded though n2 never came back")
	}
	for _, want := range []string{"node n2 was gone for", "outage budget of 20s", "node.n2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
