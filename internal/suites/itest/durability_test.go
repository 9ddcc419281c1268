package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/testkit/blobtest"
	"github.com/sparklane/sparklane/internal/testkit/diskuse"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
	"github.com/sparklane/sparklane/internal/workers"
	"github.com/sparklane/sparklane/workflows"
)

// Durability tests (issue 6): workers and the server die mid-run, real
// processes are SIGKILLed, and the runs still complete without redoing
// more than the design allows.

const (
	// chunk is sparse-rows' default block and two of hub-mirror's copy
	// chunks (its flush trails the copy by one): the most a kill -9 may
	// cost per file in flight.
	chunk = 64 << 20
	// killHeartbeat is the staging heartbeat timeout used here, so a killed
	// worker is noticed in seconds instead of the production minute.
	killHeartbeat = 2 * time.Second
)

// nodeProc is a node worker running as its own OS process (the test
// worker: the worker command line with the fault points of
// internal/testkit/testworker), so it can be killed with SIGKILL like a
// crashed machine's worker.
type nodeProc struct {
	t    *testing.T
	bin  string
	cfg  string
	node string
	log  string
	cmd  *exec.Cmd
	// env is added to the worker's environment at the next start (its
	// fault points: testworker.PauseAtEnv, …).
	env []string
}

// testWorkerPkg is the test worker's package: ./worker's command line with
// the fault points armed from its environment (testworker.FromEnv).
const testWorkerPkg = "internal/testkit/testworker/cmd/testworker"

// buildWorker builds the test worker into dir (the module root is three
// levels up) in the background; wait returns the binary.
func buildWorker(t *testing.T, dir string) (wait func() string) {
	t.Helper()
	bin := filepath.Join(dir, "testworker")
	cmd := exec.Command("go", "build", "-o", bin, "./"+testWorkerPkg)
	cmd.Dir = filepath.Join("..", "..", "..")
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() { out, err := cmd.CombinedOutput(); done <- result{out, err} }()
	return func() string {
		t.Helper()
		r := <-done
		if r.err != nil {
			t.Fatalf("go build ./%s: %v\n%s", testWorkerPkg, r.err, r.out)
		}
		return bin
	}
}

func (p *nodeProc) start() {
	p.t.Helper()
	lf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command(p.bin, "node", "--node", p.node, "--config", p.cfg, "--log", "json")
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Its own process group: nothing it starts outlives the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start worker node --node %s: %v", p.node, err)
	}
	p.cmd = cmd
}

// kill9 sends SIGKILL and reaps the process.
func (p *nodeProc) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("SIGKILL worker %d: %v", p.cmd.Process.Pid, err)
	}
	_ = p.cmd.Wait()
	p.cmd = nil
}

// stop ends a running process with SIGTERM (its normal shutdown).
func (p *nodeProc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

// pendingStage polls the stage/LANE/NODE child until a pending StageBlock
// activity's heartbeat satisfies ok, and returns that progress.
func pendingStage(ctx context.Context, t *testing.T, c client.Client, id string, ok func(contract.StageProgress) bool) contract.StageProgress {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	var last string
	for {
		d, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err == nil {
			if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t.Fatalf("%s ended (%s) before it could be interrupted mid-copy; last heartbeat: %s", id, st, last)
			}
			for _, pa := range d.GetPendingActivities() {
				if pa.GetActivityType().GetName() != "StageBlock" || pa.GetHeartbeatDetails() == nil {
					continue
				}
				var p contract.StageProgress
				if err := dc.FromPayloads(pa.GetHeartbeatDetails(), &p); err != nil {
					t.Fatalf("decode heartbeat of %s: %v", id, err)
				}
				b, _ := json.Marshal(p)
				last = string(b)
				if ok(p) {
					return p
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: no StageBlock heartbeat with progress before %v (last: %s, describe: %v)", id, ctx.Err(), last, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// killFleet is a two-node fleet (cluster duo) whose n2 worker is a separate
// process (not started: each test starts it with the fault point it needs),
// with a hub-mirror lane over a 1.5 GiB synthetic hub and a sparse-rows
// lane over a 2 GiB engram table.
func killFleet(t *testing.T) (*fleet, *nodeProc) {
	t.Helper()
	base := t.TempDir()
	built := buildWorker(t, base)
	nasDir := filepath.Join(base, "nas")
	nas, err := demo.GenerateNAS(nasDir, 3<<29) // 4 blobs of 384 MiB
	if err != nil {
		t.Fatal(err)
	}
	tables := filepath.Join(nasDir, "tables")
	// 8 Mi rows × 256 B = 2 GiB: n2 (rank 1 of 2) packs 1 GiB, 16 blocks.
	blobtest.EngramTables(t, tables, map[int]int64{1: 8 << 20})
	head := `cluster = "duo"
runtime = "sim"
image = "sparklane/engine-sim:latest"
model = "demo/sim-model"
command = "/engine-sim /hub --port {port}"
`
	f := newFleet(t, fleetOptions{nodes: 2, clusters: map[string][]string{"duo": {"n1", "n2"}}, shared: nasDir,
		recipes: map[string]string{
			"big-hub": `name = "big-hub"
` + head + fmt.Sprintf(`
[[staging]]
kind = "hub-mirror"
id = "weights"
src = %q
dst = "/srv/sparklane/hf"
repos = [%q]
verify = "sampled"
`, nas.Hub, demo.ModelRepo),
			"big-rows": `name = "big-rows"
` + head + fmt.Sprintf(`
[[staging]]
kind = "sparse-rows"
id = "engram"
format = "packed"
src = %q
dst = "/srv/sparklane/engram"
tensors = ["model.layers.{L}.engram.table"]
layers = [1]
`, tables),
		}})
	f.startControl()
	p := &nodeProc{t: t, bin: built(), cfg: f.cfgFile, node: "n2", log: filepath.Join(base, "worker-n2.log")}
	t.Cleanup(p.stop)
	return f, p
}

// startStage runs the Stage workflow for lane on n2 only, with the short
// heartbeat timeout, through the client (as `starter stage --node n2`).
// An optional outage budget bounds how long the run waits for a gone node.
func startStage(ctx context.Context, t *testing.T, f *fleet, lane string, budget ...time.Duration) client.WorkflowRun {
	t.Helper()
	r, plan := f.lanePlan(lane)
	run, err := f.env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.StageID(lane), TaskQueue: contract.ControlQueue},
		workflows.Stage, contract.StageInput{Plan: *plan, Blocks: r.Staging, Only: "n2", Mode: contract.StageAuto, Verify: true, Heartbeat: contract.Duration(killHeartbeat), OutageBudget: contract.Duration(firstOr(budget, 0))})
	if err != nil {
		t.Fatalf("start stage %s: %v", lane, err)
	}
	return run
}

func firstOr[T any](v []T, def T) T {
	if len(v) > 0 {
		return v[0]
	}
	return def
}

// kill -9 of the n2 node worker mid-copy and mid-pack: after a restart the
// retried StageBlock resumes from its last heartbeat, the staging completes
// and verifies, and what was on disk at the kill is re-copied only up to
// one small file per file in flight (hub-mirror: within the boot its temp
// files wrote, all of them are kept; a small file is written whole before
// its rename, and its temp is not resumed), or one 64 MiB block
// (sparse-rows).
//
// The kill point is deterministic: the worker starts with the staging
// fault point (testworker.PauseAtEnv) set to a byte count a third of the
// way in, so the copy holds there, heartbeating Paused, until the test has
// seen that heartbeat and killed the worker. It restarts without it. (The
// 1 GiB pack once finished before a test that raced it could kill it.)
func TestNodeWorkerKill9MidStagingResumes(t *testing.T) {
	f, proc := killFleet(t)
	n2Root := filepath.Join(f.dir, "nodes", "n2")

	cases := []struct {
		lane, dst string
		header    int64
		// pauseAt is the fault point: bytes done when the copy holds.
		pauseAt int64
		// bound is the most re-copying allowed.
		bound func(contract.StageProgress) int64
	}{
		{"big-hub", "srv/sparklane/hf", 0, 512 << 20,
			// Four files in flight (hub-mirror's default parallelism):
			// nothing of a big one's temp file is lost in the same boot,
			// a small one's may be written again.
			func(p contract.StageProgress) int64 { return 4 * hubmirror.SmallMax }},
		{"big-rows", "srv/sparklane/engram", sparserows.PackedHeaderSize, 320 << 20,
			func(contract.StageProgress) int64 { return chunk }},
	}
	for _, tc := range cases {
		t.Run(tc.lane, func(t *testing.T) {
			ctx := withTimeout(t, 4*time.Minute)
			proc.stop()
			proc.env = []string{fmt.Sprintf("%s=%d", testworker.PauseAtEnv, tc.pauseAt)}
			proc.start()
			run := startStage(ctx, t, f, tc.lane)
			hctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			seen := pendingStage(hctx, t, f.env.Client, contract.StageNodeID(tc.lane, "n2"), func(p contract.StageProgress) bool { return p.Paused })
			cancel()
			proc.kill9()
			if seen.BytesDone < tc.pauseAt || seen.BytesDone > seen.BytesTotal*3/4 {
				t.Fatalf("held at %d of %d bytes: want past the fault point %d and short of the end", seen.BytesDone, seen.BytesTotal, tc.pauseAt)
			}
			dst := filepath.Join(n2Root, tc.dst)
			onDisk := diskuse.WrittenBytes(t, dst, tc.header)
			proc.env = nil
			proc.start()

			var res contract.StageResult
			if err := run.Get(ctx, &res); err != nil {
				t.Fatalf("stage %s after kill -9 and restart: %v\nworker log: %s", tc.lane, err, proc.log)
			}
			if len(res.Nodes) != 1 || len(res.Nodes[0].Blocks) != 1 || len(res.Nodes[0].Verified) != 1 {
				t.Fatalf("stage result: %+v", res)
			}
			b, v := res.Nodes[0].Blocks[0].Result, res.Nodes[0].Verified[0].Result
			if !v.Clean() {
				t.Fatalf("verify after resumed staging: %d bad, %d missing: %v %v", len(v.Bad), len(v.Missing), v.Bad, v.Missing)
			}
			total := b.TotalBytes
			recopied := onDisk + b.CopiedBytes - total
			t.Logf("%s: total %s, on disk at kill %s, last heartbeat %s done (%d in flight), final attempt copied %s: re-copied %s (%d bytes)",
				tc.lane, contract.HumanBytes(total), contract.HumanBytes(onDisk), contract.HumanBytes(max(seen.BytesDone, seen.RowsDone*256)), len(seen.InFlight),
				contract.HumanBytes(b.CopiedBytes), contract.HumanBytes(max(0, recopied)), recopied)
			if onDisk < chunk {
				t.Fatalf("only %d bytes were on disk at the kill: not mid-copy", onDisk)
			}
			if b.CopiedBytes >= total {
				t.Errorf("the retried attempt copied all %d bytes again: it did not resume", total)
			}
			if recopied > tc.bound(seen) {
				t.Errorf("re-copied %d bytes after kill -9, more than %d (one small hub-mirror file per file in flight, or one sparse-rows block)", recopied, tc.bound(seen))
			}
			logb, _ := os.ReadFile(proc.log)
			if !strings.Contains(string(logb), "resuming staging from heartbeat") {
				t.Errorf("the restarted worker did not resume from the heartbeat (log %s)", proc.log)
			}
		})
	}
}

// restartServer stops the workers and the embedded server, starts a new
// server on the same SQLite file and port, and new workers on a new client.
func restartServer(t *testing.T, f *fleet, nodes []string) {
	t.Helper()
	addr := f.env.Address
	var port int
	if _, err := fmt.Sscanf(addr[strings.LastIndex(addr, ":")+1:], "%d", &port); err != nil {
		t.Fatalf("server address %q: %v", addr, err)
	}
	f.stopWorkers()
	if err := f.env.Close(); err != nil {
		t.Fatalf("stop embedded server: %v", err)
	}
	boot := &config.Config{StateDir: f.cfg.StateDir, Temporal: config.Temporal{Namespace: "default", Port: port, UIPort: -1}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env, err := workers.Connect(ctx, boot, f.log, workers.ConnectOptions{NoUI: true})
	if err != nil {
		t.Fatalf("restart the embedded server on %s over %s: %v", addr, f.cfg.StateDir, err)
	}
	if env.Server == nil || env.Address != addr {
		t.Fatalf("restart: got server %v at %s, want a new embedded server at %s", env.Server != nil, env.Address, addr)
	}
	t.Cleanup(func() { f.stopWorkers(); env.Close() })
	f.env = env
	f.startControl()
	for _, n := range nodes {
		f.startNode(n)
	}
}

// fleetContainers lists the lane's containers on this fleet's nodes
// (n1..n4): the Docker engine is shared, and other fleets may run a lane of
// the same name on nodes of other names. IDs are sorted; running counts
// those up.
func fleetContainers(t *testing.T, dc *dockerclient.Client, lane string) (ids []string, running int) {
	t.Helper()
	cs, err := dc.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", contract.LabelLane+"="+lane))})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		switch c.Labels[contract.LabelNode] {
		case "n1", "n2", "n3", "n4":
			ids = append(ids, c.ID)
			if c.State == "running" {
				running++
			}
		}
	}
	sort.Strings(ids)
	return ids, running
}

// waitPending waits until workflow id has a pending activity of type name
// that has started.
func waitPending(ctx context.Context, t *testing.T, c client.Client, id, name string) {
	t.Helper()
	for {
		d, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err == nil {
			if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t.Fatalf("%s ended (%s) before %s was pending", id, st, name)
			}
			for _, pa := range d.GetPendingActivities() {
				if pa.GetActivityType().GetName() == name && pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s never pending: %v (describe: %v)", id, name, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// activityAttempts returns the attempt of every started activity of type
// name in the workflow's history.
func activityAttempts(ctx context.Context, t *testing.T, c client.Client, id, name string) []int32 {
	t.Helper()
	types := map[int64]string{}
	var out []int32
	for _, e := range historyEvents(ctx, t, c, id) {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			types[e.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil && types[a.GetScheduledEventId()] == name {
			out = append(out, a.GetAttempt())
		}
	}
	return out
}

// The embedded server is stopped and started again (same SQLite file, same
// port) in the middle of a cutover; the workers come back on a new client
// and the cutover completes, serving.
func TestServerRestartMidCutoverCompletes(t *testing.T) {
	// The nodes' staging holds at its first byte (the staging fault point)
	// until the release file exists, so the restart lands mid-stage
	// however fast this machine copies the demo's NAS.
	pause := testworker.NewStagePause(1, "")
	f, dc := demoFleet(t, 24<<20, func(o *fleetOptions) { o.seams = &activities.Seams{StageHold: pause.Hold} })
	ctx := withTimeout(t, 5*time.Minute)
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "demo-2x", "--no-wait", "--json", "-o", "extra_args=--load-mibps=8")
	if code != 0 {
		t.Fatalf("cutover --no-wait: exit %d\n%s\n%s", code, out, errOut)
	}
	id := contract.CutoverID("demo-2x")
	// Mid-cutover: n1's staging is under way, held at the fault point.
	hctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	pendingStage(hctx, t, f.env.Client, contract.StageNodeID("demo-2x", "n1"), func(p contract.StageProgress) bool { return p.Paused })
	cancel()
	restartServer(t, f, []string{"n1", "n2", "n3", "n4"})
	pause.Release()

	cutoverServesAfter(ctx, t, f, id, "the server restart")
	if ids, r := fleetContainers(t, dc, "demo-2x"); r != 2 || len(ids) != 2 {
		t.Errorf("demo-2x: %d running of %d containers, want 2 of 2", r, len(ids))
	}
	// The run is the one started before the restart: same history, now closed.
	d, err := f.env.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Errorf("cutover status %s after the restart", d.GetWorkflowExecutionInfo().GetStatus())
	}
	n, err := f.env.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = %q", id)})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.GetExecutions()) != 1 {
		t.Errorf("%d runs of %s, want the one started before the restart", len(n.GetExecutions()), id)
	}
}

// cutoverServesAfter waits for demo-2x's cutover run id, begun before
// what happened (after), to succeed and checks that it serves.
func cutoverServesAfter(ctx context.Context, t *testing.T, f *fleet, id, after string) {
	t.Helper()
	var res contract.CutoverResult
	if err := f.env.Client.GetWorkflow(ctx, id, "").Get(ctx, &res); err != nil {
		t.Fatalf("cutover after %s: %v", after, err)
	}
	if !res.OK {
		t.Fatalf("cutover after %s did not succeed: %+v", after, res)
	}
	checkServing(t, f, res, demo.DecodeTPS["demo-2x"])
}

// The control worker is restarted while WaitReady polls a slowly loading
// lane: the activity is retried on the new worker and keeps waiting, the
// cutover completes, and the containers are the same ones (no second set).
func TestControlWorkerRestartDuringWaitReady(t *testing.T) {
	f, dc := demoFleet(t, 24<<20)
	ctx := withTimeout(t, 5*time.Minute)
	// 24 MiB of weights at 2 MiB/s: each rank loads for ~12 s.
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "demo-2x", "--no-wait", "--json", "-o", "extra_args=--load-mibps=2")
	if code != 0 {
		t.Fatalf("cutover --no-wait: exit %d\n%s\n%s", code, out, errOut)
	}
	id := contract.CutoverID("demo-2x")
	waitPending(ctx, t, f.env.Client, id, "WaitReady")
	before, _ := fleetContainers(t, dc, "demo-2x")
	if len(before) != 2 {
		t.Fatalf("during WaitReady: %d containers for demo-2x, want 2", len(before))
	}
	f.control.Stop()
	f.control = nil
	f.startControl()

	cutoverServesAfter(ctx, t, f, id, "the control worker restart")
	after, _ := fleetContainers(t, dc, "demo-2x")
	if strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("containers changed across the control worker restart:\nbefore %v\nafter  %v", before, after)
	}
	if ids, r := fleetContainers(t, dc, "demo-2x"); r != 2 || len(ids) != 2 {
		t.Errorf("demo-2x: %d running of %d containers, want 2 of 2", r, len(ids))
	}
	att := activityAttempts(ctx, t, f.env.Client, id, "WaitReady")
	if len(att) != 1 || att[0] < 2 {
		t.Errorf("WaitReady attempts %v: want one activity retried (attempt ≥ 2) after the restart", att)
	}
	if n := len(activityAttempts(ctx, t, f.env.Client, id, "StartRank")); n != 2 {
		t.Errorf("StartRank ran %d times, want 2 (one per rank)", n)
	}
}

// A node whose worker is down: the probe's pinned activity times out on
// schedule-to-start, the probe re-probes once, and the cutover fails naming
// the node and its queue, starting nothing.
func TestCutoverFailsNamingNodeWhoseWorkerIsDown(t *testing.T) {
	f, dc := demoFleet(t, 24<<20)
	f.stopNode("n2")
	// The Docker engine is shared with other fleets: only containers that
	// appear during this cutover count.
	before, _ := fleetContainers(t, dc, "demo-2x")
	start := time.Now()
	code, res, errOut := cutover(t, f, "--lane", "demo-2x")
	if code == 0 || res.OK {
		t.Fatalf("cutover with n2's worker down: exit %d ok=%v\n%s", code, res.OK, errOut)
	}
	t.Logf("failed after %.1fs at %q: %s", time.Since(start).Seconds(), res.FailedStep, res.Error)
	if !strings.Contains(res.Error, "n2") || !strings.Contains(res.Error, "node.n2") {
		t.Errorf("error %q does not name node n2 and its queue node.n2", res.Error)
	}
	if !strings.Contains(res.Error, "n1") {
		t.Errorf("error %q does not list every node's state (n1 missing)", res.Error)
	}
	after, _ := fleetContainers(t, dc, "demo-2x")
	old := map[string]bool{}
	for _, id := range before {
		old[id] = true
	}
	for _, id := range after {
		if !old[id] {
			t.Errorf("the failed cutover started container %s", id)
		}
	}
}
