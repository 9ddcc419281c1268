package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/hatest"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
	"github.com/sparklane/sparklane/workflows"
)

// keeperFleet is the demo fleet with a keeper that checks every second
// and allows two restarts an hour.
func keeperFleet(t *testing.T) (*fleet, *dockerclient.Client) {
	return demoFleet(t, 8<<20, func(o *fleetOptions) {
		o.extra += "keep = { interval = \"1s\", restarts = 2, window = \"1h\" }\n"
		o.metrics = true
	})
}

// keeperStatus asks cluster's keeper how it is (ok false: no keeper runs).
func keeperStatus(t *testing.T, f *fleet, cluster string) (contract.KeeperStatus, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var st contract.KeeperStatus
	v, err := f.env.Client.QueryWorkflow(ctx, workflows.KeeperID(cluster), "", contract.KeeperStatusQuery)
	if err != nil || v.Get(&st) != nil {
		return st, false
	}
	return st, true
}

// waitKeeper polls the keeper's status until ok says so, or fails the
// test after within, printing the last status.
func waitKeeper(t *testing.T, f *fleet, cluster string, within time.Duration, what string, ok func(contract.KeeperStatus) bool) contract.KeeperStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	var st contract.KeeperStatus
	for time.Now().Before(deadline) {
		var running bool
		if st, running = keeperStatus(t, f, cluster); running && ok(st) {
			return st
		}
		time.Sleep(200 * time.Millisecond) // polling a condition, not timing
	}
	t.Fatalf("keeper/%s: not %s within %s; last status %+v", cluster, what, within, st)
	return st
}

// keeperEvents lists the keeper run's activities in history order:
// "Name" when scheduled, "re-probe Name" for a retried attempt.
func keeperEvents(t *testing.T, f *fleet, cluster string) []string {
	t.Helper()
	it := f.env.Client.GetWorkflowHistory(context.Background(), workflows.KeeperID(cluster), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	names := map[int64]string{}
	var out []string
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			names[e.GetEventId()] = a.GetActivityType().GetName()
			out = append(out, a.GetActivityType().GetName())
		}
		if a := e.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
			out = append(out, "child "+a.GetWorkflowType().GetName())
		}
		if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil {
			out = append(out, "signal "+a.GetSignalName())
		}
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil && a.GetAttempt() > 1 {
			out = append(out, "re-probe "+names[a.GetScheduledEventId()])
		}
	}
	return out
}

// headBack polls url (every 50 ms: a condition, not timing) until it has
// failed and then answered 200 again, and returns how long after from.
func headBack(t *testing.T, url string, from time.Time, within time.Duration) time.Duration {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	down := false
	for time.Since(from) < within {
		resp, err := c.Get(url)
		ok := err == nil && resp.StatusCode == 200
		if err == nil {
			resp.Body.Close()
		}
		if ok && down {
			return time.Since(from)
		}
		down = down || !ok
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not go down and answer again within %s", url, within)
	return 0
}

// keeperTimeline lists the keeper's activities (and children) that
// started after from, with their start and close times in seconds after it.
func keeperTimeline(t *testing.T, f *fleet, cluster string, from time.Time) string {
	t.Helper()
	it := f.env.Client.GetWorkflowHistory(context.Background(), workflows.KeeperID(cluster), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	names := map[int64]string{}
	var b strings.Builder
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		at := e.GetEventTime().AsTime().Sub(from).Seconds()
		if at < -1 {
			continue
		}
		switch {
		case e.GetActivityTaskScheduledEventAttributes() != nil:
			names[e.GetEventId()] = e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
			fmt.Fprintf(&b, "%6.2f schedule %s\n", at, names[e.GetEventId()])
		case e.GetActivityTaskStartedEventAttributes() != nil && e.GetActivityTaskStartedEventAttributes().GetAttempt() > 1:
			fmt.Fprintf(&b, "%6.2f re-probe %s\n", at, names[e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()])
		case e.GetActivityTaskCompletedEventAttributes() != nil:
			fmt.Fprintf(&b, "%6.2f done     %s\n", at, names[e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()])
		case e.GetActivityTaskFailedEventAttributes() != nil:
			fmt.Fprintf(&b, "%6.2f failed   %s\n", at, names[e.GetActivityTaskFailedEventAttributes().GetScheduledEventId()])
		case e.GetStartChildWorkflowExecutionInitiatedEventAttributes() != nil:
			fmt.Fprintf(&b, "%6.2f child    %s\n", at, e.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowType().GetName())
		case e.GetWorkflowExecutionSignaledEventAttributes() != nil:
			fmt.Fprintf(&b, "%6.2f signal   %s\n", at, e.GetWorkflowExecutionSignaledEventAttributes().GetSignalName())
		case e.GetTimerStartedEventAttributes() != nil:
			fmt.Fprintf(&b, "%6.2f timer    %s\n", at, e.GetTimerStartedEventAttributes().GetStartToFireTimeout().AsDuration())
		}
	}
	return b.String()
}

// inOrder reports whether want appear in events in that order.
func inOrder(events, want []string) bool {
	i := 0
	for _, e := range events {
		if i < len(want) && e == want[i] {
			i++
		}
	}
	return i == len(want)
}

// The keeper on real containers: a rank killed with `docker kill` is
// noticed (its node worker's rank-died signal; Docker's word is not
// re-probed) and the lane restarted whole, answering again; status
// shows the keeper; stop while kept ends the keeper and leaves nothing.
func TestKeeperRestartsAKilledRank(t *testing.T) {
	f, dc := keeperFleet(t)
	code, res, errOut := cutover(t, f, "--lane", "demo-2x")
	if code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d, %+v\n%s", code, res, errOut)
	}
	cold := res.Serve.Ready.Seconds
	saveHistory(t, f, contract.CutoverID("demo-2x"), "cutover-starts-keeper")
	waitKeeper(t, f, "demo-2x", time.Minute, "watching a healthy lane", func(s contract.KeeperStatus) bool {
		return s.Lane == "demo-2x" && s.State == contract.KeeperWatching && s.Health == "up"
	})

	ctx := withTimeout(t, 5*time.Minute)
	killed := res.Serve.Ranks[1].Name
	killedAt := time.Now()
	if err := dc.ContainerKill(ctx, killed, "KILL"); err != nil {
		t.Fatalf("docker kill %s: %v", killed, err)
	}
	answering := headBack(t, res.Serve.BaseURL+"/v1/models", killedAt, 2*time.Minute)
	st := waitKeeper(t, f, "demo-2x", 3*time.Minute, "restarted", func(s contract.KeeperStatus) bool {
		return len(s.Restarts) == 1 && s.Restarts[0].OK && s.State == contract.KeeperWatching
	})
	back := time.Since(killedAt)
	t.Logf("docker kill → head answering /v1/models again: %.2fs; goal 1.2 × cold ready %.2fs + interval 1s = %.2fs", answering.Seconds(), cold, 1.2*cold+1)
	resp, err := http.Get(res.Serve.BaseURL + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("lane after the keeper's restart: %v %v", resp, err)
	}
	resp.Body.Close()
	t.Logf("docker kill of %s → keeper's restart done (probed) in %.1fs (cold ready %.1fs, interval 1s); reason: %s", killed, back.Seconds(), cold, st.Restarts[0].Reason)
	t.Logf("where the time went (s after the kill):\n%s", keeperTimeline(t, f, "demo-2x", killedAt))
	if !strings.Contains(st.Restarts[0].Reason, "demo-2x") {
		t.Errorf("restart reason %q does not name the lane", st.Restarts[0].Reason)
	}
	events := keeperEvents(t, f, "demo-2x")
	// The node worker saw the container die (Docker's event) and told
	// the keeper, which checked at once.
	if !inOrder(events, []string{"signal " + contract.KeeperRankDiedSignal, "CheckRanks", "StopLane"}) {
		t.Errorf("keeper history has no rank-died signal before the check that restarted:\n%s", strings.Join(events, "\n"))
	}
	// Docker reported the death: the check the signal woke asks each
	// node once (versionKeeperSignalNoReprobe) and restarts at once.
	if !inOrder(events, []string{"signal " + contract.KeeperRankDiedSignal, "CheckRanks", "KeeperMark", "StopLane", "StartRank", "WaitReady", "DecodeProbe", "KeeperMark"}) ||
		inOrder(events, []string{"signal " + contract.KeeperRankDiedSignal, "re-probe CheckRanks", "StopLane"}) {
		t.Errorf("keeper history does not read signal → check (no re-probe) → restart → ready:\n%s", strings.Join(events, "\n"))
	}

	// The control service's metrics count the restart; the lane is up.
	mresp, err := http.Get("http://" + f.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{`sparklane_keeper_restarts_total{cluster="demo-2x",lane="demo-2x"} 1`, `sparklane_lane_up{cluster="demo-2x",lane="demo-2x"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// status shows the kept lane.
	code, out, errOut := f.starter(ctx, "status", "--json")
	var sj struct {
		Keepers []contract.KeeperStatus `json:"keepers"`
	}
	if err := json.Unmarshal([]byte(out), &sj); err != nil || len(sj.Keepers) != 1 || sj.Keepers[0].Lane != "demo-2x" || sj.Keepers[0].Restarts24h != 1 {
		t.Errorf("status --json: exit %d keepers %+v (%v)\n%s", code, sj.Keepers, err, errOut)
	}
	code, out, _ = f.starter(ctx, "status")
	if !strings.Contains(out, "KEPT LANE") || !strings.Contains(out, "demo-2x") {
		t.Errorf("status text has no keeper row (exit %d):\n%s", code, out)
	}

	// keep off / on.
	if code, out, errOut := f.starter(ctx, "keep", "--cluster", "demo-2x", "off"); code != 0 || !strings.Contains(out, "paused") {
		t.Errorf("keep off: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := f.starter(ctx, "keep", "--cluster", "demo-2x", "on"); code != 0 || !strings.Contains(out, "watching") {
		t.Errorf("keep on: exit %d\n%s\n%s", code, out, errOut)
	}

	// stop while kept: the keeper ends first, nothing is left.
	if code, out, errOut := f.starter(ctx, "stop", "--lane", "demo-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
	var kr contract.KeeperResult
	if err := f.env.Client.GetWorkflow(ctx, workflows.KeeperID("demo-2x"), "").Get(ctx, &kr); err != nil || !strings.Contains(kr.Ended, "stopped by stop/demo-2x") {
		t.Errorf("keeper after stop: %+v %v; want ended by the stop", kr, err)
	}
	if _, all := laneContainers(t, dc, "demo-2x"); all != 0 {
		t.Errorf("stop while kept left %d containers", all)
	}
	saveHistory(t, f, workflows.KeeperID("demo-2x"), "keeper-restart-stopped")
	saveHistory(t, f, workflows.KeeperID("demo-2x"), "keeper-rank-died-restart")
	saveHistory(t, f, contract.StopID("demo-2x"), "stop-ends-keeper")
}

// A lane whose restarts keep failing (a node's staged tree is gone, so the
// engine cannot load) is stopped after the budget, and status says why.
func TestKeeperStopsACrashLoop(t *testing.T) {
	f, dc := keeperFleet(t)
	code, res, errOut := cutover(t, f, "--lane", "demo-2x")
	if code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d, %+v\n%s", code, res, errOut)
	}
	waitKeeper(t, f, "demo-2x", time.Minute, "watching", func(s contract.KeeperStatus) bool { return s.Health == "up" })
	// The rank's staged weights vanish on n2; then the rank dies.
	r, _ := f.lanePlan("demo-2x")
	var n2 string
	for _, n := range f.cfg.Nodes {
		if n.Name == "n2" {
			n2 = n.LocalPath(r.Staging[0].Dst, f.cfg.SharedRoots)
		}
	}
	if err := os.Rename(n2, n2+".gone"); err != nil {
		t.Fatal(err)
	}
	ctx := withTimeout(t, 5*time.Minute)
	if err := dc.ContainerKill(ctx, res.Serve.Ranks[1].Name, "KILL"); err != nil {
		t.Fatal(err)
	}
	st := waitKeeper(t, f, "demo-2x", 4*time.Minute, "stopped as a crash loop", func(s contract.KeeperStatus) bool {
		return s.State == contract.KeeperCrashLoop
	})
	if len(st.Restarts) != 2 || !strings.Contains(st.LastReason, "stopped: crash loop: 2 restarts within 1h") {
		t.Errorf("crash loop status %+v, want 2 failed restarts and the reason", st)
	}
	if _, all := laneContainers(t, dc, "demo-2x"); all != 0 {
		t.Errorf("crash loop left %d containers", all)
	}
	code, out, _ := f.starter(ctx, "status")
	if !strings.Contains(out, "crash loop") {
		t.Errorf("status does not say crash loop (exit %d):\n%s", code, out)
	}
	// Stopped, the keeper waits for an operator (no timer, no check): its
	// last activities are the crash loop's stop and its notice.
	// (The stop's own containers dying still signal rank-died; a stopped
	// keeper files them and does nothing.)
	var events []string
	for _, e := range keeperEvents(t, f, "demo-2x") {
		if !strings.HasPrefix(e, "signal ") {
			events = append(events, e)
		}
	}
	if last := strings.Join(events[len(events)-2:], ", "); last != "StopLane, KeeperNotify" {
		t.Errorf("keeper's last activities %q, want the crash loop's StopLane and KeeperNotify:\n%s", last, strings.Join(events, "\n"))
	}
	saveHistory(t, f, workflows.KeeperID("demo-2x"), "keeper-crash-loop")
	if code, out, errOut := f.starter(ctx, "stop", "--lane", "demo-2x"); code != 0 {
		t.Errorf("stop after the crash loop: exit %d\n%s\n%s", code, out, errOut)
	}
}

// A cutover to another lane on overlapping nodes hands over: the old
// keeper ends saying to whom, the new cluster's keeper starts, and only
// one keeper is running. A cutover that rolls back keeps the old lane
// kept.
func TestKeeperHandsOverOnCutover(t *testing.T) {
	f, dc := keeperFleet(t)
	if code, res, errOut := cutover(t, f, "--lane", "demo-2x"); code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d, %+v\n%s", code, res, errOut)
	}
	waitKeeper(t, f, "demo-2x", time.Minute, "watching", func(s contract.KeeperStatus) bool { return s.Health == "up" })
	// A cutover that fails (nothing staged for demo-4x, verify fails) rolls
	// back: demo-2x serves again and its keeper keeps it again.
	if code, res, _ := cutover(t, f, "--lane", "demo-4x", "--stage=skip", "--stage-ahead=never"); code != 2 || len(res.RolledBack) != 1 {
		t.Fatalf("cutover demo-4x --stage=skip: exit %d, rolled back %v; want a failure rolled back to demo-2x", code, res.RolledBack)
	}
	waitKeeper(t, f, "demo-2x", time.Minute, "keeping demo-2x again after the rollback", func(s contract.KeeperStatus) bool {
		return s.Lane == "demo-2x" && s.Health == "up" && s.StartedBy == "cutover/demo-4x (rollback)"
	})
	if code, res, errOut := cutover(t, f, "--lane", "demo-4x"); code != 0 || !res.OK {
		t.Fatalf("cutover demo-4x: exit %d, %+v\n%s", code, res, errOut)
	}
	ctx := withTimeout(t, 5*time.Minute)
	var old contract.KeeperResult
	if err := f.env.Client.GetWorkflow(ctx, workflows.KeeperID("demo-2x"), "").Get(ctx, &old); err != nil || !strings.Contains(old.Ended, "handed over to cutover/demo-4x") {
		t.Errorf("old keeper: %+v %v; want ended, handed over to cutover/demo-4x", old, err)
	}
	waitKeeper(t, f, "demo-4x", time.Minute, "watching demo-4x", func(s contract.KeeperStatus) bool {
		return s.Lane == "demo-4x" && s.Health == "up"
	})
	list, err := f.env.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowType = 'Keeper' AND ExecutionStatus = 'Running'"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetExecutions()); n != 1 || list.GetExecutions()[0].GetExecution().GetWorkflowId() != workflows.KeeperID("demo-4x") {
		t.Errorf("%d keepers running, want only keeper/demo-4x: %v", n, list.GetExecutions())
	}
	if code, out, errOut := f.starter(ctx, "stop", "--cluster", "demo-4x"); code != 0 {
		t.Fatalf("stop --cluster: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, running := keeperStatus(t, f, "demo-4x"); running {
		if st, _ := keeperStatus(t, f, "demo-4x"); st.State != contract.KeeperEnded {
			t.Errorf("keeper/demo-4x after stop --cluster: %+v", st)
		}
	}
	if _, all := laneContainers(t, dc, "demo-4x"); all != 0 {
		t.Errorf("stop left %d containers", all)
	}
}

// A stop while the keeper heals wins: the lane loads slowly (0.5 MiB/s),
// a rank is killed, and while the keeper's restart waits for the lane to
// be ready `starter stop` ends the keeper (its wait cut short), then stops
// the lane: no container is left and the restart says it was interrupted.
func TestKeeperStopWinsWhileHealing(t *testing.T) {
	f, dc := keeperFleet(t)
	code, res, errOut := cutover(t, f, "--lane", "demo-2x", "-o", "extra_args=--load-mibps=0.5")
	if code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d, %+v\n%s", code, res, errOut)
	}
	waitKeeper(t, f, "demo-2x", time.Minute, "watching", func(s contract.KeeperStatus) bool { return s.Health == "up" })
	ctx := withTimeout(t, 5*time.Minute)
	if err := dc.ContainerKill(ctx, res.Serve.Ranks[1].Name, "KILL"); err != nil {
		t.Fatal(err)
	}
	// Until the restart waits for the lane to be ready.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := f.env.Client.QueryWorkflow(ctx, workflows.KeeperID("demo-2x"), "", contract.ProgressQuery)
		var p contract.Progress
		if err == nil && v.Get(&p) == nil && len(p.Steps) > 0 {
			last := p.Steps[len(p.Steps)-1]
			if last.Name == "wait ready" && last.Status == contract.StepRunning {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the keeper's restart never reached wait ready; last progress %+v", p)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition, not timing
	}
	if code, out, errOut := f.starter(ctx, "stop", "--lane", "demo-2x"); code != 0 {
		t.Fatalf("stop while healing: exit %d\n%s\n%s", code, out, errOut)
	}
	var kr contract.KeeperResult
	if err := f.env.Client.GetWorkflow(ctx, workflows.KeeperID("demo-2x"), "").Get(ctx, &kr); err != nil || !strings.Contains(kr.Ended, "stopped by stop/demo-2x") {
		t.Errorf("keeper after stop: %+v %v; want ended by the stop", kr, err)
	}
	st, _ := keeperStatus(t, f, "demo-2x")
	if len(st.Restarts) != 1 || st.Restarts[0].OK || !strings.Contains(st.Restarts[0].Error, "interrupted: stopped by stop/demo-2x") {
		t.Errorf("restarts %+v, want the one restart interrupted by the stop", st.Restarts)
	}
	if _, all := laneContainers(t, dc, "demo-2x"); all != 0 {
		t.Errorf("stop while healing left %d containers", all)
	}
	saveHistory(t, f, workflows.KeeperID("demo-2x"), "keeper-stopped-while-healing")
}

// cpuSeconds is this process's CPU time so far (the embedded server, the
// control and node workers and the test: the control service's share).
func cpuSeconds(t *testing.T) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// The keeper's own cost: the process's CPU per check of a 2-rank lane
// (server, workers, Docker inspect, HTTP), less the same time paused,
// and what that makes for 8 clusters kept at a 30 s interval.
func TestKeeperCheckCost(t *testing.T) {
	f, _ := keeperFleet(t)
	if code, res, errOut := cutover(t, f, "--lane", "demo-2x"); code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d, %+v\n%s", code, res, errOut)
	}
	st := waitKeeper(t, f, "demo-2x", time.Minute, "watching", func(s contract.KeeperStatus) bool { return s.Health == "up" })
	// Measurement windows of the same length, nothing polled during them.
	const wall = 20 * time.Second
	from, c0 := st.Checks, cpuSeconds(t)
	time.Sleep(wall)
	active := cpuSeconds(t) - c0
	st, _ = keeperStatus(t, f, "demo-2x")
	checks := st.Checks - from
	if checks < 5 {
		t.Fatalf("only %d checks in %s at a 1 s interval", checks, wall)
	}
	ctx := withTimeout(t, 2*time.Minute)
	if code, out, errOut := f.starter(ctx, "keep", "--cluster", "demo-2x", "off"); code != 0 {
		t.Fatalf("keep off: exit %d\n%s\n%s", code, out, errOut)
	}
	c1 := cpuSeconds(t)
	time.Sleep(wall) // the same time paused: the baseline of everything else
	idle := cpuSeconds(t) - c1
	per := (active - idle) / float64(checks)
	t.Logf("%d checks in %.1fs: CPU %.3fs active, %.3fs paused over the same time; %.1f ms CPU per check; 8 clusters at 30 s: %.3f%% of one core",
		checks, wall.Seconds(), active, idle, per*1000, per*8/30*100)
	st, _ = keeperStatus(t, f, "demo-2x")
	events, size := historySize(t, f, workflows.KeeperID("demo-2x"))
	if st.Checks == 0 || events == 0 {
		t.Fatalf("keeper history: %d events after %d checks", events, st.Checks)
	}
	t.Logf("keeper history: %d events, %d bytes (JSON) after %d checks: %.1f events, %.0f bytes per check (the run's start included)",
		events, size, st.Checks, float64(events)/float64(st.Checks), float64(size)/float64(st.Checks))
	if code, out, errOut := f.starter(ctx, "stop", "--lane", "demo-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
	var kr contract.KeeperResult
	if err := f.env.Client.GetWorkflow(ctx, workflows.KeeperID("demo-2x"), "").Get(ctx, &kr); err != nil || kr.Ended == "" {
		t.Fatalf("keeper after stop: %+v %v; want ended", kr, err)
	}
	saveHistory(t, f, workflows.KeeperID("demo-2x"), "keeper-quiet-checks")
}

// keeperNodesFleet is the keeper fleet with a short node outage budget, a
// [keep] notify command appending each notice to a file, and the workers'
// boot id seam (testworker.BootIDs) reading each node's boot id from a
// directory, all "boot-1".
func keeperNodesFleet(t *testing.T, budget string, opts ...func(*fleetOptions)) (*fleet, *dockerclient.Client, string, string) {
	bootDir := t.TempDir()
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		writeBootID(t, bootDir, n, "boot-1")
	}
	notices := filepath.Join(t.TempDir(), "notices")
	notify := fmt.Sprintf(`printf '%%s|%%s|%%s\n' "$SPARKLANE_STATE" "$SPARKLANE_LANE" "$SPARKLANE_REASON" >> %s`, notices)
	f, dc := demoFleet(t, 8<<20, func(o *fleetOptions) {
		o.extra += fmt.Sprintf("node_outage_budget = %q\nkeep = { interval = \"1s\", restarts = 5, window = \"1h\", notify = %q }\n", budget, notify)
		o.metrics = true
		o.seams = &activities.Seams{BootID: testworker.BootIDs(bootDir)}
		for _, opt := range opts {
			opt(o)
		}
	})
	return f, dc, bootDir, notices
}

// writeBootID sets the boot id node reports (the boot id seam's file).
func writeBootID(t *testing.T, dir, node, id string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, node), []byte(id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// metric reads one line of the workers' /metrics.
func metricLine(t *testing.T, f *fleet, prefix string) string {
	t.Helper()
	resp, err := http.Get("http://" + f.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// verifyRuns lists the keeper's verify-only children (Verify runs), closed.
func verifyRuns(ctx context.Context, t *testing.T, f *fleet) []contract.VerifyWorkflowResult {
	t.Helper()
	list, err := f.env.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowType = 'Verify'"})
	if err != nil {
		t.Fatal(err)
	}
	var out []contract.VerifyWorkflowResult
	for _, e := range list.GetExecutions() {
		var r contract.VerifyWorkflowResult
		if err := f.env.Client.GetWorkflow(ctx, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()).Get(ctx, &r); err != nil {
			t.Errorf("verify run %s: %v", e.GetExecution().GetWorkflowId(), err)
		}
		out = append(out, r)
	}
	return out
}

// A node reboots, then a node does not come back. The reboot is
// simulated, not a netns host's: n2's worker is stopped, its rank's
// container removed and its boot id changed through the boot id seam
// (the workers' boot id seam), then the worker starts again — what a
// reboot looks like to the keeper. The keeper waits for n2 within the
// outage budget, runs a verify-only pass of the lane's blocks on it
// (nothing re-copied), restarts the lane, and it answers. Then n2 stays
// gone past the budget: the keeper stops healing and says so (status,
// sparklane_lane_up 0, the [keep] notify command), keeps watching, and
// when n2 comes back brings the lane back the same way.
func TestKeeperWaitsForARebootedNode(t *testing.T) {
	f, dc, bootDir, notices := keeperNodesFleet(t, "20s")
	code, res, errOut := cutover(t, f, "--lane", "demo-2x")
	if code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d, %+v\n%s", code, res, errOut)
	}
	waitKeeper(t, f, "demo-2x", time.Minute, "watching, n2's boot id known", func(s contract.KeeperStatus) bool {
		return s.Health == "up" && s.Input != nil && s.Input.BootIDs["n2"] == "boot-1"
	})
	ctx := withTimeout(t, 8*time.Minute)
	reboot := func(boot string) {
		f.stopNode("n2")
		if err := dc.ContainerRemove(ctx, res.Serve.Ranks[1].Name, container.RemoveOptions{Force: true}); err != nil {
			t.Fatalf("remove n2's rank: %v", err)
		}
		writeBootID(t, bootDir, "n2", boot)
	}

	// The reboot: waited for, verified, restarted.
	reboot("boot-2")
	st := waitKeeper(t, f, "demo-2x", 2*time.Minute, "waiting for n2", func(s contract.KeeperStatus) bool {
		return s.State == contract.KeeperWaiting
	})
	t.Logf("while n2 is away: %s (%s)", st.State, st.LastReason)
	f.startNode("n2")
	st = waitKeeper(t, f, "demo-2x", 3*time.Minute, "restarted after the reboot", func(s contract.KeeperStatus) bool {
		return len(s.Restarts) == 1 && s.Restarts[0].OK && s.State == contract.KeeperWatching
	})
	if !strings.Contains(st.Restarts[0].Reason, "node n2 came back") {
		t.Errorf("restart reason %q does not say n2 came back", st.Restarts[0].Reason)
	}
	events := keeperEvents(t, f, "demo-2x")
	if !inOrder(events, []string{"NodeOff", "CheckRanks", "child Verify", "KeeperMark", "StopLane", "StartRank", "WaitReady", "DecodeProbe"}) {
		t.Errorf("keeper history does not read is-it-off → wait → verify → restart → ready:\n%s", strings.Join(events, "\n"))
	}
	vs := verifyRuns(ctx, t, f)
	if len(vs) != 1 || len(vs[0].Repaired) != 0 || len(vs[0].Blocks) == 0 || vs[0].Blocks[0].Node != "n2" || !vs[0].Blocks[0].Result.Clean() {
		t.Errorf("verify-only pass %+v: want n2's blocks clean, nothing re-copied", vs)
	}
	resp, err := http.Get(res.Serve.BaseURL + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("lane after the reboot: %v %v", resp, err)
	}
	resp.Body.Close()

	// Gone past the budget: healing stops, said everywhere.
	reboot("boot-3")
	st = waitKeeper(t, f, "demo-2x", 2*time.Minute, "stopped, n2 gone", func(s contract.KeeperStatus) bool {
		return s.State == contract.KeeperNodeLost
	})
	if !strings.Contains(st.LastReason, "past its outage budget of 20s") {
		t.Errorf("last reason %q does not name the budget", st.LastReason)
	}
	if l := metricLine(t, f, `sparklane_lane_up{cluster="demo-2x",lane="demo-2x"}`); !strings.HasSuffix(l, " 0") {
		t.Errorf("lane_up while n2 is gone: %q, want 0", l)
	}
	b, err := os.ReadFile(notices)
	if err != nil || !strings.Contains(string(b), "stopped: node gone|demo-2x|stopped healing: node n2 was gone for") {
		t.Errorf("notify command's notices %q (%v)", b, err)
	}
	code, out, _ := f.starter(ctx, "status")
	if !strings.Contains(out, "node gone") {
		t.Errorf("status does not say the node is gone (exit %d):\n%s", code, out)
	}
	// Still watching: n2 back, the lane back.
	f.startNode("n2")
	waitKeeper(t, f, "demo-2x", 3*time.Minute, "restarted after n2 came back", func(s contract.KeeperStatus) bool {
		return len(s.Restarts) == 2 && s.Restarts[1].OK && s.State == contract.KeeperWatching && s.Health == "up"
	})
	if n := len(verifyRuns(ctx, t, f)); n != 2 {
		t.Errorf("%d verify-only passes, want 2 (one per return)", n)
	}
	saveHistory(t, f, workflows.KeeperID("demo-2x"), "keeper-node-reboot-lost")
	if code, out, errOut := f.starter(ctx, "stop", "--lane", "demo-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
}

// Nights off, with the Home Assistant test double for n2's outlet relay
// and real containers. The lane comes up by `up` (after a stage), which
// starts its keeper. `power off n2` switches the relay off; the power cut
// itself is simulated (the double cannot cut power to a worker in this
// process): n2's worker stops, its rank's container goes and its boot id
// changes (test hook). The keeper idles "off by schedule" — no healing,
// sparklane_lane_up 0 — until `power on --cluster` switches the relay on
// and finds n2's worker polling again; then it brings the lane back by
// itself: verify-only on n2, restart, probe.
func TestKeeperIdlesOffBySchedule(t *testing.T) {
	const token, tokenEnv = "ha-keeper-token-41d2", "SPARKLANE_ITEST_HA_KEEP_TOKEN"
	t.Setenv(tokenEnv, token)
	ha := hatest.Start(t, token) // test double of Home Assistant's REST API
	ha.AddSwitch("switch.n2_outlet", "on")
	n2 := fmt.Sprintf("[nodes.power]\nrelay = \"switch.n2_outlet\"\nha_url = %q\ntoken_env = %q\n", ha.URL, tokenEnv)
	f, dc, bootDir, _ := keeperNodesFleet(t, "10m", func(o *fleetOptions) { o.nodeExtra = map[string]string{"n2": n2} })
	ctx := withTimeout(t, 8*time.Minute)
	for _, args := range [][]string{{"stage", "--lane", "demo-2x"}, {"up", "--lane", "demo-2x"}} {
		if code, out, errOut := f.starter(ctx, args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
	}
	st := waitKeeper(t, f, "demo-2x", time.Minute, "keeping the lane up started", func(s contract.KeeperStatus) bool {
		return s.Health == "up" && s.Input != nil && s.Input.BootIDs["n2"] == "boot-1"
	})
	if st.StartedBy != contract.UpID("demo-2x") {
		t.Errorf("keeper started by %q, want %s", st.StartedBy, contract.UpID("demo-2x"))
	}
	_, rank1 := rankNames(t, dc, "demo-2x")

	if code, out, errOut := f.starter(ctx, "power", "off", "n2", "--force", "--wait", "2s"); code != 0 {
		t.Fatalf("power off n2: exit %d\n%s\n%s", code, out, errOut)
	}
	f.stopNode("n2")
	if err := dc.ContainerRemove(ctx, rank1, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	writeBootID(t, bootDir, "n2", "boot-2")
	st = waitKeeper(t, f, "demo-2x", 2*time.Minute, "off by schedule", func(s contract.KeeperStatus) bool {
		return s.State == contract.KeeperOff
	})
	if !strings.Contains(st.LastReason, "relay switch.n2_outlet is off") {
		t.Errorf("off reason %q does not name the relay", st.LastReason)
	}
	// Idle over several checks: no restart, the lane reported down.
	from := st.Checks
	st = waitKeeper(t, f, "demo-2x", time.Minute, "idle for three checks", func(s contract.KeeperStatus) bool { return s.Checks >= from+3 })
	if st.State != contract.KeeperOff || len(st.Restarts) != 0 {
		t.Errorf("while off: %s, %d restarts; want off by schedule, none", st.State, len(st.Restarts))
	}
	if l := metricLine(t, f, `sparklane_lane_up{cluster="demo-2x",lane="demo-2x"}`); !strings.HasSuffix(l, " 0") {
		t.Errorf("lane_up while off: %q, want 0", l)
	}

	// The morning: n2 boots (its worker polls) as its relay goes on.
	f.startNode("n2")
	if code, out, errOut := f.starter(ctx, "power", "on", "--cluster", "demo-2x", "--wait", "1m"); code != 0 {
		t.Fatalf("power on --cluster: exit %d\n%s\n%s", code, out, errOut)
	}
	st = waitKeeper(t, f, "demo-2x", 3*time.Minute, "back after power on", func(s contract.KeeperStatus) bool {
		return len(s.Restarts) == 1 && s.Restarts[0].OK && s.State == contract.KeeperWatching && s.Health == "up"
	})
	events := keeperEvents(t, f, "demo-2x")
	if !inOrder(events, []string{"NodeOff", "NodeOff", "child Verify", "StopLane", "StartRank", "WaitReady", "DecodeProbe"}) {
		t.Errorf("keeper history does not read off → verify → restart → probe:\n%s", strings.Join(events, "\n"))
	}
	if vs := verifyRuns(ctx, t, f); len(vs) != 1 || len(vs[0].Repaired) != 0 || len(vs[0].Blocks) == 0 || vs[0].Blocks[0].Node != "n2" {
		t.Errorf("verify-only pass %+v: want n2's blocks, nothing re-copied", vs)
	}
	t.Logf("after power on: %s", st.LastReason)
	saveHistory(t, f, workflows.KeeperID("demo-2x"), "keeper-off-by-schedule")
	saveHistory(t, f, contract.UpID("demo-2x"), "up-starts-keeper")
	if code, out, errOut := f.starter(ctx, "stop", "--lane", "demo-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, all := laneContainers(t, dc, "demo-2x"); all != 0 {
		t.Errorf("stop left %d containers", all)
	}
}

// rankNames are the names of lane's rank 0 and rank 1 containers.
func rankNames(t *testing.T, dc *dockerclient.Client, lane string) (string, string) {
	t.Helper()
	cs, err := dc.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "sparklane.lane="+lane))})
	if err != nil {
		t.Fatal(err)
	}
	var r0, r1 string
	for _, c := range cs {
		switch c.Labels["sparklane.rank"] {
		case "0":
			r0 = strings.TrimPrefix(c.Names[0], "/")
		case "1":
			r1 = strings.TrimPrefix(c.Names[0], "/")
		}
	}
	if r0 == "" || r1 == "" {
		t.Fatalf("lane %s: ranks 0 and 1 not found among %d containers", lane, len(cs))
	}
	return r0, r1
}
