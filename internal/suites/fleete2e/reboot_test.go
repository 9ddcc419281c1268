package fleete2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
	"github.com/sparklane/sparklane/workflows"
)

// extOutage is how long h3 stays down in the reboot phase (issue 39's
// 60 s); extOutageBudget the node outage budget of the fleet's config:
// longer than the outage plus the keeper's noticing it, so the keeper
// waits rather than gives up.
const extOutage, extOutageBudget = 60 * time.Second, 3 * time.Minute

// writeBootID sets h3's boot id as its worker reads it. The netns hosts
// share this machine's kernel, and so its boot id: the test worker's boot
// id seam (testworker.BootIDDirEnv) is the one simulated part of the
// reboot.
func (f *extFleet) writeBootID(id string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.bootDir, "h3"), []byte(id+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// rebooted is h3 rebooting while its lane is kept: every process on it is
// killed (its node worker, dockerd, the lane's engine), the boot id
// changes, and it stays down for extOutage; then sshd, dockerd and the
// worker start again (the lane's container is back, stopped). The keeper waited
// for h3, ran a verify-only pass of the lane's block on it that re-copied
// nothing, restarted the lane, and the lane answers on h3 again.
func (f *extFleet) rebooted(ctx context.Context) {
	f.t.Helper()
	h3 := f.tf.Node(3)
	down := time.Now()
	if cmd := f.procs["h3"]; cmd != nil {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			f.t.Fatalf("kill -9 h3's node worker: %v", err)
		}
		_ = cmd.Wait()
	}
	// Every process on h3 dies (dockerd, containerd, the shims and the
	// engine with them): killing dockerd alone leaves the engine holding
	// its port, which no reboot does.
	if err := f.tf.KillNode(ctx, h3); err != nil {
		f.t.Fatal(err)
	}
	f.writeBootID("boot-2")
	st := f.keeperUntil(ctx, 2*time.Minute, "waiting for h3", func(s contract.KeeperStatus) bool {
		return s.State == contract.KeeperWaiting
	})
	f.t.Logf("h3 down %s: keeper %s (%s)", time.Since(down).Round(time.Second), st.State, st.LastReason)
	// The outage's length is the fault injected, not a synchronisation:
	// h3 stays down for extOutage whatever the keeper does meanwhile.
	select {
	case <-time.After(time.Until(down.Add(extOutage))):
	case <-ctx.Done():
		f.t.Fatal(ctx.Err())
	}
	if err := f.tf.StartSSHD(ctx, h3); err != nil {
		f.t.Fatal(err)
	}
	if err := f.tf.StartDocker(ctx, h3); err != nil {
		f.t.Fatal(err)
	}
	f.start(h3, f.testBin, filepath.Join(f.dir, "node-h3.toml"), []string{"node", "--node", "h3"}, testworker.BootIDDirEnv+"="+f.bootDir)
	back := time.Now()
	f.t.Logf("h3 back after %s (dockerd and worker started)", back.Sub(down).Round(time.Second))
	st = f.keeperUntil(ctx, 3*time.Minute, "lane restarted after h3's reboot", func(s contract.KeeperStatus) bool {
		return len(s.Restarts) == 1 && s.Restarts[0].OK && s.State == contract.KeeperWatching && s.Health == "up"
	})
	f.t.Logf("keeper: lane up %s after h3 came back; restart reason %q", time.Since(back).Round(time.Second), st.Restarts[0].Reason)
	if !strings.Contains(st.Restarts[0].Reason, "node h3 came back") {
		f.t.Errorf("restart reason %q does not say h3 came back", st.Restarts[0].Reason)
	}
	f.rebootHistory(ctx)
	f.answers(ctx)
}

// rebootHistory reads the keeper's history: it asked whether h3 was off,
// waited for it (checks on its queue), ran the verify-only Verify child,
// then restarted the lane; the child verified h3's block clean and
// repaired (re-copied) nothing.
func (f *extFleet) rebootHistory(ctx context.Context) {
	f.t.Helper()
	var steps, children []string
	names := map[int64]string{}
	for _, e := range f.history(ctx, workflows.KeeperID(extCluster)) {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			names[e.GetEventId()] = a.GetActivityType().GetName()
			steps = append(steps, a.GetActivityType().GetName())
		}
		if a := e.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
			steps = append(steps, "child "+a.GetWorkflowType().GetName())
			if a.GetWorkflowType().GetName() == "Verify" {
				children = append(children, a.GetWorkflowId())
			}
		}
	}
	want := []string{"NodeOff", "CheckRanks", "child Verify", "StopLane", "StartRank", "WaitReady"}
	if !inOrderSteps(steps, want) {
		f.t.Errorf("keeper history does not read is-it-off → wait → verify → restart → ready (%v):\n%s", want, strings.Join(steps, "\n"))
	}
	if len(children) != 1 || !strings.Contains(children[0], "verify-h3") {
		f.t.Fatalf("keeper's children %v: want one verify-only pass on h3\n%s", children, strings.Join(steps, "\n"))
	}
	var r contract.VerifyWorkflowResult
	if err := f.c.GetWorkflow(ctx, children[0], "").Get(ctx, &r); err != nil {
		f.t.Fatalf("verify-only pass %s: %v", children[0], err)
	}
	if len(r.Blocks) == 0 || len(r.Repaired) != 0 || r.Drift {
		f.t.Errorf("verify-only pass %s: %+v: want h3's blocks verified clean, nothing re-copied", children[0], r)
	}
	for _, b := range r.Blocks {
		if b.Node != "h3" || !b.Result.Clean() {
			f.t.Errorf("verify-only pass %s: block %s on %s: %+v, want clean on h3", children[0], b.Block, b.Node, b.Result)
		}
	}
	f.t.Logf("keeper history: %d steps; verify-only %s: %d blocks on h3 clean, %d repaired", len(steps), children[0], len(r.Blocks), len(r.Repaired))
}

// inOrderSteps: want appears in events as a subsequence.
func inOrderSteps(events, want []string) bool {
	i := 0
	for _, e := range events {
		if i < len(want) && e == want[i] {
			i++
		}
	}
	return i == len(want)
}

// keeperUntil polls the keeper-status query until ok holds (within).
func (f *extFleet) keeperUntil(ctx context.Context, within time.Duration, what string, ok func(contract.KeeperStatus) bool) contract.KeeperStatus {
	f.t.Helper()
	var st contract.KeeperStatus
	deadline := time.Now().Add(within)
	for {
		v, err := f.c.QueryWorkflow(ctx, workflows.KeeperID(extCluster), "", contract.KeeperStatusQuery)
		if err == nil && v.Get(&st) == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("keeper/%s: not %s within %s: %+v (%v)\n%s", extCluster, what, within, st, err, f.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
