package fleete2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/fleet"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/simimage"
	"github.com/sparklane/sparklane/internal/testkit/blobtest"
	"github.com/sparklane/sparklane/internal/testkit/diskuse"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
	"github.com/sparklane/sparklane/internal/testkit/testfleet"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
)

const (
	// chunk is sparse-rows' block: at most one is packed again per file
	// after an outage.
	chunk = 64 << 20
	// pauseAt is where the staging fault point holds a node's pass when
	// the test takes that node's release file away: past the model's
	// 32 MiB mirror, inside the big table's 192 MiB per-rank pack.
	pauseAt = 96 << 20
	// releaseFile (on each node) lets staging passes through the fault
	// point; a test removes it on one node to hold that node mid-pack.
	releaseFile = "/run/sparklane/test-release"
	// bigRows is the big engram table: 3 ranks pack 192 MiB each.
	bigRows = 3 * (192 << 20) / 256
	// imageHeld (on each node) is where the image fault point says it
	// holds a transfer: a receiver that made realFleet.imageHoldAt of an
	// image's layers durable while releaseFile is absent holds there.
	imageHeld = "/run/sparklane/test-image-held"
)

// realFleet is a 3-host network-namespace fleet, each host with its own
// dockerd holding the engine-sim image, the control service of this test
// in this process (embedded server, reverse SSH tunnels to the hosts), and
// node workers put on the hosts only by `starter fleet install`: the test
// worker (--worker-binary), whose staging fault point each host's node.env
// arms.
type realFleet struct {
	t       *testing.T
	tf      *testfleet.Fleet
	dir     string
	cfgFile string
	state   string
	image   string
	c       client.Client
	// worker is the test worker binary `fleet install` puts on the hosts.
	worker string
	// imageHoldAt is the layer count the image fault point holds a
	// receive at: all but the last of an image of the engine-sim image's
	// layers and 4 more (dockerdStoppedMidImageTransfer).
	imageHoldAt int
}

func (f *realFleet) starter(args ...string) (int, string, string) {
	f.t.Helper()
	return starter(f.t, append([]string{"--config", f.cfgFile}, args...)...)
}

// starterJSON runs `starter --json ARGS` and decodes its one JSON document.
func (f *realFleet) starterJSON(v any, args ...string) (int, string) {
	f.t.Helper()
	code, out, errOut := f.starter(append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		f.t.Fatalf("starter %v: exit %d, output is not one JSON document (%v)\n%s\n%s", args, code, err, out, errOut)
	}
	return code, errOut
}

// fleetRecipe is a sim lane on the test hosts: the demo's engine-sim lane
// with a hub-mirror block and a sparse-rows block staged under the node's
// /mnt/nvme/sl/DIR, the NAS at /mnt/nas on every host.
func fleetRecipe(name, cluster, image string, port int, dir, tables string, layers string, extra string) string {
	return recipeAt(name, cluster, image, port, dir, tables, layers, extra, testfleet.NASPath)
}

// recipeAt is fleetRecipe with the NAS at nasPath.
func recipeAt(name, cluster, image string, port int, dir, tables string, layers string, extra, nasPath string) string {
	return fmt.Sprintf(`name = %[1]q
cluster = %[2]q
runtime = "sim"
image = %[3]q
model = %[4]q
command = "/engine-sim /hub --served-model-name {model} --host 0.0.0.0 --port {port} --tp {tensor_parallel} --decode-tps {decode_tps} --prefill-tps 4000 --context-length 16384 {extra_args}"
%[9]s
[defaults]
port = %[5]d
dist_port = %[6]d
decode_tps = 120
extra_args = ""

[[mounts]]
src = "%[11]s/hub"
dst = "/hub"
read_only = true

[[staging]]
kind = "hub-mirror"
id = "weights"
src = "%[11]s/hub"
dst = "/mnt/nvme/sl/%[7]s/hf"
repos = [%[4]q]
verify = "sampled"

[[staging]]
kind = "sparse-rows"
id = "engram"
format = "packed"
src = %[8]q
dst = "/mnt/nvme/sl/%[7]s/engram"
tensors = ["model.layers.{L}.engram.table"]
layers = [%[10]s]
mount = "/engram"
env = "SPARK_ENGRAM_DIR"

[hooks]
clear = ["/mnt/nvme/sl/%[7]s/receipts"]

[probe]
ready = "5m"
decode_prompt_tokens = 128
decode_max_tokens = 32

[[probe.smoke]]
prompt = "19+23"
expect = "42"

[bench]
prompt_lengths = [256]
depths = [0]
concurrency = [1]
gen_tokens = 16
`, name, cluster, image, demo.ModelRepo, port, port+1000, dir, tables, extra, layers, nasPath)
}

func newRealFleet(t *testing.T) *realFleet {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tf := testfleet.New(t, testfleet.Options{Name: "flreal", Nodes: 3, Docker: true})
	f := &realFleet{t: t, tf: tf, dir: t.TempDir()}
	f.state = filepath.Join(f.dir, "state")
	built := buildTestWorker(t, f.dir)

	// The engine-sim image, built from source on this machine's engine
	// and loaded into h1's own dockerd only (docker save | docker load):
	// the first cutover's stage brings it to h2 and h3 (internal/engine/images).
	hostDocker, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		t.Fatalf("Docker is required (the engine-sim image is built on it): %v", err)
	}
	defer hostDocker.Close()
	f.image, err = simimage.Build(ctx, hostDocker, simimage.Options{})
	if err != nil {
		t.Fatalf("build engine-sim: %v", err)
	}
	sim, err := hostDocker.ImageInspect(ctx, f.image)
	if err != nil {
		t.Fatal(err)
	}
	f.imageHoldAt = len(sim.RootFS.Layers) + layeredLayers - 1
	for _, n := range tf.Nodes() {
		if n.Index == 1 {
			rc, err := hostDocker.ImageSave(ctx, []string{f.image})
			if err != nil {
				t.Fatal(err)
			}
			nd := nodeDocker(t, n)
			resp, err := nd.ImageLoad(ctx, rc)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			rc.Close()
			if err != nil {
				t.Fatalf("load %s into %s's dockerd: %v", f.image, n.Name, err)
			}
		}
		// Each host's staging root and the fault point's release file
		// (present: passes go through), with the node service's
		// environment file arming the test worker's fault point.
		for p, body := range map[string]string{
			"/mnt/nvme/sl/.keep": "",
			releaseFile:          "",
			fleet.DefaultLayout().EnvFile(): fmt.Sprintf("%s=%d\n%s=%s\n%s=%d\n%s=%s\n", testworker.PauseAtEnv, pauseAt, testworker.ReleaseEnv, releaseFile,
				testworker.ImageHoldAtEnv, f.imageHoldAt, testworker.ImageMarkerEnv, imageHeld),
		} {
			hp, err := tf.HostPath(n, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(hp, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The NAS: a 32 MiB model, the demo's small engram tables and one big
	// table, seen read-only by every host at /mnt/nas.
	nas, err := demo.GenerateNAS(tf.NASDir(), 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	blobtest.EngramTables(t, filepath.Join(tf.NASDir(), "tables"), map[int]int64{1: bigRows})
	small := strings.Replace(nas.EngramSnapshot, tf.NASDir(), testfleet.NASPath, 1)
	big := testfleet.NASPath + "/tables"

	recipes := filepath.Join(f.dir, "recipes")
	if err := os.MkdirAll(recipes, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"fl-a": fleetRecipe("fl-a", "fl3", f.image, 18100, "a", small, "1, 3", ""),
		"fl-b": fleetRecipe("fl-b", "fl3", f.image, 18110, "b", big, "1", ""),
		"fl-c": fleetRecipe("fl-c", "fl2", f.image, 18120, "c", small, "1, 3", ""),
		"fl-d": fleetRecipe("fl-d", "fl3", f.image, 18130, "d", big, "1", "node_outage_budget = \"20s\"\n"),
		"fl-e": fleetRecipe("fl-e", "fl1", f.image, 18140, "e", small, "1, 3", ""),
	} {
		if err := os.WriteFile(filepath.Join(recipes, name+".toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "state_dir = %q\nrecipes_dir = %q\nhf_cache_dir = \"/mnt/nas/hub\"\nshared_roots = [%q]\nprobe_grace = \"2s\"\n\n[temporal]\nport = %d\nui_port = -1\n\n",
		f.state, recipes, testfleet.NASPath, sshdtest.FreePort(t))
	for _, n := range tf.Nodes() {
		fmt.Fprintf(&b, "[[nodes]]\nname = %q\nssh = %q\nknown_hosts = %q\nidentity = %q\naddress = %q\ndocker = %q\nroots = [\"/mnt/nvme/sl\"]\n\n",
			n.Name, n.SSHAddr(), tf.KnownHostsFile(), tf.IdentityFile(), n.IP, "unix://"+testfleet.NodeDockerSocket)
	}
	b.WriteString("[[clusters]]\nname = \"fl3\"\nnodes = [\"h1\", \"h2\", \"h3\"]\n\n[[clusters]]\nname = \"fl2\"\nnodes = [\"h1\", \"h2\"]\n\n[[clusters]]\nname = \"fl1\"\nnodes = [\"h3\"]\n")
	f.cfgFile = filepath.Join(f.dir, "sparklane.toml")
	if err := os.WriteFile(f.cfgFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f.worker = built()
	// The control service of this state_dir, in this process.
	done := runControl(t, f.cfgFile)
	waitControl(t, f.state, done)
	o, _ := control.Find(f.state)
	f.c, err = client.Dial(client.Options{HostPort: o.Frontend, Namespace: "default", Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.c.Close)
	return f
}

type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}

func nodeDocker(t *testing.T, n *testfleet.Node) *dockerclient.Client {
	t.Helper()
	c, err := dockerclient.NewClientWithOpts(dockerclient.WithHost("unix://"+n.DockerSocket), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// running lists the running containers of lane on host n's own dockerd.
func (f *realFleet) running(n *testfleet.Node, lane string) []string {
	f.t.Helper()
	cs, err := nodeDocker(f.t, n).ContainerList(context.Background(), container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "sparklane.lane="+lane))})
	if err != nil {
		f.t.Fatalf("containers on %s: %v", n.Name, err)
	}
	var names []string
	for _, c := range cs {
		names = append(names, strings.TrimPrefix(c.Names[0], "/"))
	}
	return names
}

// setRelease lets staging passes on host n through the fault point (on),
// or holds the next one there (off).
func (f *realFleet) setRelease(n *testfleet.Node, on bool) {
	f.t.Helper()
	hp, err := f.tf.HostPath(n, releaseFile)
	if err != nil {
		f.t.Fatal(err)
	}
	if on {
		err = os.WriteFile(hp, nil, 0o644)
	} else {
		err = os.Remove(hp)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// stopService stops host n's node service as `systemctl stop` would: the
// supervisor gets SIGTERM and passes it to the worker.
func (f *realFleet) stopService(n *testfleet.Node) {
	f.t.Helper()
	l := fleet.DefaultLayout()
	out, err := f.tf.SSH(n, fmt.Sprintf(`pid=$(cat %s) && kill -TERM "$pid" && while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done`, l.PIDFile()))
	if err != nil {
		f.t.Fatalf("stop the node service on %s: %v\n%s", n.Name, err, out)
	}
	if ps := nodeProcs(f.tf, n, l.Binary()); len(ps) > 0 {
		f.t.Fatalf("the worker still runs on %s after its service stopped: %v", n.Name, ps)
	}
}

// install runs `starter fleet --worker-binary TESTWORKER install [NODE...]`
// and checks every node polls.
func (f *realFleet) install(nodes ...string) []installRow {
	f.t.Helper()
	var rows []installRow
	code, errOut := f.starterJSON(&rows, append([]string{"fleet", "--worker-binary", f.worker, "install", "--wait", "120s"}, nodes...)...)
	if code != 0 {
		f.t.Fatalf("fleet install %v: exit %d: %+v\n%s", nodes, code, rows, errOut)
	}
	for _, r := range rows {
		if r.Poller == "" {
			f.t.Fatalf("fleet install: %s has no poller: %+v", r.Node, r)
		}
	}
	return rows
}

// progress is the latest progress query answer of workflow id.
func (f *realFleet) progress(ctx context.Context, id string) (contract.Progress, error) {
	var p contract.Progress
	v, err := f.c.QueryWorkflow(ctx, id, "", contract.ProgressQuery)
	if err == nil {
		err = v.Get(&p)
	}
	return p, err
}

// until polls cond every 200 ms until it holds, failing the test after d.
func (f *realFleet) until(d time.Duration, what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pausedAt waits until the StageBlock of stage/LANE/NODE heartbeats that
// it holds at the fault point, and returns that progress.
func (f *realFleet) pausedAt(ctx context.Context, lane, nodeName string) contract.StageProgress {
	f.t.Helper()
	id := contract.StageNodeID(lane, nodeName)
	var held contract.StageProgress
	f.until(5*time.Minute, id+" holding at the fault point", func() bool {
		d, err := f.c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return false
		}
		for _, pa := range d.GetPendingActivities() {
			if pa.GetActivityType().GetName() != "StageBlock" || pa.GetHeartbeatDetails() == nil {
				continue
			}
			var p contract.StageProgress
			if converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &p) == nil && p.Paused {
				held = p
				return true
			}
		}
		return false
	})
	return held
}

// waiting waits until workflow id's progress shows a step waiting for
// nodeName, and returns that step's detail.
func (f *realFleet) waiting(ctx context.Context, id, nodeName string) string {
	f.t.Helper()
	var detail string
	f.until(3*time.Minute, id+" showing that it waits for "+nodeName, func() bool {
		p, err := f.progress(ctx, id)
		if err != nil {
			return false
		}
		for _, s := range p.Steps {
			if s.Status == contract.StepWaiting && s.Node == nodeName && len(p.Waiting) == 1 && p.Waiting[0].Node == nodeName {
				detail = s.Detail
				return true
			}
		}
		return false
	})
	return detail
}

// background runs a starter command in a goroutine.
func (f *realFleet) background(args ...string) <-chan [3]string {
	ch := make(chan [3]string, 1)
	go func() {
		code, out, errOut := starter(f.t, append([]string{"--config", f.cfgFile}, args...)...)
		ch <- [3]string{fmt.Sprint(code), out, errOut}
	}()
	return ch
}

func decodeCutover(t *testing.T, r [3]string) contract.CutoverResult {
	t.Helper()
	var res contract.CutoverResult
	if err := json.Unmarshal([]byte(r[1]), &res); err != nil {
		t.Fatalf("cutover: exit %s, no JSON result (%v)\n%s\n%s", r[0], err, r[1], r[2])
	}
	return res
}

// stageBlock is node's result for block in a cutover's staging.
func stageBlock(t *testing.T, res contract.CutoverResult, nodeName, block string) contract.BlockResult {
	t.Helper()
	for _, s := range res.Stage {
		if s.Node != nodeName {
			continue
		}
		for _, b := range s.Blocks {
			if b.Block == block {
				return b.Result
			}
		}
	}
	t.Fatalf("no stage result for %s on %s in %+v", block, nodeName, res.Stage)
	return contract.BlockResult{}
}

// saveHistory writes workflow id's history into the replay corpus when
// SPARKLANE_WRITE_HISTORIES is set (see workflows/versions.go).
func (f *realFleet) saveHistory(id, name string) {
	f.t.Helper()
	if os.Getenv("SPARKLANE_WRITE_HISTORIES") == "" {
		return
	}
	it := f.c.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			f.t.Fatalf("history of %s: %v", id, err)
		}
		h.Events = append(h.Events, e)
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(h)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "..", "..", "workflows", "testdata", "histories", name+".json"), b, 0o644); err != nil {
		f.t.Fatal(err)
	}
	f.t.Logf("wrote history %s (%d events)", name, len(h.Events))
}

// The fleet tests on one 3-host fleet (hosts h1..h3 with their own
// network and mount namespaces, sshd and dockerd), in order: install →
// status → cutover; a [build] lane built on h1 and served on all three;
// an idle rolling upgrade; a node service stopped for
// 90 s mid-pack; a host's link down for 45 s during WaitReady; a node
// service down when serve reaches it; a node that never comes back;
// relay = false from install on, an image still moving between nodes;
// a node's dockerd stopped for 30 s mid-image-transfer.
func TestRealFleet(t *testing.T) {
	f := newRealFleet(t)
	t.Run("InstallStatusCutover", f.installStatusCutover)
	t.Run("BuildLaneServedOnAllThree", f.buildLaneServedOnAllThree)
	t.Run("UpgradeWhileIdle", f.upgradeWhileIdle)
	t.Run("NodeServiceStopped90sMidPack", f.nodeServiceStopped90sMidPack)
	t.Run("LinkDown45sDuringWaitReady", f.linkDown45sDuringWaitReady)
	t.Run("ServeWaitsForANodeService", f.serveWaitsForANodeService)
	t.Run("NodeNeverComesBack", f.nodeNeverComesBack)
	t.Run("RelayOffMovesTheImage", f.relayOffMovesTheImage)
	t.Run("DockerdStoppedMidImageTransfer", f.dockerdStoppedMidImageTransfer)
}

// installStatusCutover is TestRealFleet's subtest "InstallStatusCutover".
func (f *realFleet) installStatusCutover(t *testing.T) {
	h1 := f.tf.Node(1)
	// Status before anything is installed: not installed anywhere.
	var pre []fleet.NodeStatus
	if code, errOut := f.starterJSON(&pre, "fleet", "--worker-binary", f.worker, "status"); len(pre) != 3 || pre[0].Installed {
		t.Fatalf("fleet status before install: exit %d %+v\n%s", code, pre, errOut)
	}
	start := time.Now()
	rows := f.install()
	took := time.Since(start)
	if len(rows) != 3 {
		t.Fatalf("install rows: %+v", rows)
	}
	for _, r := range rows {
		if r.Binary != fleet.Uploaded || r.Run != fleet.Started || r.Manager != fleet.ManagerSupervisor {
			t.Fatalf("install on %s: %+v", r.Node, r)
		}
		var steps []string
		for _, s := range r.Steps {
			steps = append(steps, fmt.Sprintf("%s %.1fs", s.Step, s.Took.Seconds()))
		}
		t.Logf("install on %s: %.1f s (%s), polling after %.1f s", r.Node, r.Took.Seconds(), strings.Join(steps, ", "), r.PollWait.Seconds())
	}
	t.Logf("MEASURE fleet install on 3 nodes (%d MiB worker uploaded, config and supervisor written, started, polling): %.1f s", fileSize(t, f.worker)>>20, took.Seconds())
	start = time.Now()
	rows = f.install()
	for _, r := range rows {
		if r.Binary != fleet.Unchanged || r.Run != fleet.Running {
			t.Fatalf("second install on %s changed something: %+v", r.Node, r)
		}
	}
	t.Logf("MEASURE fleet install again on 3 nodes (nothing to change): %.1f s", time.Since(start).Seconds())
	var st []struct {
		fleet.NodeStatus
		Mismatch bool      `json:"mismatch"`
		LastPoll time.Time `json:"last_poll"`
	}
	if code, errOut := f.starterJSON(&st, "fleet", "--worker-binary", f.worker, "status"); code != 0 || len(st) != 3 {
		t.Fatalf("fleet status: exit %d %+v\n%s", code, st, errOut)
	}
	for _, s := range st {
		if s.State != "active" || s.Mismatch || s.LastPoll.IsZero() || s.BuildID != rows[0].BuildID {
			t.Fatalf("fleet status of %s: %+v", s.Node, s)
		}
	}
	code, out, errOut := f.starter("status")
	if code != 0 || strings.Count(out, "polling") < 3 {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("starter status:\n%s", out)

	f.dryRunImageStates(t)
	start = time.Now()
	r := <-f.background("--json", "cutover", "--lane", "fl-a", "--bench")
	res := decodeCutover(t, r)
	t.Logf("MEASURE cutover fl-a (3 hosts, cold staging, bench) on the netns fleet: %.1f s", time.Since(start).Seconds())
	if r[0] != "0" || !res.OK || res.Serve == nil || !res.Serve.Answers || res.Bench == nil {
		t.Fatalf("cutover fl-a: exit %s %+v\n%s", r[0], res, r[2])
	}
	if want := "http://" + h1.IP + ":18100"; !strings.HasPrefix(res.Serve.BaseURL, want) {
		t.Fatalf("the lane's API is %s, want the head host's IP (%s)", res.Serve.BaseURL, want)
	}
	for _, n := range f.tf.Nodes() {
		if got := f.running(n, "fl-a"); len(got) != 1 {
			t.Fatalf("%s's own dockerd runs %v for fl-a, want its rank", n.Name, got)
		}
	}
	// The image was on h1 only: the stage moved it to h2 and h3.
	want, err := nodeDocker(t, h1).ImageInspect(context.Background(), f.image)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range f.tf.Nodes()[1:] {
		got, err := nodeDocker(t, n).ImageInspect(context.Background(), f.image)
		if err != nil || got.ID != want.ID {
			t.Fatalf("%s has %s as %s (%v), want %s as on h1", n.Name, f.image, got.ID, err, want.ID)
		}
	}
	t.Logf("image step: %+v", res.Images)
	if len(res.Images) != 3 || res.Images[1].From != "h1" || res.Images[2].From != "h2" || res.Images[2].BytesIn == 0 {
		t.Fatalf("cutover's image step: %+v", res.Images)
	}
	t.Logf("probe %.1f tok/s decode at %s; bench: %s", res.Serve.Decode.DecodeTPS, res.Serve.BaseURL, res.Bench.Summary)
}

// dryRunImageStates: before the first cutover the image is in h1's own
// dockerd only, and the dry run says so per host, from each host's
// inventory — h1 "present ID", h2 and h3 "missing: has K of N layers, M
// would move (from …)" — as a completed run.
func (f *realFleet) dryRunImageStates(t *testing.T) {
	var d cli.DryRun
	if code, errOut := f.starterJSON(&d, "cutover", "--lane", "fl-a", "--dry-run"); code != 0 || len(d.Nodes) != 3 || d.StageError != "" {
		t.Fatalf("cutover --dry-run: exit %d %+v\n%s", code, d, errOut)
	}
	want, err := nodeDocker(t, f.tf.Node(1)).ImageInspect(context.Background(), f.image)
	if err != nil {
		t.Fatal(err)
	}
	missing := regexp.MustCompile(`^missing: has (\d+) of (\d+) layers, (\d+) would move \(from h[12]\)$`)
	for _, n := range d.Nodes {
		if n.Node == "h1" {
			if n.ImageState != "present "+contract.ShortID(want.ID) {
				t.Errorf("h1's image state %q, want present %s", n.ImageState, contract.ShortID(want.ID))
			}
			continue
		}
		m := missing.FindStringSubmatch(n.ImageState)
		if m == nil || m[2] != fmt.Sprint(len(want.RootFS.Layers)) {
			t.Errorf("%s's image state %q, want missing with the layers it has of %d and the node it would come from", n.Node, n.ImageState, len(want.RootFS.Layers))
		}
	}
	t.Logf("dry run image states: %s %q, %s %q, %s %q", d.Nodes[0].Node, d.Nodes[0].ImageState, d.Nodes[1].Node, d.Nodes[1].ImageState, d.Nodes[2].Node, d.Nodes[2].ImageState)
}

// buildLaneServedOnAllThree is TestRealFleet's subtest
// "BuildLaneServedOnAllThree": a lane whose image is on no host and whose
// recipe has [build] with a context on the NAS (engine-sim, FROM scratch,
// a marker file making the image new). The cutover builds it on the
// cluster's head h1, as its own step, moves it to h2 and h3, and the lane
// serves; each host's own dockerd then has the same image ID. It installs
// the node services first (a no-op after InstallStatusCutover), so it also
// runs alone (-run TestRealFleet/BuildLane).
func (f *realFleet) buildLaneServedOnAllThree(t *testing.T) {
	ctx := context.Background()
	f.install()
	mark := fmt.Sprintf("%x", time.Now().UnixNano())
	tag := "sparklane-test/fleet-built:" + mark
	hostDocker, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hostDocker.Close()
	dir := filepath.Join(f.tf.NASDir(), "engines", "fl-build-"+mark)
	if err := simimage.WriteContext(ctx, hostDocker, dir, simimage.Options{}, map[string]string{
		"marker": mark, "Dockerfile": simimage.Dockerfile + "COPY marker /marker\n"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range f.tf.Nodes() {
		if _, err := nodeDocker(t, n).ImageInspect(ctx, tag); err == nil {
			t.Fatalf("%s already has %s before the cutover", n.Name, tag)
		}
	}
	// fl-a's recipe (its staged blocks are reused) under another name,
	// port and image, with [build] on the NAS as every host sees it.
	src, err := os.ReadFile(filepath.Join(f.dir, "recipes", "fl-a.toml"))
	if err != nil {
		t.Fatal(err)
	}
	body := strings.NewReplacer(`name = "fl-a"`, `name = "fl-build"`, "image = "+fmt.Sprintf("%q", f.image), "image = "+fmt.Sprintf("%q", tag),
		"port = 18100", "port = 18150", "dist_port = 19100", "dist_port = 19150").Replace(string(src))
	body += fmt.Sprintf("\n[build]\ncontext = %q\n", testfleet.NASPath+"/engines/fl-build-"+mark)
	if err := os.WriteFile(filepath.Join(f.dir, "recipes", "fl-build.toml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	r := <-f.background("--json", "cutover", "--lane", "fl-build")
	res := decodeCutover(t, r)
	t.Logf("MEASURE cutover fl-build (image built on h1 from the NAS, moved to h2 and h3) on the netns fleet: %.1f s", time.Since(start).Seconds())
	if r[0] != "0" || !res.OK || res.Serve == nil || !res.Serve.Answers {
		t.Fatalf("cutover fl-build: exit %s %+v\n%s", r[0], res, r[2])
	}
	if res.Built == nil || res.Built.Node != "h1" || res.Built.ID == "" {
		t.Fatalf("cutover fl-build's build: %+v, want one on h1", res.Built)
	}
	for _, n := range f.tf.Nodes() {
		got, err := nodeDocker(t, n).ImageInspect(ctx, tag)
		if err != nil || got.ID != res.Built.ID {
			t.Fatalf("%s has %s as %q (%v), want the ID built on h1, %s", n.Name, tag, got.ID, err, res.Built.ID)
		}
		if got := f.running(n, "fl-build"); len(got) != 1 {
			t.Fatalf("%s's own dockerd runs %v for fl-build, want its rank", n.Name, got)
		}
	}
	// The build is its own step of the run: in the result's steps, and
	// one BuildImage activity on h1's queue whose summary says so.
	var step *contract.Step
	for i := range res.Steps {
		if res.Steps[i].Name == "image build "+tag {
			step = &res.Steps[i]
		}
	}
	if step == nil || step.Node != "h1" || step.Status != contract.StepDone || step.Detail != res.Built.ID {
		t.Fatalf("the build step %+v in %+v, want one done on h1 with the built ID", step, res.Steps)
	}
	var builds []string
	it := f.c.GetWorkflowHistory(ctx, contract.CutoverID("fl3"), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "BuildImage" {
			var summary string
			_ = converter.GetDefaultDataConverter().FromPayload(e.GetUserMetadata().GetSummary(), &summary)
			builds = append(builds, a.GetTaskQueue().GetName()+" "+summary)
		}
	}
	if len(builds) != 1 || builds[0] != "node.h1 h1: build "+tag {
		t.Fatalf("BuildImage in the history of %s: %q, want one on node.h1", contract.CutoverID("fl3"), builds)
	}
	t.Logf("built %s on h1 in %.1f s (%s), image step %+v", tag, step.Seconds(), res.Built.ID, res.Images)
}

// upgradeWhileIdle is TestRealFleet's subtest "UpgradeWhileIdle".
func (f *realFleet) upgradeWhileIdle(t *testing.T) {
	b, err := os.ReadFile(f.worker)
	if err != nil {
		t.Fatal(err)
	}
	worker2 := filepath.Join(f.dir, "worker2")
	if err := os.WriteFile(worker2, append(b, []byte("\nsparklane test build 2\n")...), 0o755); err != nil {
		t.Fatal(err)
	}
	id2, err := fleet.BuildID(worker2)
	if err != nil {
		t.Fatal(err)
	}
	var rows []installRow
	if code, errOut := f.starterJSON(&rows, "fleet", "--worker-binary", worker2, "upgrade", "--wait", "120s"); code != 0 || len(rows) != 3 {
		t.Fatalf("upgrade: exit %d %+v\n%s", code, rows, errOut)
	}
	for i, r := range rows {
		if r.Node != f.tf.Nodes()[i].Name || r.Binary != fleet.Uploaded || r.Run != fleet.Restarted || r.Poller == "" || r.BuildID != id2 {
			t.Fatalf("upgrade row %d: %+v", i, r)
		}
	}
	type status struct {
		fleet.NodeStatus
		ControlBuildID string `json:"control_build_id"`
		Mismatch       bool   `json:"mismatch"`
	}
	var st []status
	f.starterJSON(&st, "fleet", "--worker-binary", worker2, "status")
	for _, s := range st {
		if s.BuildID != id2 || s.ControlBuildID != id2 || s.Mismatch || s.State != "active" {
			t.Fatalf("status after the upgrade, against the new build: %+v", s)
		}
	}
	// Against the build they were installed with the nodes now differ:
	// said so.
	st = nil
	f.starterJSON(&st, "fleet", "--worker-binary", f.worker, "status")
	for _, s := range st {
		if s.BuildID != id2 || s.ControlBuildID == id2 || !s.Mismatch {
			t.Fatalf("status against the control's build: %+v", s)
		}
	}
	_, out, _ := f.starter("fleet", "--worker-binary", worker2, "status")
	t.Logf("fleet status after the upgrade:\n%s", out)
	if !strings.Contains(out, id2[:12]) {
		t.Fatalf("fleet status does not show the build %s:\n%s", id2[:12], out)
	}
}

// nodeServiceStopped90sMidPack is TestRealFleet's subtest "NodeServiceStopped90sMidPack".
func (f *realFleet) nodeServiceStopped90sMidPack(t *testing.T) {
	ctx := context.Background()
	h2 := f.tf.Node(2)
	f.setRelease(h2, false)
	run := f.background("--json", "cutover", "--lane", "fl-b")
	held := f.pausedAt(ctx, "fl-b", "h2")
	f.stopService(h2)
	down := time.Now()
	dst, err := f.tf.HostPath(h2, "/mnt/nvme/sl/b/engram")
	if err != nil {
		t.Fatal(err)
	}
	onDisk := diskuse.WrittenBytes(t, dst, sparserows.PackedHeaderSize)
	f.setRelease(h2, true)
	detail := f.waiting(ctx, contract.StageNodeID("fl-b", "h2"), "h2")
	if !strings.Contains(detail, "waiting for node h2 (down ") {
		t.Fatalf("waiting step detail %q", detail)
	}
	t.Logf("held at %s of %s; service stopped; progress: %q", contract.HumanBytes(held.BytesDone), contract.HumanBytes(held.BytesTotal), detail)
	// The outage lasts 90 s, then the service is started again the
	// only way workers get onto these hosts: fleet install.
	time.Sleep(time.Until(down.Add(90 * time.Second)))
	rows := f.install("h2")
	if rows[0].Run != fleet.Started {
		t.Fatalf("install after the outage: %+v", rows[0])
	}
	r := <-run
	res := decodeCutover(t, r)
	if r[0] != "0" || !res.OK || res.Serve == nil || !res.Serve.Answers {
		t.Fatalf("cutover fl-b after h2's 90 s outage: exit %s %+v\n%s", r[0], res, r[2])
	}
	// The image is on every host since the first cutover: nothing moves.
	if len(res.Images) != 3 {
		t.Fatalf("cutover fl-b's image step: %+v", res.Images)
	}
	for _, im := range res.Images {
		if im.BytesIn != 0 || im.BytesOut != 0 || !strings.HasPrefix(im.State, "present") {
			t.Fatalf("cutover fl-b moved image bytes: %+v", res.Images)
		}
	}
	b := stageBlock(t, res, "h2", "engram")
	recopied := onDisk + b.CopiedBytes - b.TotalBytes
	t.Logf("MEASURE re-copied after the 90 s outage: %s (%d bytes) of a %s pack; %s on disk when the service stopped, the resumed attempt packed %s",
		contract.HumanBytes(max(0, recopied)), recopied, contract.HumanBytes(b.TotalBytes), contract.HumanBytes(onDisk), contract.HumanBytes(b.CopiedBytes))
	if onDisk < chunk || b.CopiedBytes >= b.TotalBytes {
		t.Fatalf("not a resumed pack: %d bytes on disk at the stop, the last attempt packed %d of %d", onDisk, b.CopiedBytes, b.TotalBytes)
	}
	if recopied > chunk {
		t.Fatalf("re-copied %d bytes after the outage, more than one block (%d)", recopied, chunk)
	}
	f.saveHistory(contract.CutoverID("fl3"), "cutover-node-outage-resumed")
}

// linkDown45sDuringWaitReady is TestRealFleet's subtest "LinkDown45sDuringWaitReady".
func (f *realFleet) linkDown45sDuringWaitReady(t *testing.T) {
	ctx := context.Background()
	h3 := f.tf.Node(3)
	// A one-host lane on h3, loading slowly; while WaitReady polls
	// it, h3's cable is pulled for 45 s. Started with --no-wait (the
	// run is the control service's), followed with attach.
	var started map[string]string
	if code, errOut := f.starterJSON(&started, "cutover", "--lane", "fl-e", "--no-wait", "-o", "extra_args=--load-mibps=1"); code != 0 {
		t.Fatalf("cutover --no-wait: exit %d %v\n%s", code, started, errOut)
	}
	id := contract.CutoverID("fl1")
	f.until(5*time.Minute, "cutover fl-e in WaitReady", func() bool {
		p, err := f.progress(ctx, id)
		if err != nil {
			return false
		}
		for _, s := range p.Steps {
			if s.Name == "wait ready" && s.Status == contract.StepRunning {
				return true
			}
		}
		return false
	})
	if err := f.tf.LinkDown(h3); err != nil {
		t.Fatal(err)
	}
	downAt := time.Now()
	time.Sleep(45 * time.Second) // the partition's length, not a synchronisation
	if err := f.tf.LinkUp(h3); err != nil {
		t.Fatal(err)
	}
	upAt := time.Now()
	r := <-f.background("--json", "attach", "--lane", "fl-e")
	res := decodeCutover(t, r)
	if r[0] != "0" || !res.OK || res.Serve == nil || !res.Serve.Answers || res.Serve.Ready == nil {
		t.Fatalf("cutover fl-e after a 45 s partition during WaitReady: exit %s %+v\n%s", r[0], res, r[2])
	}
	// The wait-ready step spans the partition (its last attempt's
	// own time, Ready.Seconds, may be shorter: an attempt that lost
	// its heartbeat to the partition is retried).
	var step *contract.Step
	for i := range res.Steps {
		if res.Steps[i].Name == "wait ready" {
			step = &res.Steps[i]
		}
	}
	if step == nil || step.Status != contract.StepDone || step.Started.After(downAt) || step.Ended.Before(upAt) {
		t.Fatalf("the wait-ready step %+v does not span the partition %s–%s", step, downAt.Format(time.TimeOnly), upAt.Format(time.TimeOnly))
	}
	t.Logf("link down %s–%s; the lane came up: wait ready took %.1f s (%s, last attempt %.1f s); %s", downAt.Format(time.TimeOnly), upAt.Format(time.TimeOnly),
		step.Ended.Sub(step.Started).Seconds(), step.Detail, res.Serve.Ready.Seconds, res.Serve.BaseURL)
	// The control service's tunnel to h3 comes back by itself and
	// h3's worker polls again through it.
	f.until(2*time.Minute, "h3's worker polling again after the link came back", func() bool {
		d, err := f.c.DescribeTaskQueue(ctx, "node.h3", enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		if err != nil {
			return false
		}
		for _, p := range d.GetPollers() {
			if p.GetLastAccessTime().AsTime().After(upAt) {
				return true
			}
		}
		return false
	})
	t.Logf("h3's worker polled again %.1f s after the link came back", time.Since(upAt).Seconds())
	if code, out, errOut := f.starter("stop", "--lane", "fl-e"); code != 0 {
		t.Fatalf("stop fl-e: exit %d\n%s\n%s", code, out, errOut)
	}
}

// serveWaitsForANodeService is TestRealFleet's subtest "ServeWaitsForANodeService".
func (f *realFleet) serveWaitsForANodeService(t *testing.T) {
	ctx := context.Background()
	h2 := f.tf.Node(2)
	if code, out, errOut := f.starter("stage", "--lane", "fl-c"); code != 0 {
		t.Fatalf("stage fl-c: exit %d\n%s\n%s", code, out, errOut)
	}
	f.stopService(h2)
	run := f.background("--json", "up", "--lane", "fl-c", "--force")
	id := contract.UpID("fl2")
	detail := f.waiting(ctx, id, "h2")
	if !strings.Contains(detail, "waiting for node h2 (down ") {
		t.Fatalf("serve's waiting step: %q", detail)
	}
	f.install("h2")
	r := <-run
	var res contract.ServeResult
	if err := json.Unmarshal([]byte(r[1]), &res); err != nil || r[0] != "0" || !res.Answers || len(res.Ranks) != 2 {
		t.Fatalf("up fl-c after h2's service came back: exit %s (%v)\n%s\n%s", r[0], err, r[1], r[2])
	}
	t.Logf("serve waited (%q) and the lane came up", detail)
	f.saveHistory(id, "serve-outage-resumed")
}

// nodeNeverComesBack is TestRealFleet's subtest "NodeNeverComesBack".
func (f *realFleet) nodeNeverComesBack(t *testing.T) {
	ctx := context.Background()
	h1 := f.tf.Node(1)
	h2 := f.tf.Node(2)
	h3 := f.tf.Node(3)
	f.setRelease(h3, false)
	start := time.Now()
	run := f.background("--json", "cutover", "--lane", "fl-d")
	f.pausedAt(ctx, "fl-d", "h3")
	f.stopService(h3)
	r := <-run
	res := decodeCutover(t, r)
	t.Logf("failed after %.1f s: %s; rollback: %v (answers %v), %s", time.Since(start).Seconds(), res.Error, res.RolledBack, res.OldLaneAnswers, res.RollbackError)
	if r[0] != "2" || res.OK || res.FailedStep != "stage" {
		t.Fatalf("cutover fl-d with h3 gone: exit %s %+v\n%s", r[0], res, r[2])
	}
	for _, want := range []string{"node h3 was gone for", "outage budget of 20s", "node.h3"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("error %q does not say %q", res.Error, want)
		}
	}
	// fl-d stages ahead while fl-c serves: the stage failed before
	// anything stopped, so fl-c was never touched and nothing rolls back
	// (the rollback after a stop is TestKeeperHandsOverOnCutover's and the
	// workflow tests').
	if res.StageOrder != "ahead" || len(res.RolledBack) != 0 || res.RollbackError != "" {
		t.Fatalf("stage order %q, rolled back %v (%s): want fl-d staged ahead and fl-c never stopped", res.StageOrder, res.RolledBack, res.RollbackError)
	}
	for _, n := range []*testfleet.Node{h1, h2} {
		if got := f.running(n, "fl-c"); len(got) != 1 {
			t.Fatalf("after the failed stage %s runs %v for fl-c, want it serving as before", n.Name, got)
		}
		if got := f.running(n, "fl-d"); len(got) != 0 {
			t.Fatalf("after the failed stage %s runs %v of fl-d", n.Name, got)
		}
	}
}
