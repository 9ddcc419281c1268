package serve_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/hostimage"
)

var testLabels = hostimage.Labels

// dockerClient returns a client for the local engine; the test fails (never
// skips) when Docker is not there.
func dockerClient(t *testing.T) *client.Client {
	t.Helper()
	return hostimage.Docker(t, "these tests need a running Docker daemon")
}

// onceImage is a test image built from testdata/prog the first time a test
// asks for it, and shared by the rest of the run.
type onceImage struct {
	what  string
	build func(d *client.Client, bin string) (string, error)
	once  sync.Once
	tag   string
	err   error
}

// get returns the image's tag, building it on the first call; a failed
// build fails every test that asks.
func (o *onceImage) get(t *testing.T, d *client.Client) string {
	t.Helper()
	o.once.Do(func() { o.tag, o.err = o.buildWithProg(d) })
	if o.err != nil {
		t.Fatalf("build %s: %v", o.what, o.err)
	}
	return o.tag
}

// buildWithProg builds testdata/prog in a temporary directory and the
// image from it.
func (o *onceImage) buildWithProg(d *client.Client) (string, error) {
	dir, err := os.MkdirTemp("", "sparklane-serve-prog")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bin, err := buildProg(dir)
	if err != nil {
		return "", err
	}
	return o.build(d, bin)
}

var progImage = &onceImage{what: "test image", build: buildImage}

// testImage builds (once per run) a FROM scratch image holding the static
// program in testdata/prog; no registry is needed.
func testImage(t *testing.T, d *client.Client) string {
	t.Helper()
	return progImage.get(t, d)
}

func buildImage(d *client.Client, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return hostimage.Build(ctx, d, "sparklane-test/serve-prog", map[string]string{"prog": bin}, "/prog")
}

// buildProg builds the static test program testdata/prog into dir and
// returns its path.
func buildProg(dir string) (string, error) {
	bin := filepath.Join(dir, "prog")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/prog")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build testdata/prog: %v\n%s", err, out)
	}
	return bin, nil
}

// dockerLane is what most tests here start from: the Docker client, the
// test image and a fresh lane name (cleaned up with the test).
func dockerLane(t *testing.T) (*client.Client, string, string) {
	t.Helper()
	d := dockerClient(t)
	img := testImage(t, d)
	return d, img, newLane(t, d)
}

// startRank starts the rank of s, failing t if it does not start.
func startRank(t *testing.T, ctx context.Context, d *client.Client, s serve.RankSpec) {
	t.Helper()
	if _, err := serve.StartRank(ctx, d, s); err != nil {
		t.Fatal(err)
	}
}

// newLane returns a lane name unique to this test run (the engine is shared
// with other tests) and removes its containers when the test ends.
func newLane(t *testing.T, d *client.Client) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	lane := "t-" + strings.ToLower(t.Name()[4:]) + "-" + hex.EncodeToString(b)
	t.Cleanup(func() { removeLane(d, lane) })
	return lane
}

func removeLane(d *client.Client, lane string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, _ := d.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", contract.LabelLane+"="+lane))})
	for _, c := range cs {
		_ = d.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
}

func listLane(t *testing.T, d *client.Client, lane string) []container.Summary {
	t.Helper()
	cs, err := d.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", contract.LabelLane+"="+lane))})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func spec(lane, node string, rank int, hash, img string, argv ...string) serve.RankSpec {
	return serve.RankSpec{Lane: lane, Node: node, Rank: rank, RecipeHash: hash, Image: img, Argv: argv, ExtraLabels: testLabels}
}

// waitExited waits until every container of lane has stopped running.
func waitExited(t *testing.T, d *client.Client, lane string, n int) []serve.RankState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := serve.InspectLane(context.Background(), d, lane, 20)
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, s := range st {
			if s.Running {
				running++
			}
		}
		if len(st) == n && running == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("lane %s: containers still running after 30s: %+v", lane, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestContainerName(t *testing.T) {
	for _, lane := range []string{"mia", "qwen3.5_fp8", "demo-2x"} {
		if got, want := serve.ContainerName(lane, 1), contract.ContainerName(lane, 1); got != want || got != "sparklane-"+lane+"-r1" {
			t.Errorf("ContainerName(%q, 1) = %q, want %q (config's)", lane, got, want)
		}
	}
}

func TestEnsureImage(t *testing.T) {
	d := dockerClient(t)
	img := testImage(t, d)
	ctx := context.Background()
	info, err := serve.EnsureImage(ctx, d, img, "serve-n1")
	if err != nil {
		t.Fatalf("EnsureImage(%s): %v", img, err)
	}
	ins, err := d.ImageInspect(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != ins.ID {
		t.Errorf("ImageInfo.ID = %q, want %q", info.ID, ins.ID)
	}
	_, err = serve.EnsureImage(ctx, d, "sparklane-test/not-there:never", "dgx7")
	if typ, _ := fault.TypeOf(err); typ != fault.ImageMissing {
		t.Fatalf("EnsureImage of a missing image: %v, want ImageMissing", err)
	}
	if !strings.Contains(err.Error(), "sparklane-test/not-there:never missing on node dgx7") {
		t.Errorf("ImageMissing error does not name image and node: %v", err)
	}
	_, err = serve.EnsureImage(ctx, d, "sparklane-test/not-there:never", "dgx7", `builder docker, build_args ["--tf5"]`)
	if typ, _ := fault.TypeOf(err); typ != fault.ImageMissing || !strings.Contains(err.Error(), "missing on node dgx7") || !strings.Contains(err.Error(), `as the recipe says (builder docker, build_args ["--tf5"])`) {
		t.Errorf("ImageMissing with the recipe's build: %v", err)
	}
}

func TestStartRankIdempotentAndRecreates(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	s := spec(lane, "serve-n1", 0, "hash-a", img, "sleep")
	s.Env = map[string]string{"NODE_RANK": "0", "TP_SIZE": "2"}

	first, err := serve.StartRank(ctx, d, s)
	if err != nil {
		t.Fatalf("StartRank: %v", err)
	}
	if !first.Created || first.Name != serve.ContainerName(lane, 0) {
		t.Fatalf("first StartRank = %+v, want created %s", first, serve.ContainerName(lane, 0))
	}
	ins, err := d.ContainerInspect(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	l := ins.Config.Labels
	if l[contract.LabelLane] != lane || l[contract.LabelNode] != "serve-n1" || l[contract.LabelRank] != "0" || l[contract.LabelRecipeHash] != "hash-a" || l["sparklane.test"] != "1" {
		t.Errorf("labels = %v", l)
	}
	if !ins.HostConfig.NetworkMode.IsHost() || string(ins.HostConfig.IpcMode) != "host" || ins.HostConfig.RestartPolicy.Name != "no" {
		t.Errorf("host config: network %q ipc %q restart %q; want host, host, no", ins.HostConfig.NetworkMode, ins.HostConfig.IpcMode, ins.HostConfig.RestartPolicy.Name)
	}
	if !containsAll(ins.Config.Env, "NODE_RANK=0", "TP_SIZE=2") {
		t.Errorf("env = %v", ins.Config.Env)
	}

	again, err := serve.StartRank(ctx, d, s)
	if err != nil {
		t.Fatalf("second StartRank: %v", err)
	}
	if again.Created || again.ID != first.ID {
		t.Errorf("second StartRank = %+v, want a no-op on %s", again, first.ID)
	}

	s.RecipeHash = "hash-b"
	changed, err := serve.StartRank(ctx, d, s)
	if err != nil {
		t.Fatalf("StartRank with a new hash: %v", err)
	}
	if !changed.Created || changed.ID == first.ID {
		t.Errorf("StartRank with a new hash = %+v, want a new container", changed)
	}
	cs := listLane(t, d, lane)
	if len(cs) != 1 || cs[0].ID != changed.ID || cs[0].Labels[contract.LabelRecipeHash] != "hash-b" {
		t.Errorf("after recreate the lane has %d containers (%+v), want only the new one", len(cs), cs)
	}

	// Same hash, but the container exited: it is recreated.
	ex := spec(lane, "serve-n1", 1, "hash-b", img, "exit:0")
	r1, err := serve.StartRank(ctx, d, ex)
	if err != nil {
		t.Fatal(err)
	}
	waitRankExited(t, d, r1.ID)
	r1b, err := serve.StartRank(ctx, d, ex)
	if err != nil {
		t.Fatal(err)
	}
	if !r1b.Created || r1b.ID == r1.ID {
		t.Errorf("StartRank over an exited container = %+v, want recreated (old %s)", r1b, r1.ID)
	}
}

func waitRankExited(t *testing.T, d *client.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	okc, errc := d.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case <-okc:
	case err := <-errc:
		t.Fatalf("wait for %s: %v", id, err)
	}
}

func TestForeignContainerNotTouched(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	name := serve.ContainerName(lane, 0)
	c, err := d.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"sleep"}, Labels: testLabels}, nil, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
	_, err = serve.StartRank(ctx, d, spec(lane, "serve-n1", 0, "h", img, "sleep"))
	if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec || !strings.Contains(err.Error(), name) {
		t.Fatalf("StartRank over a foreign container: %v, want InvalidSpec naming %s", err, name)
	}
	if _, err := d.ContainerInspect(ctx, c.ID); err != nil {
		t.Errorf("foreign container was removed: %v", err)
	}
}

func TestBindsReadOnlyAndMissingSource(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	root := t.TempDir()
	ro, rw := filepath.Join(root, "ro"), filepath.Join(root, "rw")
	for _, d := range []string{ro, rw} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	r0 := spec(lane, "serve-n1", 0, "h", img, "write:/weights/probe", "exit:0")
	r0.Mounts, r0.Roots = []contract.Mount{{Src: ro, Dst: "/weights", ReadOnly: true}}, []string{root}
	r1 := spec(lane, "serve-n1", 1, "h", img, "write:/cache/probe", "exit:0")
	r1.Mounts, r1.Roots = []contract.Mount{{Src: rw, Dst: "/cache"}}, []string{root}
	for _, s := range []serve.RankSpec{r0, r1} {
		if _, err := serve.StartRank(ctx, d, s); err != nil {
			t.Fatalf("StartRank rank %d: %v", s.Rank, err)
		}
	}
	st := waitExited(t, d, lane, 2)
	if st[0].Rank != 0 || st[0].ExitCode != 3 || !strings.Contains(strings.Join(st[0].Logs, "\n"), "read-only file system") {
		t.Errorf("rank 0 wrote into a read-only bind: %+v", st[0])
	}
	if _, err := os.Stat(filepath.Join(ro, "probe")); err == nil {
		t.Errorf("file appeared in the read-only source %s", ro)
	}
	if st[1].Rank != 1 || st[1].ExitCode != 0 {
		t.Errorf("rank 1 could not write its read-write bind: %+v", st[1])
	}
	if _, err := os.Stat(filepath.Join(rw, "probe")); err != nil {
		t.Errorf("read-write bind: %v", err)
	}

	missing := filepath.Join(root, "staged", "not-yet")
	bad := spec(lane, "serve-n1", 2, "h", img, "sleep")
	bad.Mounts, bad.Roots = []contract.Mount{{Src: missing, Dst: "/models", ReadOnly: true}}, []string{root}
	_, err := serve.StartRank(ctx, d, bad)
	if typ, _ := fault.TypeOf(err); typ != fault.SourceMissing || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "/models") {
		t.Errorf("StartRank with a missing bind source: %v, want SourceMissing naming %s and /models", err, missing)
	}
	bad.CreateSources = []string{missing}
	bad.Argv = []string{"write:/models/x", "exit:0"}
	bad.Mounts[0].ReadOnly = false
	if _, err := serve.StartRank(ctx, d, bad); err != nil {
		t.Fatalf("StartRank with a source it may create: %v", err)
	}
	waitRankExited(t, d, serve.ContainerName(lane, 2))
	if _, err := os.Stat(filepath.Join(missing, "x")); err != nil {
		t.Errorf("created bind source was not mounted: %v", err)
	}
}

func TestStopLaneLeavesNothing(t *testing.T) {
	d, img, lane := dockerLane(t)
	other := newLane(t, d)
	ctx := context.Background()
	specs := []serve.RankSpec{
		spec(lane, "serve-n1", 0, "h", img, "sleep"),
		spec(lane, "serve-n2", 1, "h", img, "ignoreterm", "sleep"), // must be killed
		spec(lane, "serve-n2", 2, "h", img, "exit:1"),              // already exited
		spec(other, "serve-n1", 0, "h", img, "sleep"),              // another lane: kept
	}
	for _, s := range specs {
		if _, err := serve.StartRank(ctx, d, s); err != nil {
			t.Fatalf("StartRank %s r%d: %v", s.Lane, s.Rank, err)
		}
	}
	occupied, err := serve.LaneContainers(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(occupied[lane]) < 2 || len(occupied[other]) != 1 {
		t.Errorf("LaneContainers = %v, want %s with its running ranks and %s with one", occupied, lane, other)
	}
	start := time.Now()
	res, err := serve.StopLane(ctx, d, lane, time.Second)
	if err != nil {
		t.Fatalf("StopLane: %v", err)
	}
	took := time.Since(start)
	want := []string{serve.ContainerName(lane, 0), serve.ContainerName(lane, 1), serve.ContainerName(lane, 2)}
	if strings.Join(res.Stopped, ",") != strings.Join(want, ",") {
		t.Errorf("Stopped = %v, want %v", res.Stopped, want)
	}
	if left := listLane(t, d, lane); len(left) != 0 {
		t.Errorf("containers left after StopLane: %+v", left)
	}
	// The rank ignoring SIGTERM got its grace period, then SIGKILL.
	if took < time.Second || took > 20*time.Second {
		t.Errorf("StopLane took %s with a 1s grace period and a rank ignoring SIGTERM", took)
	}
	if len(listLane(t, d, other)) != 1 {
		t.Errorf("StopLane(%s) touched lane %s", lane, other)
	}
	// Stopping an empty lane is fine and stops nothing.
	res, err = serve.StopLane(ctx, d, lane, time.Second)
	if err != nil || len(res.Stopped) != 0 {
		t.Errorf("second StopLane = %+v, %v; want nothing to do", res, err)
	}
}

func TestStopAllByNode(t *testing.T) {
	d := dockerClient(t)
	img := testImage(t, d)
	a, b := newLane(t, d), newLane(t, d)
	ctx := context.Background()
	suffix := a[len(a)-8:]
	n1, n2 := "sa1-"+suffix, "sa2-"+suffix
	for _, s := range []serve.RankSpec{
		spec(a, n1, 0, "h", img, "sleep"),
		spec(b, n1, 0, "h", img, "sleep"),
		spec(b, n2, 1, "h", img, "sleep"),
	} {
		startRank(t, ctx, d, s)
	}
	res, err := serve.StopAll(ctx, d, serve.StopFilter{Nodes: []string{n1}, Timeout: time.Second})
	if err != nil {
		t.Fatalf("StopAll: %v", err)
	}
	want := []string{serve.ContainerName(a, 0), serve.ContainerName(b, 0)}
	if strings.Join(res.Stopped, ",") != strings.Join(want, ",") && strings.Join(res.Stopped, ",") != strings.Join([]string{want[1], want[0]}, ",") {
		t.Errorf("StopAll stopped %v, want %v", res.Stopped, want)
	}
	if len(listLane(t, d, a)) != 0 {
		t.Errorf("lane %s on %s survived StopAll", a, n1)
	}
	left := listLane(t, d, b)
	if len(left) != 1 || left[0].Labels[contract.LabelNode] != n2 {
		t.Errorf("after StopAll(%s) lane %s has %+v, want only its %s rank", n1, b, left, n2)
	}
}

func TestInspectLaneExitCodeAndLogs(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	startRank(t, ctx, d, spec(lane, "serve-n1", 0, "h", img, "print:30", "nap:200", "eprint:fatal: weights corrupt", "exit:5"))
	startRank(t, ctx, d, spec(lane, "serve-n2", 1, "h", img, "print:3", "sleep"))
	r0 := serve.ContainerName(lane, 0)
	waitRankExited(t, d, r0)
	st, err := serve.InspectLane(ctx, d, lane, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 {
		t.Fatalf("InspectLane returned %d ranks: %+v", len(st), st)
	}
	got := st[0]
	if got.Name != r0 || got.Rank != 0 || got.Node != "serve-n1" || got.State != "exited" || got.Running || got.ExitCode != 5 {
		t.Errorf("rank 0 = %+v, want exited with code 5", got)
	}
	var want []string
	for i := 22; i <= 30; i++ {
		want = append(want, fmt.Sprintf("line-%d", i))
	}
	want = append(want, "fatal: weights corrupt")
	if strings.Join(got.Logs, "|") != strings.Join(want, "|") {
		t.Errorf("rank 0 logs = %q, want %q", got.Logs, want)
	}
	if st[1].Rank != 1 || !st[1].Running || st[1].State != "running" {
		t.Errorf("rank 1 = %+v, want running", st[1])
	}
}

func TestRunHooks(t *testing.T) {
	root := t.TempDir()
	receipts := filepath.Join(root, "run", "receipts")
	if err := os.MkdirAll(filepath.Join(receipts, "sub", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.done", "sub/b.done", "sub/deep/c"} {
		if err := os.WriteFile(filepath.Join(receipts, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fresh := filepath.Join(root, "jit", "cache")
	res, err := serve.RunHooks(context.Background(), serve.HooksInput{
		Clear:    []string{receipts, fresh},
		Roots:    []string{root},
		Commands: []string{"echo rank=$NODE_RANK; pwd", "echo to-stderr >&2; test -e " + receipts + " && echo present || echo absent"},
		Env:      map[string]string{"NODE_RANK": "3"},
		Dir:      root,
	})
	if err != nil {
		t.Fatalf("RunHooks: %v", err)
	}
	// Removed, not emptied: a strict-on-exists receipt writer creates it.
	if _, err := os.Lstat(receipts); !os.IsNotExist(err) {
		t.Errorf("cleared dir %s: %v; want it absent", receipts, err)
	}
	if _, err := os.Lstat(fresh); !os.IsNotExist(err) {
		t.Errorf("missing clear dir %s was created: %v", fresh, err)
	}
	if len(res.Cleared) != 2 || res.Cleared[0] != (serve.Cleared{Path: receipts, Files: 3, Bytes: 3}) || res.Cleared[1] != (serve.Cleared{Path: fresh, Absent: true}) {
		t.Errorf("Cleared = %+v", res.Cleared)
	}
	if len(res.Outputs) != 2 || res.Outputs[0].Output != "rank=3\n"+root+"\n" || res.Outputs[1].Output != "to-stderr\nabsent\n" || res.Outputs[1].Exit != 0 {
		t.Errorf("outputs = %+v", res.Outputs)
	}

	// A failing hook stops the rest and names itself, its exit code and output.
	res, err = serve.RunHooks(context.Background(), serve.HooksInput{Commands: []string{
		"true", "head -c 10000 /dev/zero | tr '\\0' 'y'; echo; echo FileExistsError: receipt >&2; exit 4", "echo never",
	}})
	if err == nil {
		t.Fatal("failing hook returned no error")
	}
	for _, want := range []string{"hook 2", "exited 4", "FileExistsError: receipt"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("hook error does not say %q: %.300s", want, err)
		}
	}
	if len(res.Outputs) != 2 || res.Outputs[1].Exit != 4 || len(res.Outputs[1].Output) != serve.HookOutputLimit || !strings.HasSuffix(res.Outputs[1].Output, "FileExistsError: receipt\n") {
		t.Errorf("failing hook result: %d outputs, exit %d, output %d bytes", len(res.Outputs), res.Outputs[len(res.Outputs)-1].Exit, len(res.Outputs[len(res.Outputs)-1].Output))
	}

	// Refuses to clear paths outside the node's roots.
	if _, err := serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{"/tmp"}, Roots: []string{root}}); err == nil {
		t.Error("RunHooks cleared /tmp")
	}
}

func TestRunHooksTimeout(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	start := time.Now()
	_, err := serve.RunHooks(context.Background(), serve.HooksInput{
		Commands: []string{"sleep 60 & echo $! > " + pidFile + "; echo started; sleep 30"},
		Timeout:  500 * time.Millisecond,
	})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "timed out after 500ms") || !strings.Contains(err.Error(), "started") {
		t.Fatalf("hook past its timeout: %v", err)
	}
	if took > 5*time.Second {
		t.Errorf("hook timeout took %s", took)
	}
	// The whole process group was killed: the background child, which
	// would sleep a minute, is gone (or a zombie awaiting its reaper).
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	stat := "/proc/" + strings.TrimSpace(string(b)) + "/stat"
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := os.ReadFile(stat)
		if err != nil {
			break // reaped
		}
		if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			break // killed, not yet reaped
		}
		if time.Now().After(deadline) {
			t.Fatalf("a child of the timed-out hook is still running 10s later: %s", st)
		}
		runtime.Gosched()
	}
}

func containsAll(have []string, want ...string) bool {
	set := map[string]bool{}
	for _, h := range have {
		set[h] = true
	}
	for _, w := range want {
		if !set[w] {
			return false
		}
	}
	return true
}
