package itest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"
	"go.temporal.io/sdk/converter"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/hubcache"
	"github.com/sparklane/sparklane/internal/testkit/loopfs"
	"github.com/sparklane/sparklane/workflows"
)

// Stage ahead (issue 53), on one demo fleet shared by its cases: a real
// server and workers, engine-sim containers, a synthetic NAS. Lane
// demo-2x (context 16384) serves on n1, n2; the lanes that replace it
// serve on the same port with context 8192, so a client of that port
// sees which lane answered:
//   - ahead-2x stages 2 GiB (a NAS of its own) on each node;
//   - fail-2x stages the demo's NAS, one of whose blobs is removed while
//     it stages;
//   - room-a and room-b (on demo-4x, n1–n4) stage into n4's root, a
//     64 MiB filesystem on which room-b does not fit beside room-a.
type aheadFleet struct {
	f    *fleet
	dc   *dockerclient.Client
	hold *laneHold
	// port is the lanes' port on cluster demo-2x, port4 on demo-4x.
	port, port4 int
}

const (
	oldCtx = 16384 // the demo lanes' context length
	newCtx = 8192  // the lanes that replace them
)

func newAheadFleet(t *testing.T) *aheadFleet {
	t.Helper()
	hold := &laneHold{}
	f, dc := demoFleet(t, 24<<20, func(o *fleetOptions) { o.seams = &activities.Seams{StageHold: hold.hold} })
	// n4's root becomes a small real filesystem; its worker is started
	// again so it opens the new one. Before it is unmounted, the
	// containers that bind its paths go and its worker stops.
	f.stopNode("n4")
	loopfs.MountAt(t, 64, filepath.Join(f.dir, "nodes", "n4", "srv"))
	f.startNode("n4")
	t.Cleanup(func() {
		removeLaneContainers(dc, "ahead-2x", "fail-2x", "room-a", "room-b", "demo-4x", "demo-2x")
		f.stopNode("n4")
	})

	recipes := f.cfg.RecipesDir
	big, err := demo.GenerateNAS(filepath.Join(filepath.Dir(f.cfg.HFCacheDir), "big"), 2<<30)
	if err != nil {
		t.Fatal(err)
	}
	ctx := []string{"context_length = 16384", "context_length = 8192"}
	deriveRecipe(t, recipes, "demo-2x", "ahead-2x", append([]string{f.cfg.HFCacheDir, big.Hub}, ctx...)...)
	deriveRecipe(t, recipes, "demo-2x", "fail-2x", ctx...)
	noMinFree := []string{`min_free = "1G"`, ""}
	deriveRecipe(t, recipes, "demo-4x", "room-a", noMinFree...)
	deriveRecipe(t, recipes, "demo-4x", "room-b", append(noMinFree, ctx...)...)
	f.reload()
	return &aheadFleet{f: f, dc: dc, hold: hold, port: recipePort(t, filepath.Join(recipes, "demo-2x.toml")), port4: recipePort(t, filepath.Join(recipes, "demo-4x.toml"))}
}

// The stage-ahead order end to end, one fleet for its cases.
func TestCutoverStagesAheadWhileTheServingLaneAnswers(t *testing.T) {
	a := newAheadFleet(t)
	f := a.f
	code, res, errOut := cutover(t, f, "--lane", "demo-2x")
	if code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d, %+v\n%s", code, res, errOut)
	}
	t.Run("stage fails", a.stageFails)
	t.Run("ahead", a.ahead)
	t.Run("no room", a.noRoom)
}

// stageFails: B's stage fails (a source blob removed on the NAS while it
// stages): A never stopped and answered throughout, its keeper watches
// again, and the cutover failed at stage naming the reason.
func (a *aheadFleet) stageFails(t *testing.T) {
	f := a.f
	ctx := withTimeout(t, 10*time.Minute)
	client := startLaneClient(a.port, 3000)
	a.hold.arm("fail-2x", 1)
	run := goCutover(ctx, f, "--lane", "fail-2x")
	pendingStage(ctx, t, f.env.Client, contract.StageNodeID("fail-2x", "n1"), func(p contract.StageProgress) bool { return p.Paused })
	// The engram table of layer 3 leaves the NAS mid-stage (kept aside to
	// put back for the next case).
	link := filepath.Join(demo.RepoDir(f.cfg.HFCacheDir, demo.EngramRepo), hubcache.Snapshots, demo.Revision, "engram-l3.safetensors")
	blob, err := filepath.EvalSymlinks(link)
	if err != nil {
		t.Fatal(err)
	}
	aside := filepath.Join(filepath.Dir(f.cfg.HFCacheDir), "aside")
	if err := os.Rename(blob, aside); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.Rename(aside, blob); err != nil {
			t.Fatalf("put the removed blob back: %v", err)
		}
	}()
	a.hold.let()
	code, res := run.wait(t)
	seen := client.stop()
	if code == 0 || res.OK || res.FailedStep != "stage" || !strings.Contains(res.Error, "engram") {
		t.Fatalf("cutover with a source blob removed: exit %d, failed at %q: %s; want it failed at stage naming the missing source", code, res.FailedStep, res.Error)
	}
	t.Logf("failed at %s: %s", res.FailedStep, res.Error)
	id := contract.CutoverID("demo-2x")
	saveHistory(t, f, id, "cutover-stage-ahead-failed")
	if n := activitiesScheduled(t, f, id, "StopLane"); n != 0 || len(res.RolledBack) != 0 {
		t.Errorf("the failed cutover scheduled %d StopLane and rolled back %v: want demo-2x never stopped", n, res.RolledBack)
	}
	if _, running := fleetContainers(t, a.dc, "demo-2x"); running < 2 {
		t.Errorf("demo-2x runs %d containers after the failed stage, want 2", running)
	}
	v := viewOf(seen, time.Time{}, oldCtx, newCtx, time.Time{}, time.Now())
	if len(v.Failures) > 0 || len(seen) < 5 {
		t.Errorf("demo-2x failed %d of %d rounds during the failed cutover: %s", len(v.Failures), len(seen), describeFailures(v.Failures))
	}
	st := waitKeeperOn(ctx, t, f.env.Client, workflows.KeeperID("demo-2x"), "watching demo-2x again", func(s contract.KeeperStatus) bool {
		return s.Lane == "demo-2x" && s.State == contract.KeeperWatching && s.Health == "up"
	})
	t.Logf("keeper after the failed stage: %s, %s, %d checks", st.State, st.Health, st.Checks)
}

// ahead: B stages 2 GiB while A serves: A answers every round until its
// stop, which begins only after B's blocks verified; A's keeper is held
// (watching) during the stage; the switch window is under B's cold ready
// time + probe + 2 s.
func (a *aheadFleet) ahead(t *testing.T) {
	f := a.f
	ctx := withTimeout(t, 15*time.Minute)
	client := startLaneClient(a.port, 5000)
	a.hold.arm("ahead-2x", 256<<20)
	run := goCutover(ctx, f, "--lane", "ahead-2x")
	pendingStage(ctx, t, f.env.Client, contract.StageNodeID("ahead-2x", "n1"), func(p contract.StageProgress) bool { return p.Paused })
	st := waitKeeperOn(ctx, t, f.env.Client, workflows.KeeperID("demo-2x"), "held while ahead-2x stages", func(s contract.KeeperStatus) bool {
		return s.State == contract.KeeperHeld
	})
	if st.Lane != "demo-2x" {
		t.Errorf("the held keeper keeps %q, want demo-2x", st.Lane)
	}
	if ok := client.seen(); len(ok) == 0 || !ok[len(ok)-1].OK || ok[len(ok)-1].CtxLen != oldCtx {
		t.Errorf("demo-2x does not answer mid-stage: %+v", ok[len(ok)-1:])
	}
	a.hold.let()
	code, res := run.wait(t)
	seen := client.stop()
	if code != 0 || !res.OK || res.StageOrder != "ahead" {
		t.Fatalf("cutover ahead-2x: exit %d ok %v, order %q: %s (failed at %s)", code, res.OK, res.StageOrder, res.Error, res.FailedStep)
	}
	saveHistory(t, f, contract.CutoverID("demo-2x"), "cutover-stage-ahead")
	var copied int64
	for _, n := range res.Stage {
		for _, b := range n.Blocks {
			copied += b.Result.CopiedBytes
		}
	}
	if copied < 2*(2<<30) {
		t.Errorf("ahead-2x copied %d bytes on its two nodes, want 2 GiB each", copied)
	}
	stageFrom, _, _ := stepSpan(res, "stage")
	_, verified, okV := stepSpan(res, "verify")
	stop, _, okS := stepSpan(res, "stop demo-2x")
	if !okV || !okS || stop.Before(verified) {
		t.Fatalf("demo-2x stopped at %v, ahead-2x verified at %v (found %v %v): want the stop after the verify", stop, verified, okS, okV)
	}
	v := viewOf(seen, stop, oldCtx, newCtx, stageFrom, verified)
	if len(v.BeforeStop) > 0 {
		t.Errorf("demo-2x failed %d rounds before its stop: %s", len(v.BeforeStop), describeFailures(v.BeforeStop))
	}
	if len(v.During) < 5 {
		t.Errorf("demo-2x answered %d rounds during the %.1fs stage, want it answering throughout", len(v.During), verified.Sub(stageFrom).Seconds())
	}
	ready, probe := engineStart(t, res)
	bound := ready + probe + 2*time.Second
	t.Logf("stage %.1fs (demo-2x answered %d rounds, p50 %v p99 %v); switch window %.2fs; ahead-2x cold ready %v, probe %v; client downtime %v, %d failed rounds",
		res.StageSeconds, len(v.During), percentile(v.During, 50), percentile(v.During, 99), res.SwitchSeconds, ready, probe, v.Downtime, len(v.Failures))
	if sw := time.Duration(res.SwitchSeconds * float64(time.Second)); sw <= 0 || sw >= bound {
		t.Errorf("switch window %v, want above 0 and under ahead-2x's cold ready + probe + 2 s = %v", sw, bound)
	}
}

// noRoom: n4's small root has no room for room-b beside room-a: the dry
// run says "stage after stop" naming n4 and the bytes; --stage-ahead=always
// refuses before stopping anything; the default falls back and completes
// (--make-room prunes room-a's blocks once it no longer runs).
func (a *aheadFleet) noRoom(t *testing.T) {
	f := a.f
	ctx := withTimeout(t, 10*time.Minute)
	code, res, errOut := cutover(t, f, "--lane", "room-a")
	if code != 0 || !res.OK {
		t.Fatalf("cutover room-a: exit %d, %+v\n%s", code, res, errOut)
	}
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "room-b", "--dry-run", "--json")
	var d cli.DryRun
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("cutover --dry-run: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, n := range d.Nodes {
		want := "stage ahead (room: "
		if n.Node == "n4" {
			want = "stage after stop (n4: "
		}
		if !strings.HasPrefix(n.StageOrder, want) {
			t.Errorf("dry run on %s: %q, want %q…", n.Node, n.StageOrder, want)
		}
		if n.Node == "n4" && (!strings.Contains(n.StageOrder, "MiB more than it has") || !strings.Contains(n.StageOrder, "beside lane room-a")) {
			t.Errorf("dry run on n4: %q, want the bytes short and the lane beside", n.StageOrder)
		}
	}

	client := startLaneClient(a.port4, 3000)
	code, res, errOut = cutover(t, f, "--lane", "room-b", "--stage-ahead=always", "--make-room")
	seen := client.stop()
	if code == 0 || res.FailedStep != "stage order" || !strings.Contains(res.Error, "n4") || !strings.Contains(res.Error, "nothing was stopped") {
		t.Fatalf("--stage-ahead=always without room on n4: exit %d, failed at %q: %s\n%s", code, res.FailedStep, res.Error, errOut)
	}
	if n := activitiesScheduled(t, f, contract.CutoverID("demo-4x"), "StopLane"); n != 0 {
		t.Errorf("--stage-ahead=always scheduled %d StopLane before refusing", n)
	}
	if v := viewOf(seen, time.Time{}, oldCtx, newCtx, time.Time{}, time.Now()); len(v.Failures) > 0 || len(seen) == 0 {
		t.Errorf("room-a failed %d of %d rounds during the refused cutover: %s", len(v.Failures), len(seen), describeFailures(v.Failures))
	}

	code, res, errOut = cutover(t, f, "--lane", "room-b", "--make-room")
	if code != 0 || !res.OK || !strings.HasPrefix(res.StageOrder, "after stop: n4: ") || !strings.Contains(res.StageOrder, "beside lane room-a") {
		t.Fatalf("cutover room-b without room on n4: exit %d ok %v, order %q: %s\n%s", code, res.OK, res.StageOrder, res.Error, errOut)
	}
	id := contract.CutoverID("demo-4x")
	saveHistory(t, f, id, "cutover-stage-after-stop")
	_, staged, _ := stepSpan(res, "stage")
	stop, _, _ := stepSpan(res, "stop room-a")
	if !stop.Before(staged) {
		t.Errorf("room-a stopped at %v, room-b staged at %v: want the stage after the stop", stop, staged)
	}
	d2, err := f.env.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	var memo string
	if p := d2.GetWorkflowExecutionInfo().GetMemo().GetFields()["stage_order"]; p == nil || converter.GetDefaultDataConverter().FromPayload(p, &memo) != nil || memo != res.StageOrder {
		t.Errorf("the run's memo stage_order %q, want %q", memo, res.StageOrder)
	}
}

// runningCutover is a `starter cutover --json` under way in a goroutine.
type runningCutover struct {
	done chan struct{}
	code int
	out  string
	err  string
}

// goCutover starts `starter cutover --json ARGS...` and returns at once.
func goCutover(ctx context.Context, f *fleet, args ...string) *runningCutover {
	r := &runningCutover{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.code, r.out, r.err = f.starter(ctx, append([]string{"cutover", "--json"}, args...)...)
	}()
	return r
}

// wait returns the cutover's exit code and result.
func (r *runningCutover) wait(t *testing.T) (int, contract.CutoverResult) {
	t.Helper()
	<-r.done
	var res contract.CutoverResult
	if err := json.Unmarshal([]byte(r.out), &res); err != nil {
		t.Fatalf("cutover: exit %d, output is not a CutoverResult: %v\nstdout: %s\nstderr: %s", r.code, err, r.out, r.err)
	}
	return r.code, res
}

// kill -9 of the control service (the embedded server, its SQLite state
// and every local node's worker) while a cutover stages ahead: the lane
// it replaces goes on answering while the service is down (its
// containers are Docker's), and once the service is back the same run
// resumes, stages, verifies and only then stops it.
func TestControlServiceKilledMidStageAheadResumes(t *testing.T) {
	const pauseAt = 40 << 20 // staging holds here until the release file exists
	p := newProcFleet(t, pauseAt)
	ctx := withTimeout(t, 15*time.Minute)
	if err := os.WriteFile(p.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := p.run(ctx, "--json", "cutover", "--lane", "crash-2x"); code != 0 {
		t.Fatalf("cutover crash-2x: exit %d\n%s", code, out)
	}
	if err := os.Remove(p.release); err != nil {
		t.Fatal(err)
	}
	client := startLaneClient(recipePort(t, filepath.Join(p.dir, "recipes", "crash-2x.toml")), 5000)
	defer client.stop()
	if code, out := p.run(ctx, "--json", "cutover", "--lane", "crash-4x", "--no-wait"); code != 0 {
		t.Fatalf("cutover crash-4x --no-wait: exit %d\n%s", code, out)
	}
	id := contract.CutoverID("crash-4x")
	c := p.client(ctx)
	p.waitPaused(ctx, c, contract.StageNodeID("crash-4x", "c3"), contract.StageNodeID("crash-4x", "c4"))
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	runID := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	killed := p.kill9Control(ctx)
	down := len(client.seen())
	// While the service is down the serving lane answers on: a few rounds
	// of the client, each answered by crash-2x.
	for len(client.seen()) < down+5 {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(clientEvery):
		}
	}
	if err := os.WriteFile(p.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c = p.restartControl(ctx, killed)
	code, out := p.run(ctx, "--json", "attach", "--lane", "crash-4x")
	seen := client.stop()
	var res contract.CutoverResult
	if i := strings.Index(out, "{"); code != 0 || i < 0 || json.Unmarshal([]byte(out[i:]), &res) != nil || !res.OK || res.StageOrder != "ahead" {
		t.Fatalf("the cutover after the control service's kill -9: exit %d, want ok, staged ahead\n%s", code, out)
	}
	d, err = c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.GetWorkflowExecutionInfo().GetExecution().GetRunId(); got != runID {
		t.Errorf("cutover run %s after the restart, was %s: want the same run resumed", got, runID)
	}
	_, verified, _ := stepSpan(res, "verify")
	stop, _, ok := stepSpan(res, "stop crash-2x")
	if !ok || stop.Before(verified) {
		t.Fatalf("crash-2x stopped at %v (%v), crash-4x verified at %v: want the stop after the verify", stop, ok, verified)
	}
	// crash-4x answers on a port of its own: every round after the stop fails.
	v := viewOf(seen, stop, oldCtx, 0, time.Time{}, stop)
	if len(v.BeforeStop) > 0 {
		t.Errorf("crash-2x failed %d rounds before its stop: %s", len(v.BeforeStop), describeFailures(v.BeforeStop))
	}
	if len(seen) < down+5 {
		t.Errorf("the client saw %d rounds, %d before the kill: want rounds while the service was down", len(seen), down)
	}
	t.Logf("crash-2x answered %d rounds before its stop (%d before the kill); switch window %.2fs", len(seen)-len(v.Failures), down, res.SwitchSeconds)
}
