package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/workflows"
)

// setProbeGrace rewrites the fleet config's probe_grace (newFleet writes
// 1 s) to grace, as `starter init` writes it: the starter reads the file
// at each command, and a run carries the grace in its input.
func setProbeGrace(t *testing.T, f *fleet, grace string) {
	t.Helper()
	b, err := os.ReadFile(f.cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "probe_grace = \"1s\"", "probe_grace = \""+grace+"\"", 1)
	if s == string(b) {
		t.Fatalf("%s has no probe_grace = \"1s\" to replace", f.cfgFile)
	}
	if err := os.WriteFile(f.cfgFile, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	f.reload()
}

// statusKeeper runs `starter status --json` and returns cluster's keeper
// row (ok false: none).
func statusKeeper(ctx context.Context, t *testing.T, f *fleet, cluster string) (contract.KeeperStatus, bool) {
	t.Helper()
	code, out, errOut := f.starter(ctx, "status", "--json")
	var sj struct {
		Keepers []contract.KeeperStatus `json:"keepers"`
	}
	if err := json.Unmarshal([]byte(out), &sj); err != nil {
		t.Fatalf("status --json: exit %d, not JSON (%v)\n%s\n%s", code, err, out, errOut)
	}
	for _, k := range sj.Keepers {
		if k.Cluster == cluster {
			return k, true
		}
	}
	return contract.KeeperStatus{}, false
}

// signaledCheck is what the keeper's history says about the check a
// rank-died signal woke: the signal, when its CheckRanks started (the
// first scheduled after the signal), and whether a rank check was
// re-probed before the lane was stopped for the restart.
type signaledCheck struct {
	signal    contract.KeeperRankDied
	signalAt  time.Time
	checkAt   time.Time
	reprobed  bool
	restarted bool
}

// checkAfterSignal reads the keeper's history for the first rank-died
// signal naming container recorded at from or later (a restart's stop
// makes the ranks die too, under the same names), and the check that
// followed it.
func checkAfterSignal(t *testing.T, f *fleet, cluster, container string, from time.Time) signaledCheck {
	t.Helper()
	it := f.env.Client.GetWorkflowHistory(context.Background(), workflows.KeeperID(cluster), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	var c signaledCheck
	found := false
	names := map[int64]string{}
	for _, e := range events {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			names[e.GetEventId()] = a.GetActivityType().GetName()
		}
		if !found {
			a := e.GetWorkflowExecutionSignaledEventAttributes()
			if a == nil || a.GetSignalName() != contract.KeeperRankDiedSignal {
				continue
			}
			var s contract.KeeperRankDied
			if err := converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &s); err != nil {
				t.Fatalf("rank-died signal payload: %v", err)
			}
			if s.Container == container && !e.GetEventTime().AsTime().Before(from) {
				c.signal, c.signalAt, found = s, e.GetEventTime().AsTime(), true
			}
			continue
		}
		a := e.GetActivityTaskStartedEventAttributes()
		if a == nil {
			continue
		}
		switch name := names[a.GetScheduledEventId()]; {
		case name == "CheckRanks" && a.GetAttempt() > 1:
			c.reprobed = true
		case name == "CheckRanks" && c.checkAt.IsZero():
			c.checkAt = e.GetEventTime().AsTime()
		case name == "StopLane":
			c.restarted = true
		}
		if c.restarted {
			break
		}
	}
	if !found {
		t.Fatalf("keeper/%s history has no rank-died signal for %s:\n%s", cluster, container, strings.Join(keeperEvents(t, f, cluster), "\n"))
	}
	return c
}

// eventTypes lists every event of cluster's keeper from from on, with its
// time in seconds after from: what the timeline leaves out (workflow
// tasks, markers) when a check is late.
func eventTypes(t *testing.T, f *fleet, cluster string, from time.Time) string {
	t.Helper()
	it := f.env.Client.GetWorkflowHistory(context.Background(), workflows.KeeperID(cluster), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var b strings.Builder
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if at := e.GetEventTime().AsTime().Sub(from).Seconds(); at >= -1 {
			fmt.Fprintf(&b, "%6.2f %3d %s\n", at, e.GetEventId(), e.GetEventType())
		}
	}
	return b.String()
}

// Issue 52 item 6, issue 55 item 9, on local nodes (empty ssh: workers in
// this process, one Docker engine) with the default keep interval (30 s)
// and init's probe grace (5 s). A rank killed while another node's worker
// is away: its node worker's rank-died signal wakes the keeper, whose
// check waits for the away node, and `starter status` says "checking
// (last -)" meanwhile — not "unknown, -, 0" as if nothing happened. Then,
// with every worker up, a `docker kill` of a rank: the signal reaches the
// keeper, the check it woke starts within a second of it (history
// timestamps) and re-probes nothing (versionKeeperSignalNoReprobe), and
// status shows the heal within 10 s of the kill.
func TestKeeperSignaledCheckOnLocalNodes(t *testing.T) {
	f, dc := demoFleet(t, 8<<20)
	setProbeGrace(t, f, "5s")
	code, res, errOut := cutover(t, f, "--lane", "demo-2x")
	if code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d, %+v\n%s", code, res, errOut)
	}
	st := waitKeeper(t, f, "demo-2x", time.Minute, "watching", func(s contract.KeeperStatus) bool {
		return s.Lane == "demo-2x" && s.State == contract.KeeperWatching
	})
	if st.Input == nil || st.Input.Policy.Interval.D() > 0 && st.Input.Policy.Interval.D() != workflows.KeepDefaultInterval || st.Input.Policy.Grace.D() != 5*time.Second {
		t.Fatalf("keeper input %+v: want the default interval and a 5 s grace", st.Input)
	}
	ctx := withTimeout(t, 8*time.Minute)
	r0, r1 := rankNames(t, dc, "demo-2x")

	// A check under way shows in status: n2's worker is away, so the check
	// n1's rank-died signal woke cannot finish until it is back.
	f.stopNode("n2")
	killedAt := time.Now()
	if err := dc.ContainerKill(ctx, r0, "KILL"); err != nil {
		t.Fatalf("docker kill %s: %v", r0, err)
	}
	waitKeeper(t, f, "demo-2x", time.Minute, "checking", func(s contract.KeeperStatus) bool { return s.Checking })
	_, out, _ := f.starter(ctx, "status")
	t.Logf("starter status during the check:\n%s", out)
	if !strings.Contains(out, "checking (last -)") {
		t.Errorf("status while a check waits for n2 does not say \"checking (last -)\":\n%s", out)
	}
	f.startNode("n2")
	waitKeeper(t, f, "demo-2x", 3*time.Minute, "restarted after rank 0", func(s contract.KeeperStatus) bool {
		return len(s.Restarts) == 1 && s.Restarts[0].OK && s.State == contract.KeeperWatching
	})
	c := checkAfterSignal(t, f, "demo-2x", r0, killedAt)
	if c.signal.Node != "n1" || c.signal.Rank != 0 || !c.restarted {
		t.Errorf("the check after n1's rank-died signal %+v: want rank 0 on n1, and a restart", c)
	}

	// With every worker up and the keeper idle (a check finished after
	// the restart: the one the restart's own stop signalled, or the
	// interval's): a docker kill, and status 10 s later.
	healed := time.Now()
	waitKeeper(t, f, "demo-2x", 2*workflows.KeepDefaultInterval, "checked after the restart", func(s contract.KeeperStatus) bool {
		return s.LastCheck.After(healed) && !s.Checking && s.State == contract.KeeperWatching && s.Health == "up"
	})
	_, r1 = rankNames(t, dc, "demo-2x")
	killedAt = time.Now()
	if err := dc.ContainerKill(ctx, r1, "KILL"); err != nil {
		t.Fatalf("docker kill %s: %v", r1, err)
	}
	var seen contract.KeeperStatus
	for time.Since(killedAt) < 10*time.Second {
		k, ok := statusKeeper(ctx, t, f, "demo-2x")
		if ok && (k.State == contract.KeeperHealing || k.Restarts24h == 2) {
			seen = k
			break
		}
		time.Sleep(200 * time.Millisecond) // polling a condition, not timing
	}
	if seen.Lane == "" {
		k, _ := statusKeeper(ctx, t, f, "demo-2x")
		t.Fatalf("status 10 s after docker kill %s shows no heal: %+v\n%s", r1, k, keeperTimeline(t, f, "demo-2x", killedAt))
	}
	t.Logf("status %.1f s after the kill: keeper %s, health %s, restarts %d, checking %v", time.Since(killedAt).Seconds(), seen.State, seen.Health, seen.Restarts24h, seen.Checking)
	st = waitKeeper(t, f, "demo-2x", 3*time.Minute, "restarted after rank 1", func(s contract.KeeperStatus) bool {
		return len(s.Restarts) == 2 && s.Restarts[1].OK && s.State == contract.KeeperWatching
	})
	t.Logf("where the time went (s after the kill):\n%s", keeperTimeline(t, f, "demo-2x", killedAt))
	c = checkAfterSignal(t, f, "demo-2x", r1, killedAt)
	lag := c.checkAt.Sub(c.signalAt)
	t.Logf("rank-died signal %+v at %s; its CheckRanks started %.3f s later; re-probed: %v", c.signal, c.signalAt.Format(time.StampMilli), lag.Seconds(), c.reprobed)
	if c.signal.Node != "n2" || c.signal.Rank != 1 || c.signal.Lane != "demo-2x" {
		t.Errorf("signal %+v: want rank 1 of demo-2x on n2", c.signal)
	}
	if c.checkAt.IsZero() || lag < 0 || lag > time.Second {
		t.Errorf("the check the signal woke started %v after it (at %v), want within 1 s; every event from the kill on:\n%s", lag, c.checkAt, eventTypes(t, f, "demo-2x", killedAt))
	}
	if c.reprobed || !c.restarted {
		t.Errorf("signaled check: re-probed %v, restarted %v; want no re-probe and a restart", c.reprobed, c.restarted)
	}
	if !strings.Contains(st.Restarts[1].Reason, "demo-2x") {
		t.Errorf("restart reason %q does not name the lane", st.Restarts[1].Reason)
	}

	if code, out, errOut := f.starter(ctx, "stop", "--lane", "demo-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
	var kr contract.KeeperResult
	if err := f.env.Client.GetWorkflow(ctx, workflows.KeeperID("demo-2x"), "").Get(ctx, &kr); err != nil || kr.Ended == "" {
		t.Fatalf("keeper after stop: %+v %v; want ended", kr, err)
	}
	saveHistory(t, f, workflows.KeeperID("demo-2x"), "keeper-signal-fast-restart")
}
