package itest

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/workflows"
)

// The control host "reboots" (its control service, which holds the
// embedded server, its SQLite state and every local node's worker, is
// killed with SIGKILL): runs pause until it is back, then resume from
// their histories. Killed while a cutover waits for its lane to load, the
// service is started again on the same state_dir; the same run completes
// (WaitReady retried, not a second set of containers). Killed again while
// the cluster's keeper watches the lane, the keeper resumes checking after
// the restart.
func TestControlServiceKilledRunsAndKeeperResume(t *testing.T) {
	p := newProcFleet(t, 1<<40, "keep = { interval = \"1s\", restarts = 2, window = \"1h\" }\n") // no staging pause
	ctx := withTimeout(t, 10*time.Minute)
	// 256 MiB of weights at 32 MiB/s: each rank loads for ~8 s.
	code, out := p.run(ctx, "--json", "cutover", "--lane", "crash-2x", "--no-wait", "-o", "extra_args=--load-mibps=32")
	if code != 0 {
		t.Fatalf("cutover --no-wait: exit %d\n%s", code, out)
	}
	id := contract.CutoverID("crash-2x")
	c := p.client(ctx)
	waitPending(ctx, t, c, id, "WaitReady")
	first := p.kill9Control(ctx)
	c = p.restartControl(ctx, first)

	code, out = p.run(ctx, "--json", "attach", "--lane", "crash-2x")
	var res contract.CutoverResult
	if i := strings.Index(out, "{"); code != 0 || i < 0 || json.Unmarshal([]byte(out[i:]), &res) != nil || !res.OK || res.Serve == nil || !res.Serve.Answers {
		t.Fatalf("the cutover after the control service's kill -9: exit %d\n%s", code, out)
	}
	if att := activityAttempts(ctx, t, c, id, "WaitReady"); len(att) != 1 || att[0] < 2 {
		t.Errorf("WaitReady attempts %v: want the one activity retried after the restart", att)
	}
	if n := len(activityAttempts(ctx, t, c, id, "StartRank")); n != 2 {
		t.Errorf("StartRank ran %d times, want 2 (one per rank): the restart must not start a second set", n)
	}

	// The keeper watches; the control host goes down again and comes back.
	kid := workflows.KeeperID("crash-2x")
	before := waitKeeperOn(ctx, t, c, kid, "watching a healthy lane", func(s contract.KeeperStatus) bool {
		return s.State == contract.KeeperWatching && s.Health == "up" && s.Checks >= 2
	})
	d, err := c.DescribeWorkflowExecution(ctx, kid, "")
	if err != nil {
		t.Fatal(err)
	}
	keeperRun := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	second := p.kill9Control(ctx)
	back := time.Now()
	c = p.restartControl(ctx, second)
	// A check ends after the restart (the one the kill interrupted, its
	// activity retried, or a later one) and a new one has begun: the
	// keeper counts a check when it begins it.
	after := waitKeeperOn(ctx, t, c, kid, "checking again after the restart", func(s contract.KeeperStatus) bool {
		return s.State == contract.KeeperWatching && s.Health == "up" && s.LastCheck.After(back) && s.Checks > before.Checks
	})
	d, err = c.DescribeWorkflowExecution(ctx, kid, "")
	if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("keeper after the restart: %v %v", err, d.GetWorkflowExecutionInfo().GetStatus())
	}
	// Far fewer than the 100 checks after which a keeper continues as new.
	if run := d.GetWorkflowExecutionInfo().GetExecution().GetRunId(); run != keeperRun {
		t.Errorf("keeper run %s after the restart, was %s: want the same keeper run going on", run, keeperRun)
	}
	if len(after.Restarts) != 0 {
		t.Errorf("the keeper restarted the lane across the control service's restart: %+v (its containers never stopped)", after.Restarts)
	}
	t.Logf("keeper: %d checks before the kill, %d after the restart, last check %s", before.Checks, after.Checks, after.LastCheck.Format(time.RFC3339Nano))
}

// kill9Control kills the control service of p's state_dir with SIGKILL
// and waits until its lock is free (the process is gone); it returns the
// killed pid.
func (p *procFleet) kill9Control(ctx context.Context) int {
	p.t.Helper()
	o, ok := control.Find(p.state)
	if !ok {
		p.t.Fatalf("no control service holds %s", p.state)
	}
	if err := syscall.Kill(o.PID, syscall.SIGKILL); err != nil {
		p.t.Fatalf("kill -9 the control service %d: %v", o.PID, err)
	}
	for {
		if _, held := control.Find(p.state); !held {
			return o.PID
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("the killed control service %d still holds %s", o.PID, p.state)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// restartControl starts the control service again (`starter control
// start`) on the same state_dir and returns a client of it.
func (p *procFleet) restartControl(ctx context.Context, killed int) client.Client {
	p.t.Helper()
	code, out := p.run(ctx, "--json", "control", "start")
	o, ok := control.Find(p.state)
	if code != 0 || !ok || o.PID == killed {
		p.t.Fatalf("control start after the kill: exit %d (%+v)\n%s", code, o, out)
	}
	return p.client(ctx)
}

// waitKeeperOn polls keeper id's status until ok says so.
func waitKeeperOn(ctx context.Context, t *testing.T, c client.Client, id, what string, ok func(contract.KeeperStatus) bool) contract.KeeperStatus {
	t.Helper()
	var st contract.KeeperStatus
	for {
		v, err := c.QueryWorkflow(ctx, id, "", contract.KeeperStatusQuery)
		if err == nil && v.Get(&st) == nil && ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not %s; last status %+v (%v)", id, what, st, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
