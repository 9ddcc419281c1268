package fleete2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/pki"
	"github.com/sparklane/sparklane/internal/simimage"
	"github.com/sparklane/sparklane/internal/tclient"
	"github.com/sparklane/sparklane/internal/testkit/pgtest"
	"github.com/sparklane/sparklane/internal/testkit/testfleet"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
	"github.com/sparklane/sparklane/workflows"
)

// extFleet is sparklane on an external Temporal cluster: a Temporal server
// on a real PostgreSQL on this machine, its frontend on the test fleet's
// bridge behind mutual TLS (the certificates of `starter control certs`),
// `worker control` on hosts h1 and h2, `worker node` on h3 (its own
// dockerd), the starter here. Everything runs as docs/operations.md's "An
// external Temporal" says, by hand; h3 runs the test worker (the worker
// command line with the fault points of internal/testkit/testworker),
// the control hosts the worker itself.
type extFleet struct {
	t   *testing.T
	tf  *testfleet.Fleet
	dir string
	bin string
	// testBin is the test worker, h3's.
	testBin string
	srv     *pgtest.Temporal
	addr    string
	caFile  string
	certs   map[string]pki.Files
	opCfg   string
	c       client.Client
	procs   map[string]*exec.Cmd
	recipe  string
	// bootDir holds h3's boot id for its worker (testworker.BootIDDirEnv).
	bootDir string
}

const extLane, extCluster, extPort = "pg-a", "pg1", 18200

// Two control services on two hosts of the test fleet run against one
// Temporal server on PostgreSQL (the external mode): a cutover is held
// mid-stage at the staging fault point, the control service that ran its
// workflow so far is killed with SIGKILL, and the run goes on on the other
// one — same task queue, no operator action — to a lane that answers. The
// history says so: every workflow task and control activity after the
// kill was taken by the surviving host's worker; the keeper the cutover
// started there watches the lane. Then h3 reboots (rebooted).
func TestExternalTemporalControlFailover(t *testing.T) {
	f := newExtFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f.waitPollers(ctx, contract.ControlQueue, 2)
	f.waitPollers(ctx, contract.NodeQueue("h3"), 1)

	code, out, errOut := starter(t, "--config", f.opCfg, "cutover", "--lane", extLane, "--no-wait", "--json")
	if code != 0 {
		t.Fatalf("cutover --no-wait: exit %d\n%s\n%s", code, out, errOut)
	}
	id := contract.CutoverID(extCluster)
	f.heldMidStage(ctx)

	// The active control service: the one whose worker completed the
	// cutover's last workflow task.
	events := f.history(ctx, id)
	active := ""
	for _, e := range events {
		if a := e.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			active = f.host(a.GetIdentity())
		}
	}
	survivor := map[string]string{"h1": "h2", "h2": "h1"}[active]
	if survivor == "" {
		t.Fatalf("the cutover's workflow tasks were not completed by a control service on h1 or h2 (last: %q)", active)
	}
	killedAt := events[len(events)-1].GetEventId()
	cmd := f.procs[active]
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the control service on %s: %v", active, err)
	}
	_ = cmd.Wait()
	t.Logf("killed the control service on %s (pid %d) at event %d; %s's goes on", active, cmd.Process.Pid, killedAt, survivor)
	f.release()

	var res contract.CutoverResult
	if err := f.c.GetWorkflow(ctx, id, "").Get(ctx, &res); err != nil || !res.OK {
		t.Fatalf("cutover after the kill: %v %+v\n%s", err, res, f.logs())
	}
	f.checkAfterKill(ctx, id, killedAt, survivor)
	f.answers(ctx)
	f.kept(ctx, survivor)
	f.rebooted(ctx)
}

// kept waits until the cluster's keeper, started by the cutover on the
// surviving control service, has checked the lane and found it up.
func (f *extFleet) kept(ctx context.Context, survivor string) {
	f.t.Helper()
	var st contract.KeeperStatus
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := f.c.QueryWorkflow(ctx, workflows.KeeperID(extCluster), "", contract.KeeperStatusQuery)
		if err == nil && v.Get(&st) == nil && st.Lane == extLane && st.State == contract.KeeperWatching && st.Health == "up" && st.Checks > 0 &&
			st.Input != nil && st.Input.BootIDs["h3"] == "boot-1" {
			f.t.Logf("keeper/%s on %s's control service: %d checks, lane up", extCluster, survivor, st.Checks)
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("keeper/%s: not watching a healthy lane within a minute: %+v (%v)", extCluster, st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func newExtFleet(t *testing.T) *extFleet {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tf := testfleet.New(t, testfleet.Options{Name: "flpg", Nodes: 3})
	f := &extFleet{t: t, tf: tf, dir: t.TempDir(), procs: map[string]*exec.Cmd{}, bootDir: t.TempDir()}
	f.writeBootID("boot-1")
	built := make(chan error, 1)
	f.bin, f.testBin = filepath.Join(f.dir, "worker"), filepath.Join(f.dir, "testworker")
	go func() {
		for bin, pkg := range map[string]string{f.bin: "./worker", f.testBin: "./" + testWorkerPkg} {
			cmd := exec.Command("go", "build", "-o", bin, pkg)
			cmd.Dir = filepath.Join("..", "..", "..")
			if out, err := cmd.CombinedOutput(); err != nil {
				built <- fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
		built <- nil
	}()
	h3 := tf.Node(3)
	if err := tf.StartDocker(ctx, h3); err != nil {
		t.Fatal(err)
	}
	image := f.loadImage(ctx, h3)

	nas, err := demo.GenerateNAS(tf.NASDir(), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	recipes := filepath.Join(f.dir, "recipes")
	if err := os.MkdirAll(recipes, 0o755); err != nil {
		t.Fatal(err)
	}
	small := strings.Replace(nas.EngramSnapshot, tf.NASDir(), testfleet.NASPath, 1)
	if err := os.WriteFile(filepath.Join(recipes, extLane+".toml"), []byte(fleetRecipe(extLane, extCluster, image, extPort, "a", small, "1, 3", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	f.recipe = recipes

	// The certificates as an operator issues them: `starter control
	// certs` with the bridge address, a client identity per control host
	// and one for the server's own system worker.
	port := pgtest.FreePort(t, tf.ControlIP())
	f.addr = net.JoinHostPort(tf.ControlIP(), strconv.Itoa(port))
	f.certs = map[string]pki.Files{}
	var certs struct {
		CA    string               `json:"ca"`
		Certs map[string]pki.Files `json:"certs"`
	}
	code, out, errOut := starter(t, "--config", f.config("certs", filepath.Join(f.dir, "state")), "--json", "control", "certs",
		"--dir", filepath.Join(f.dir, "pki"), "--host", tf.ControlIP(), "--client", "control-h1", "--client", "control-h2", "--client", "temporal-worker")
	if err := json.Unmarshal([]byte(out), &certs); code != 0 || err != nil {
		t.Fatalf("control certs: exit %d (%v)\n%s\n%s", code, err, out, errOut)
	}
	f.caFile, f.certs = certs.CA, certs.Certs
	fe, sys := f.id("frontend"), f.id("temporal-worker")
	pg := pgtest.Start(t, pgtest.Options{})
	f.srv = pgtest.StartTemporal(t, pg, pgtest.TemporalOptions{IP: tf.ControlIP(), Port: port,
		TLS: &pgtest.TLS{CA: f.caFile, ServerCert: fe.Cert, ServerKey: fe.Key, ClientCert: sys.Cert, ClientKey: sys.Key}})

	f.opCfg = f.config("operator", filepath.Join(f.dir, "state"))
	op := f.id("operator")
	f.c, err = tclient.Dial(ctx, tclient.DialOptions{Address: f.srv.Address, TLSCA: f.caFile, TLSCert: op.Cert, TLSKey: op.Key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.c.Close)

	// The fault points on h3 (the test worker's): its staging passes hold
	// at their first byte until the release file exists; its boot id is
	// read from bootDir.
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.stopAll)
	for _, n := range tf.Nodes() {
		if n.Index == 3 {
			f.start(n, f.testBin, f.config("node-h3", "/var/lib/sparklane"), []string{"node", "--node", "h3"},
				testworker.PauseAtEnv+"=1", testworker.ReleaseEnv+"="+releaseFile, testworker.BootIDDirEnv+"="+f.bootDir)
			continue
		}
		f.start(n, f.bin, f.config("control-"+n.Name, "/var/lib/sparklane"), []string{"control"})
	}
	return f
}

// id is the identity name `control certs` issued.
func (f *extFleet) id(name string) pki.Files {
	f.t.Helper()
	id, ok := f.certs[name]
	if !ok {
		f.t.Fatalf("control certs issued no %s identity: %v", name, f.certs)
	}
	return id
}

// config writes the sparklane.toml of identity name: the external
// cluster's address with the identity's client certificate (none before
// the certificates are issued), node h3, the one-node cluster; state_dir
// where that process keeps its state (the hosts' /var/lib/sparklane is
// their own).
func (f *extFleet) config(name, stateDir string) string {
	f.t.Helper()
	tls := ""
	if len(f.certs) > 0 {
		id := f.id(name)
		tls = fmt.Sprintf("tls_ca = %q\ntls_cert = %q\ntls_key = %q\n", f.caFile, id.Cert, id.Key)
	}
	h3 := f.tf.Node(3)
	body := fmt.Sprintf(`state_dir = %q
recipes_dir = %q
hf_cache_dir = "/mnt/nas/hub"
shared_roots = [%q]
probe_grace = "2s"
metrics_address = "off"
node_outage_budget = %q
keep = { interval = "1s" }

[temporal]
address = %q
%s
[[nodes]]
name = "h3"
ssh = %q
known_hosts = %q
identity = %q
address = %q
docker = %q
roots = ["/mnt/nvme/sl"]

[[clusters]]
name = %q
nodes = ["h3"]
`, stateDir, f.recipe, testfleet.NASPath, extOutageBudget.String(), f.addr, tls,
		h3.SSHAddr(), f.tf.KnownHostsFile(), f.tf.IdentityFile(), h3.IP, "unix://"+testfleet.NodeDockerSocket, extCluster)
	p := filepath.Join(f.dir, name+".toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// loadImage builds the engine-sim image here and loads it into n's dockerd.
func (f *extFleet) loadImage(ctx context.Context, n *testfleet.Node) string {
	f.t.Helper()
	hd, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		f.t.Fatalf("Docker is required (the engine-sim image is built on it): %v", err)
	}
	defer hd.Close()
	image, err := simimage.Build(ctx, hd, simimage.Options{})
	if err != nil {
		f.t.Fatalf("build engine-sim: %v", err)
	}
	rc, err := hd.ImageSave(ctx, []string{image})
	if err != nil {
		f.t.Fatal(err)
	}
	defer rc.Close()
	resp, err := nodeDocker(f.t, n).ImageLoad(ctx, rc)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		f.t.Fatalf("load %s into %s's dockerd: %v", image, n.Name, err)
	}
	return image
}

// start runs the worker with args on host n, at its console, logging to
// (the end of) a file of the test's.
// start runs bin ARGS --config cfg on host n, env added to its
// environment.
func (f *extFleet) start(n *testfleet.Node, bin, cfg string, args []string, env ...string) {
	f.t.Helper()
	lf, err := os.OpenFile(filepath.Join(f.dir, n.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	defer lf.Close()
	cmd := f.tf.Command(n, append([]string{bin}, append(args, "--config", cfg, "--log", "json")...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		f.t.Fatalf("start worker %v on %s: %v", args, n.Name, err)
	}
	f.procs[n.Name] = cmd
}

func (f *extFleet) stopAll() {
	for _, cmd := range f.procs {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
}

// logs is every worker's log, for a failure message.
func (f *extFleet) logs() string {
	var b strings.Builder
	for _, n := range f.tf.Nodes() {
		out, _ := os.ReadFile(filepath.Join(f.dir, n.Name+".log"))
		fmt.Fprintf(&b, "--- %s\n%s", n.Name, tail(string(out), 40))
	}
	out, _ := os.ReadFile(f.srv.Log)
	fmt.Fprintf(&b, "--- temporal\n%s", tail(string(out), 20))
	return b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitPollers waits until queue has n workers polling it (workflow or
// activity tasks).
func (f *extFleet) waitPollers(ctx context.Context, queue string, n int) {
	f.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ids := map[string]bool{}
		for _, kind := range []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY} {
			r, err := f.c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
				Namespace: f.srv.Namespace, TaskQueue: &taskqueuepb.TaskQueue{Name: queue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL}, TaskQueueType: kind})
			if err == nil {
				for _, p := range r.GetPollers() {
					ids[p.GetIdentity()] = true
				}
			}
		}
		if len(ids) >= n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("queue %s: %d pollers after 2 min, want %d\n%s", queue, len(ids), n, f.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// heldMidStage waits until h3's StageBlock holds at the fault point.
func (f *extFleet) heldMidStage(ctx context.Context) {
	f.t.Helper()
	id := contract.StageNodeID(extLane, "h3")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		d, err := f.c.DescribeWorkflowExecution(ctx, id, "")
		if err == nil {
			for _, pa := range d.GetPendingActivities() {
				var p contract.StageProgress
				if pa.GetActivityType().GetName() == "StageBlock" && pa.GetHeartbeatDetails() != nil &&
					converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &p) == nil && p.Paused {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s never held at the fault point\n%s", id, f.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// release lets h3's staging through the fault point.
func (f *extFleet) release() {
	f.t.Helper()
	hp, err := f.tf.HostPath(f.tf.Node(3), releaseFile)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(hp, nil, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// host is the test host whose worker has identity id (the SDK's
// PID@HOSTNAME@, the host name its own: NAME-hN).
func (f *extFleet) host(id string) string {
	for _, n := range f.tf.Nodes() {
		if strings.Contains(id, "@"+n.Hostname) {
			return n.Name
		}
	}
	return ""
}

func (f *extFleet) history(ctx context.Context, id string) []*historypb.HistoryEvent {
	f.t.Helper()
	var out []*historypb.HistoryEvent
	it := f.c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			f.t.Fatalf("history of %s: %v", id, err)
		}
		out = append(out, e)
	}
	return out
}

// checkAfterKill reads the cutover's history past event killedAt: every
// workflow task and every control activity (queue sparklane) was taken by
// survivor's worker, and there were some of each.
func (f *extFleet) checkAfterKill(ctx context.Context, id string, killedAt int64, survivor string) {
	f.t.Helper()
	queues := map[int64]string{}
	names := map[int64]string{}
	var tasks, control []string
	for _, e := range f.history(ctx, id) {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			queues[e.GetEventId()], names[e.GetEventId()] = a.GetTaskQueue().GetName(), a.GetActivityType().GetName()
		}
		if e.GetEventId() <= killedAt {
			continue
		}
		if a := e.GetWorkflowTaskStartedEventAttributes(); a != nil {
			if h := f.host(a.GetIdentity()); h != survivor {
				f.t.Errorf("workflow task %d after the kill taken by %q (host %q), want %s", e.GetEventId(), a.GetIdentity(), h, survivor)
			}
			tasks = append(tasks, a.GetIdentity())
		}
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil && queues[a.GetScheduledEventId()] == contract.ControlQueue {
			if h := f.host(a.GetIdentity()); h != survivor {
				f.t.Errorf("control activity %s after the kill taken by %q (host %q), want %s", names[a.GetScheduledEventId()], a.GetIdentity(), h, survivor)
			}
			control = append(control, names[a.GetScheduledEventId()])
		}
	}
	if len(tasks) == 0 || len(control) == 0 {
		f.t.Fatalf("after the kill: %d workflow tasks, control activities %v: want both on %s", len(tasks), control, survivor)
	}
	f.t.Logf("after the kill, %s's control service took %d workflow tasks and the control activities %v", survivor, len(tasks), control)
}

// answers checks the lane serves on h3's address.
func (f *extFleet) answers(ctx context.Context) {
	f.t.Helper()
	url := fmt.Sprintf("http://%s:%d/v1/models", f.tf.Node(3).IP, extPort)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), demo.ModelRepo) {
		f.t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
}
