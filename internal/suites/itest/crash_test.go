package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/simimage"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
)

// These tests run the real starter binary as separate processes against the
// embedded default (no temporal.address): the starter starts the control
// service in the background and is only its client, so kill -9 of a
// starter mid-run loses nothing.

// buildBinary builds the command at ./pkg (module root three levels up) once
// per test binary run, into a directory TestMain removes at the end.
var (
	builtBinaries sync.Map
	binDir        string
	binDirOnce    sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	type built struct {
		once sync.Once
		bin  string
		err  error
		out  []byte
	}
	v, _ := builtBinaries.LoadOrStore(pkg, &built{})
	b := v.(*built)
	b.once.Do(func() {
		binDirOnce.Do(func() { binDir, b.err = os.MkdirTemp("", "sparklane-bin-") })
		if b.err != nil {
			return
		}
		b.bin = filepath.Join(binDir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", b.bin, "./"+pkg)
		cmd.Dir = filepath.Join("..", "..", "..")
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("go build ./%s: %v\n%s", pkg, b.err, b.out)
	}
	return b.bin
}

// controlEnv is the environment entry that has a starter start the worker
// built here as its control service (the starter does not embed the
// server; without it each test's state_dir would build its own worker).
func controlEnv(t *testing.T) string {
	return "SPARKLANE_CONTROL_EXE=" + buildBinary(t, "worker")
}

// testControlEnv is controlEnv with the test worker (its fault points
// armed from the environment the starter passes on) as the control
// service.
func testControlEnv(t *testing.T) string {
	return "SPARKLANE_CONTROL_EXE=" + buildBinary(t, testWorkerPkg)
}

// procFleet is a 4-node fleet in embedded mode, driven through
// starter processes, with the staging fault point armed for its service
// (the test worker's, testworker.PauseAtEnv).
type procFleet struct {
	t       *testing.T
	dir     string
	cfgFile string
	state   string
	starter string
	release string
	env     []string
}

// buildSimImage builds the engine-sim image on this machine's Docker and
// returns the client (closed when the test ends) and the image.
func buildSimImage(ctx context.Context, t *testing.T) (*dockerclient.Client, string) {
	t.Helper()
	dc, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		t.Fatalf("Docker is required for these tests (real containers): %v", err)
	}
	t.Cleanup(func() { dc.Close() })
	image, err := simimage.Build(ctx, dc, simimage.Options{})
	if err != nil {
		t.Fatalf("build engine-sim image: %v", err)
	}
	return dc, image
}

// extra are root keys added to its config.
func newProcFleet(t *testing.T, pauseAt int64, extra ...string) *procFleet {
	t.Helper()
	ctx := withTimeout(t, 10*time.Minute)
	dc, image := buildSimImage(ctx, t)
	bin := buildBinary(t, "starter")
	dir := t.TempDir()
	nas, err := demo.GenerateNAS(filepath.Join(dir, "nas"), 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	// The demo's lanes, renamed (crash-4x, crash-2x on nodes c1..c4) so
	// their containers never meet a developer's own demo on this engine.
	tport, uiport := ephemeralPort(t), ephemeralPort(t)
	recipes := filepath.Join(dir, "recipes")
	if err := os.MkdirAll(recipes, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := demo.WriteRecipes(recipes, image, nas, freePort(t)); err != nil {
		t.Fatal(err)
	}
	for _, l := range demo.Lanes {
		b, err := os.ReadFile(filepath.Join(recipes, l+".toml"))
		if err != nil {
			t.Fatal(err)
		}
		body := strings.NewReplacer("demo-4x", "crash-4x", "demo-2x", "crash-2x", `aliases = ["d4"]`, "", `aliases = ["d2"]`, "").Replace(string(b))
		if err := os.Remove(filepath.Join(recipes, l+".toml")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(recipes, strings.Replace(l, "demo", "crash", 1)+".toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "state_dir = %q\nrecipes_dir = %q\nhf_cache_dir = %q\nshared_roots = [%q]\nprobe_grace = \"2s\"\n%s\n",
		filepath.Join(dir, "state"), recipes, nas.Hub, filepath.Dir(nas.Hub), strings.Join(extra, ""))
	fmt.Fprintf(&cfg, "[temporal]\nport = %d\nui_port = %d\n\n", tport, uiport)
	for i := 1; i <= 4; i++ {
		root := filepath.Join(dir, "nodes", fmt.Sprintf("c%d", i))
		if err := os.MkdirAll(filepath.Join(root, "srv", "sparklane"), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&cfg, "[[nodes]]\nname = \"c%d\"\naddress = \"127.0.0.1\"\nroots = [\"/srv/sparklane\"]\nfs_root = %q\n\n", i, root)
	}
	cfg.WriteString("[[clusters]]\nname = \"crash-4x\"\nnodes = [\"c1\", \"c2\", \"c3\", \"c4\"]\n\n[[clusters]]\nname = \"crash-2x\"\nnodes = [\"c1\", \"c2\"]\n")
	cfgFile := filepath.Join(dir, "sparklane.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &procFleet{t: t, dir: dir, cfgFile: cfgFile, state: filepath.Join(dir, "state"), starter: bin, release: filepath.Join(dir, "release")}
	p.env = append(os.Environ(), testControlEnv(t),
		testworker.PauseAtEnv+"="+fmt.Sprint(pauseAt),
		testworker.ReleaseEnv+"="+p.release)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = os.WriteFile(p.release, nil, 0o644)
		p.run(cctx, "stop", "--lane", "crash-4x")
		p.run(cctx, "stop", "--lane", "crash-2x")
		if _, _, err := control.Stop(cctx, p.state, 30*time.Second); err != nil {
			t.Errorf("stop the control service: %v", err)
		}
		for _, l := range []string{"crash-4x", "crash-2x"} {
			cs, _ := dc.ContainerList(cctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "sparklane.lane="+l))})
			for _, c := range cs {
				_ = dc.ContainerRemove(cctx, c.ID, container.RemoveOptions{Force: true})
			}
		}
	})
	return p
}

// startStarter starts `starter ARGS...` as a process of its own.
func (p *procFleet) startStarter(args ...string) (*exec.Cmd, *syncbuf.Buffer) {
	p.t.Helper()
	out := &syncbuf.Buffer{} // read while the process still writes it
	cmd := exec.Command(p.starter, append([]string{"--config", p.cfgFile}, args...)...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start starter %v: %v", args, err)
	}
	return cmd, out
}

// run runs `starter ARGS...` to its end: exit code and output.
func (p *procFleet) run(ctx context.Context, args ...string) (int, string) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, p.starter, append([]string{"--config", p.cfgFile}, args...)...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return code, out.String()
}

// client dials the control service the starters started.
func (p *procFleet) client(ctx context.Context) client.Client {
	p.t.Helper()
	owner, ok := control.Find(p.state)
	if !ok || owner.Frontend == "" {
		p.t.Fatalf("no control service holds %s", p.state)
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: owner.Frontend, Namespace: "default", Logger: quietLogger{}})
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(c.Close)
	return c
}

// waitPaused waits until every StageBlock of the run id (or of its stage
// children) reports in its heartbeat that it holds at the pause offset.
func (p *procFleet) waitPaused(ctx context.Context, c client.Client, ids ...string) {
	p.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		paused := 0
		for _, id := range ids {
			d, err := c.DescribeWorkflowExecution(ctx, id, "")
			if err != nil {
				continue
			}
			for _, pa := range d.GetPendingActivities() {
				var pr contract.StageProgress
				if pa.GetActivityType().GetName() == "StageBlock" && pa.GetHeartbeatDetails() != nil &&
					converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &pr) == nil && pr.Paused {
					paused++
				}
			}
		}
		if paused >= len(ids) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("staging of %v never reached the pause point", ids)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ephemeralPort is a port the kernel just handed out and nobody holds.
func ephemeralPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func kill9(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 starter: %v", err)
	}
	_ = cmd.Wait()
}

func runStatus(ctx context.Context, t *testing.T, c client.Client, id string) enumspb.WorkflowExecutionStatus {
	t.Helper()
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatalf("describe %s: %v", id, err)
	}
	return d.GetWorkflowExecutionInfo().GetStatus()
}

// A starter killed with SIGKILL mid-stage and mid-cutover orphans nothing:
// the run goes on in the control service and a second starter attaches to
// it and gets its result; nothing is copied twice; cancel waits for the end.
func TestStarterKilledMidRunGoesOn(t *testing.T) {
	const pauseAt = 40 << 20
	p := newProcFleet(t, pauseAt)
	ctx := withTimeout(t, 15*time.Minute)

	// Two starters racing to start the service: one service, both use it.
	var wg sync.WaitGroup
	outs := make([]string, 2)
	codes := make([]int, 2)
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i], outs[i] = p.run(ctx, "--json", "control", "start") }()
	}
	wg.Wait()
	var pids []int
	for i := range 2 {
		if codes[i] != 0 {
			t.Fatalf("racing 'control start' #%d: exit %d\n%s", i, codes[i], outs[i])
		}
		var st struct {
			Running bool          `json:"running"`
			Owner   control.Owner `json:"owner"`
		}
		if err := json.Unmarshal([]byte(outs[i][strings.Index(outs[i], "{"):]), &st); err != nil {
			t.Fatalf("control start --json: %v\n%s", err, outs[i])
		}
		pids = append(pids, st.Owner.PID)
	}
	if pids[0] != pids[1] || pids[0] == 0 {
		t.Fatalf("two racing starters ended up with services %v, want one", pids)
	}
	c := p.client(ctx)

	// kill -9 of `starter stage` while every node holds at the pause point.
	stage, out := p.startStarter("stage", "--lane", "crash-2x")
	id := contract.StageID("crash-2x")
	p.waitPaused(ctx, c, contract.StageNodeID("crash-2x", "c1"), contract.StageNodeID("crash-2x", "c2"))
	kill9(t, stage)
	if st := runStatus(ctx, t, c, id); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("after kill -9 of the starter, %s is %v, want still running\nstarter said: %s", id, st, out)
	}
	p.repeatFollows(ctx, id, "stage", "--lane", "crash-2x")
	code, o := p.run(ctx, "--json", "attach", id)
	if code != 0 {
		t.Fatalf("attach %s: exit %d\n%s", id, code, o)
	}
	var sj struct {
		Nodes []struct {
			Node   string `json:"node"`
			Blocks []struct {
				Block       string `json:"block"`
				CopiedBytes int64  `json:"copied_bytes"`
				TotalBytes  int64  `json:"total_bytes"`
			} `json:"blocks"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(o[strings.Index(o, "{"):]), &sj); err != nil {
		t.Fatalf("attach --json: %v\n%s", err, o)
	}
	if len(sj.Nodes) != 2 {
		t.Fatalf("attach reported %d nodes, want 2:\n%s", len(sj.Nodes), o)
	}
	for _, n := range sj.Nodes {
		for _, b := range n.Blocks {
			if b.Block == "weights" && (b.CopiedBytes == 0 || b.CopiedBytes > b.TotalBytes) {
				t.Errorf("%s/%s copied %d of %d bytes: the starter's death must cost no copy", n.Node, b.Block, b.CopiedBytes, b.TotalBytes)
			}
		}
	}

	// cancel waits until the run is closed and says how it ended.
	if err := os.Remove(p.release); err != nil {
		t.Fatal(err)
	}
	id4 := contract.StageID("crash-4x")
	stage3, _ := p.startStarter("stage", "--lane", "crash-4x", "--node", "c3")
	p.waitPaused(ctx, c, contract.StageNodeID("crash-4x", "c3"))
	code, o = p.run(ctx, "cancel", id4)
	_ = stage3.Wait()
	if code != 0 || !strings.Contains(o, id4+": Canceled") {
		t.Fatalf("cancel %s: exit %d, want it to wait and report Canceled:\n%s", id4, code, o)
	}
	if st := runStatus(ctx, t, c, id4); st != enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED {
		t.Fatalf("%s is %v after cancel returned, want Canceled", id4, st)
	}
	if code, o := p.run(ctx, "cancel", id4); code != 0 || !strings.Contains(o, "not running") {
		t.Fatalf("cancel of an ended run: exit %d, want 0 and 'not running':\n%s", code, o)
	}

	// kill -9 of `starter cutover` while demo4 stages; a second starter
	// attaches and prints the cutover's result.
	cut, cutOut := p.startStarter("cutover", "--lane", "crash-4x")
	cid := contract.CutoverID("crash-4x")
	p.waitPaused(ctx, c, contract.StageNodeID("crash-4x", "c4"))
	kill9(t, cut)
	if st := runStatus(ctx, t, c, cid); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("after kill -9 of the starter, %s is %v, want still running\nstarter said: %s", cid, st, cutOut)
	}
	if err := os.WriteFile(p.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, o = p.run(ctx, "attach", "--lane", "crash-4x")
	if code != 0 || !strings.Contains(o, "cutover to crash-4x on crash-4x: ok") {
		t.Fatalf("attach --lane crash-4x: exit %d, want the cutover's ok:\n%s", code, o)
	}

	// up of another lane on nodes crash-4x serves is refused, naming it.
	code, o = p.run(ctx, "up", "--lane", "crash-2x")
	if code != 3 || !strings.Contains(o, "c1 serves lane crash-4x") || !strings.Contains(o, "--force") {
		t.Fatalf("up --lane crash-2x on crash-4x's nodes: exit %d, want 3 naming the holder:\n%s", code, o)
	}
}

// repeatFollows checks a starter repeated while run id holds at the pause
// point: with another input (--stage=force) it is refused, naming the
// difference and attach; the same command (what people do after a crash)
// follows the run instead of starting another. It releases the pause and
// returns once the repeated starter has ended with the run.
func (p *procFleet) repeatFollows(ctx context.Context, id string, args ...string) {
	t := p.t
	t.Helper()
	if code, o := p.run(ctx, append(args, "--stage=force")...); code != 3 ||
		!strings.Contains(o, "with another input") || !strings.Contains(o, "starter attach "+id) {
		t.Fatalf("%v --stage=force while %s runs: exit %d, want 3 naming the difference and 'starter attach %s':\n%s", args, id, code, id, o)
	}
	again, againOut := p.startStarter(args...)
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(againOut.String(), "already running with the same input") {
		if time.Now().After(deadline) {
			kill9(t, again)
			t.Fatalf("the repeated %v never said it follows %s:\n%s", args, id, againOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.WriteFile(p.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := again.Wait(); err != nil {
		t.Fatalf("the repeated %v that follows %s: %v\n%s", args, id, err, againOut)
	}
}

// quietLogger keeps the SDK client's lines out of test output.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// The control service run in the foreground (`starter control run`, which
// becomes `worker dev`, what the systemd unit runs) stops cleanly on SIGINT and on SIGTERM and frees its
// state_dir's lock; a second service on the same state_dir is refused
// naming the first.
func TestControlServiceHonoursSignals(t *testing.T) {
	bin := buildBinary(t, "starter")
	env := append(os.Environ(), controlEnv(t))
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "sparklane.toml")
	body := fmt.Sprintf("state_dir = %q\nrecipes_dir = %q\n\n[temporal]\nport = %d\nui_port = %d\n\n[[nodes]]\nname = \"s1\"\naddress = \"127.0.0.1\"\nroots = [\"/srv\"]\nfs_root = %q\n",
		state, dir, ephemeralPort(t), ephemeralPort(t), filepath.Join(dir, "s1"))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		var out bytes.Buffer
		cmd := exec.Command(bin, "--config", cfg, "control", "run")
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if o, ok := control.Find(state); ok && o.Frontend != "" {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("control run exited before serving: %v\n%s", err, out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("control run never published its frontend:\n%s", out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if sig == syscall.SIGINT {
			second := exec.Command(bin, "--config", cfg, "control", "run")
			second.Env = env
			o, code := second.CombinedOutput()
			if code == nil || !strings.Contains(string(o), "held by a running control service") || !strings.Contains(string(o), fmt.Sprintf("pid %d", cmd.Process.Pid)) {
				t.Fatalf("a second control service on the same state_dir: %v\n%s", code, o)
			}
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("control run after %v: %v\n%s", sig, err, out.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Fatalf("control run ignored %v for a minute:\n%s", sig, out.String())
		}
		if _, held := control.Find(state); held {
			t.Fatalf("the lock of %s is still held after %v", state, sig)
		}
	}
}
