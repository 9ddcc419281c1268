package fleete2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/system"
	dockerclient "github.com/docker/docker/client"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/fleet"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
	"github.com/sparklane/sparklane/internal/testkit/regtest"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
	"github.com/sparklane/sparklane/internal/testkit/testfleet"
)

// dayOneRepo is the shipped sim-demo lane's model, served by the Hub
// double (a test double of the public Hugging Face Hub on loopback).
const dayOneRepo = "optimum-internal-testing/tiny-random-llama"

// Day one, as a new user lives it, on three network-namespace hosts with
// their own sshd and dockerd, from the release tarball and nothing else:
// unpack it, then exactly
//
//	./starter init --node h1=root@IP1 … --node h3=root@IP3 --insecure-registry REG1 --insecure-registry REG2
//	./starter fleet install
//	./starter cutover --lane sim-demo --fetch
//
// with HF_ENDPOINT naming the Hub double: the shipped sim lane is fetched
// into the NAS, its engine-sim image built on the head from the release
// and moved, staged, served and probed, and answers on the head's IP.
// Then the user's own recipes, whose images name their registry's host:
// one in a plain-HTTP registry on the bridge (init's --insecure-registry
// is all it takes), one in a TLS registry that wants a login, given only
// on the control host as `docker login` writes it (~/.docker/config.json).
// No file is edited; no node's Docker is configured (its daemon.json
// and process unchanged, no insecure registry in `docker info`); the
// login's secret is in no workflow history, log or node file.
func TestDayOneFromTheReleaseInThreeCommands(t *testing.T) {
	dist := releaseDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tf := testfleet.New(t, testfleet.Options{Name: "flday", Nodes: 3, Docker: true})
	d := newDayOne(t, ctx, tf, dist)

	plain := regtest.Start(t, ctx, regtest.Options{IP: tf.ControlIP()})
	const user, password = "sparky", "day-one-secret-7c1f"
	// The login registry speaks TLS with a certificate the nodes do not
	// trust (self-signed): listed at init, like the plain one.
	login := regtest.Start(t, ctx, regtest.Options{IP: tf.ControlIP(), User: user, Password: password, TLS: true})
	sim := d.engineSimImage()
	plain.Push(t, ctx, "sparklane/engine-sim:lan", sim)
	loginAuth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	d.dockerLogin(login.Host, loginAuth)
	login.Push(t, ctx, "sparklane/engine-sim:login", sim)
	daemons := snapshotDaemons(t, ctx, tf)

	// The README's three commands, as written there, on this fleet's
	// hosts, with the test's two registries added to init.
	cmds := readmeDayOne(t)
	args := append([]string{}, cmds[0]...)
	nodes := 0
	for i := 1; i < len(args); i++ {
		if args[i-1] == "--node" && nodes < len(tf.Nodes()) {
			n := tf.Nodes()[nodes]
			args[i] = n.Name + "=root@" + n.IP
			nodes++
		}
	}
	if nodes != len(tf.Nodes()) || len(args) != 1+2*nodes {
		t.Fatalf("the README's init is %q: want init and --node NAME=root@HOST for %d hosts, nothing else", cmds[0], len(tf.Nodes()))
	}
	d.ok("init", append(args, "--insecure-registry", plain.Host, "--insecure-registry", login.Host)...)
	d.ok("fleet install", cmds[1]...)
	out := d.ok("cutover sim-demo", cmds[2]...)
	if !strings.Contains(out, "cutover to sim-demo on all-3x: ok") {
		t.Fatalf("cutover --lane sim-demo --fetch did not say ok:\n%s", out)
	}
	d.answers("sim-demo")
	if len(d.edits()) != 0 {
		t.Fatalf("files changed that the user would have edited: %v", d.edits())
	}

	// The user's own lanes: the same model, the image from a LAN
	// registry named in the recipe (plain HTTP, then TLS with a login).
	for _, l := range []struct{ lane, image, how string }{
		{"sim-lan", plain.Host + "/sparklane/engine-sim:lan", "plain-HTTP registry"},
		{"sim-login", login.Host + "/sparklane/engine-sim:login", "registry with a login"},
	} {
		d.userRecipe(l.lane, l.image)
		out = d.ok("cutover "+l.lane+" ("+l.how+")", "cutover", "--lane", l.lane)
		if !strings.Contains(out, "cutover to "+l.lane+" on all-3x: ok") {
			t.Fatalf("cutover --lane %s did not say ok:\n%s", l.lane, out)
		}
		d.answers(l.lane)
		d.hasImage(l.image)
	}

	checkDaemons(t, ctx, tf, daemons)
	d.secretNowhere(password, loginAuth)
	d.ok("stop", "stop", "--lane", "sim-login")
	d.report()
}

// readmeDayOne are the README's day-one commands (the block after
// "**Day one**", comments cut), each as the starter's arguments: init,
// fleet install and the sim-demo cutover.
func readmeDayOne(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "**Day one**")
	if !ok {
		t.Fatal("README.md has no **Day one** paragraph")
	}
	var cmds [][]string
	for _, l := range strings.Split(after, "\n") {
		if strings.HasPrefix(l, "    ") {
			c, _, _ := strings.Cut(strings.TrimSpace(l), "  #")
			f := strings.Fields(c)
			if len(f) == 0 || f[0] != "./starter" {
				t.Fatalf("README day one: %q does not run ./starter", l)
			}
			cmds = append(cmds, f[1:])
		} else if len(cmds) > 0 && strings.TrimSpace(l) != "" {
			break
		}
	}
	want := []string{"init", "fleet install", "cutover --lane sim-demo --fetch"}
	if len(cmds) != 3 || !strings.HasPrefix(strings.Join(cmds[0], " "), want[0]) || strings.Join(cmds[1], " ") != want[1] || strings.Join(cmds[2], " ") != want[2] {
		t.Fatalf("the README's day one should be %q; found %q", want, cmds)
	}
	return cmds
}

// dayOne is the control host of the day-one test: the unpacked release,
// a home directory with the user's SSH key and known_hosts, and a mount
// namespace of its own in which the NAS is mounted read-write at the path
// the nodes mount it read-only (the control service fetches into it).
type dayOne struct {
	t       *testing.T
	ctx     context.Context
	tf      *testfleet.Fleet
	rel     string // the unpacked release, where the user runs ./starter
	home    string
	hub     *hubtest.Server
	holder  *exec.Cmd
	before  map[string][]byte // the release's files as unpacked
	phases  []dayOnePhase
	started time.Time
}

type dayOnePhase struct {
	name string
	wall time.Duration
}

func newDayOne(t *testing.T, ctx context.Context, tf *testfleet.Fleet, dist string) *dayOne {
	d := &dayOne{t: t, ctx: ctx, tf: tf, home: t.TempDir(), started: time.Now()}
	d.unpack(dist)
	if err := os.MkdirAll(filepath.Join(d.home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{tf.KnownHostsFile(): "known_hosts", tf.IdentityFile(): "id_ed25519"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.home, ".ssh", dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The NAS as the operator has it: a Hugging Face hub directory, empty.
	if err := os.MkdirAll(filepath.Join(tf.NASDir(), "huggingface", "hub"), 0o755); err != nil {
		t.Fatal(err)
	}
	model := t.TempDir()
	simtest.WriteModel(t, model, simtest.Model{Shards: 2, Tensors: 2, Rows: 256, Cols: 64})
	var files []hubtest.File
	entries, err := os.ReadDir(model)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(model, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, hubtest.File{Path: e.Name(), Data: b})
	}
	d.hub = hubtest.New(hubtest.Options{})
	t.Cleanup(d.hub.Close)
	d.hub.AddRepo(hubtest.Repo{ID: dayOneRepo, LFSThreshold: 1 << 10, Files: files})
	d.controlNamespace()
	t.Cleanup(func() {
		if out, err := d.inNamespace("./starter", "control", "stop").CombinedOutput(); err != nil {
			t.Errorf("control stop: %v\n%s", err, out)
		}
	})
	d.before = d.releaseFiles()
	return d
}

// unpack unpacks the amd64 tarball of the release at dist, as the README
// says, into a directory of the test's.
func (d *dayOne) unpack(dist string) {
	t := d.t
	sums, err := os.ReadFile(filepath.Join(dist, fleet.ReleaseSums))
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasSuffix(f[1], "-linux-amd64.tar.gz") {
			name = f[1]
		}
	}
	if name == "" {
		t.Fatalf("%s lists no amd64 tarball:\n%s", filepath.Join(dist, fleet.ReleaseSums), sums)
	}
	dir := t.TempDir()
	start := time.Now()
	if out, err := exec.Command("tar", "-xzf", filepath.Join(dist, name), "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xzf %s: %v\n%s", name, err, out)
	}
	d.phases = append(d.phases, dayOnePhase{"unpack the tarball", time.Since(start)})
	d.rel = filepath.Join(dir, strings.TrimSuffix(name, ".tar.gz"))
}

// controlNamespace starts the control host's mount namespace (a holder
// process) and mounts the NAS in it read-write at testfleet.NASPath;
// every starter, and the control service it starts, runs in it. Nothing
// is mounted in the test machine's own namespace.
func (d *dayOne) controlNamespace() {
	t := d.t
	d.holder = exec.Command("unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity")
	if err := d.holder.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	t.Cleanup(func() { _ = d.holder.Process.Kill(); _ = d.holder.Wait() })
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", d.holder.Process.Pid))
		if err == nil && ns != self {
			break
		}
		if i == 200 {
			t.Fatalf("the control host's holder (pid %d) never entered a mount namespace of its own", d.holder.Process.Pid)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if out, err := d.inNamespace("mount", "--bind", d.tf.NASDir(), testfleet.NASPath).CombinedOutput(); err != nil {
		t.Fatalf("mount the NAS at %s on the control host: %v\n%s", testfleet.NASPath, err, out)
	}
}

// inNamespace is argv run in the control host's mount namespace, from
// the release directory, with the user's environment: no Go on PATH,
// HOME with their SSH key and Docker login, HF_ENDPOINT at the Hub double.
func (d *dayOne) inNamespace(argv ...string) *exec.Cmd {
	// cd after entering: a directory opened before (nsenter --wd) is
	// the outer namespace's, and getcwd fails on it.
	c := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(d.holder.Process.Pid), "--mount", "--", "sh", "-c", `cd "$0" && exec "$@"`, d.rel}, argv...)...)
	c.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SPARKLANE_CONFIG=", "SPARKLANE_CONTROL_EXE=", "DOCKER_CONFIG=",
		"HOME="+d.home)
	if d.hub != nil {
		c.Env = append(c.Env, "HF_ENDPOINT="+d.hub.URL)
	}
	return c
}

// ok runs ./starter ARGS as the user does and fails the test on a
// non-zero exit; phase names the step in the report.
func (d *dayOne) ok(phase string, args ...string) string {
	d.t.Helper()
	c := d.inNamespace(append([]string{"./starter"}, args...)...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	start := time.Now()
	err := c.Run()
	wall := time.Since(start)
	if err != nil {
		d.t.Fatalf("./starter %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	d.phases = append(d.phases, dayOnePhase{phase, wall})
	d.t.Logf("./starter %s (%s):\n%s", strings.Join(args, " "), wall.Round(100*time.Millisecond), out.String())
	return out.String()
}

// dockerLogin writes the control host's Docker login for host as `docker
// login` writes it (~/.docker/config.json), and nothing else.
func (d *dayOne) dockerLogin(host, auth string) {
	d.t.Helper()
	dir := filepath.Join(d.home, ".docker")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		d.t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"auth": auth}}})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		d.t.Fatal(err)
	}
}

// engineSimImage is the engine-sim image as `image build --sim` makes it
// (FROM scratch, the release's static engine-sim as /engine-sim and
// /bin/sh, entrypoint /engine-sim), to push into the registries.
func (d *dayOne) engineSimImage() v1.Image {
	b, err := os.ReadFile(filepath.Join(d.rel, "engine-sim", "engine-sim"))
	if err != nil {
		d.t.Fatal(err)
	}
	return regtest.ImageOf(d.t, "", []v1.Layer{regtest.LayerOf(d.t, map[string][]byte{"engine-sim": b, "bin/sh": b})}, "/engine-sim")
}

// userRecipe adds the user's own recipe for lane name: the shipped
// sim-demo with its image named in a registry, staged under its own
// directory.
func (d *dayOne) userRecipe(name, image string) {
	t := d.t
	b, err := os.ReadFile(filepath.Join(d.rel, "recipes", "sim-demo.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for old, new := range map[string]string{
		`name = "sim-demo"`:                     fmt.Sprintf("name = %q", name),
		`aliases = ["sim"]`:                     `aliases = []`,
		`image = "sparklane/engine-sim:latest"`: fmt.Sprintf("image = %q", image),
		`dst = "/mnt/nvme/sparklane/sim-demo"`:  fmt.Sprintf("dst = %q", "/mnt/nvme/sparklane/"+name),
	} {
		if !strings.Contains(s, old) {
			t.Fatalf("recipes/sim-demo.toml has no %s", old)
		}
		s = strings.Replace(s, old, new, 1)
	}
	p := filepath.Join(d.rel, "recipes", name+".toml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	d.before[p] = []byte(s)
}

// answers checks that the lane serves the model on the head's IP: its
// /v1/models and a chat completion.
func (d *dayOne) answers(lane string) {
	t := d.t
	head := d.tf.Node(1).IP
	base := "http://" + head + ":18000/v1"
	resp, err := http.Get(base + "/models")
	if err != nil {
		t.Fatalf("%s does not answer on the head %s: %v", lane, head, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"`+dayOneRepo+`"`) {
		t.Fatalf("%s: /v1/models on %s: %s", lane, head, body)
	}
	req, _ := json.Marshal(map[string]any{"model": dayOneRepo, "max_tokens": 8, "messages": []map[string]string{{"role": "user", "content": "What is 127*89?"}}})
	start := time.Now()
	resp, err = http.Post(base+"/chat/completions", "application/json", bytes.NewReader(req))
	if err != nil {
		t.Fatalf("%s: chat completion on %s: %v", lane, head, err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"choices"`) {
		t.Fatalf("%s: chat completion on %s: %s %s", lane, head, resp.Status, body)
	}
	d.phases = append(d.phases, dayOnePhase{"first completion (" + lane + ")", time.Since(start)})
}

// hasImage checks that every node's own dockerd holds ref.
func (d *dayOne) hasImage(ref string) {
	for _, n := range d.tf.Nodes() {
		c := nodeDockerClient(d.t, n)
		if _, err := c.ImageInspect(d.ctx, ref); err != nil {
			d.t.Errorf("node %s's dockerd lacks %s: %v", n.Name, ref, err)
		}
		c.Close()
	}
}

// releaseFiles reads every file of the unpacked release but the config
// init writes (and the recipes the user adds, recorded when added).
func (d *dayOne) releaseFiles() map[string][]byte {
	files := map[string][]byte{}
	_ = filepath.WalkDir(d.rel, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && filepath.Base(p) != "sparklane.toml" {
			b, _ := os.ReadFile(p)
			files[p] = b
		}
		return nil
	})
	return files
}

// edits are the release's files whose content changed since unpacking.
func (d *dayOne) edits() []string {
	var changed []string
	now := d.releaseFiles()
	for p, b := range d.before {
		if !bytes.Equal(now[p], b) {
			changed = append(changed, p)
		}
	}
	return changed
}

// secretNowhere checks that none of secrets is in any workflow history
// of the control service, its log and the starter's, or any file on the
// nodes' own directories (their /etc/sparklane, /run/sparklane,
// /var/lib/sparklane and the rest, Docker's data excepted).
func (d *dayOne) secretNowhere(secrets ...string) {
	t := d.t
	t.Setenv("HOME", d.home) // the config's state_dir is under the user's ~
	cfg, err := config.Load(filepath.Join(d.rel, "sparklane.toml"))
	if err != nil {
		t.Fatal(err)
	}
	state := cfg.StateDir
	owner, ok := control.Find(state)
	if !ok {
		t.Fatalf("no control service holds %s", state)
	}
	c, err := client.DialContext(d.ctx, client.Options{HostPort: owner.Frontend, Namespace: "default", Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var token []byte
	histories := 0
	for {
		page, err := c.ListWorkflow(d.ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", NextPageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.GetExecutions() {
			id, run := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
			it := c.GetWorkflowHistory(d.ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					t.Fatalf("history of %s: %v", id, err)
				}
				b, _ := protojson.Marshal(ev)
				for _, s := range secrets {
					if bytes.Contains(b, []byte(s)) {
						t.Errorf("the registry login is in the history of %s (event %d)", id, ev.GetEventId())
					}
				}
			}
			histories++
		}
		if token = page.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	if histories < 3 {
		t.Errorf("read %d workflow histories, want the three cutovers' and more", histories)
	}
	roots := []string{state}
	for _, n := range d.tf.Nodes() {
		roots = append(roots, filepath.Join(n.Dir, "root"))
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("the registry login is in %s", p)
				}
			}
			return nil
		})
	}
}

// report logs the day's phases: what bench-dayone.sh prints. Day one
// proper ends at the sim-demo lane's first answered completion; the user's
// registry lanes come after it.
func (d *dayOne) report() {
	var b strings.Builder
	var dayOne time.Duration
	commands, done := 0, false
	for _, p := range d.phases {
		fmt.Fprintf(&b, "dayone phase: %-45s %8.1f s\n", p.name, p.wall.Seconds())
		if done {
			continue
		}
		dayOne += p.wall
		if !strings.HasPrefix(p.name, "first completion") && p.name != "unpack the tarball" {
			commands++
		}
		done = p.name == "first completion (sim-demo)"
	}
	fmt.Fprintf(&b, "dayone total: %.1f s from unpacking to the first answered completion, %d starter commands, %d files edited, 0 per-node steps (whole test %.1f s)\n",
		dayOne.Seconds(), commands, len(d.edits()), time.Since(d.started).Seconds())
	d.t.Log("\n" + b.String())
}

// daemonState is what a node's Docker is configured with: its config
// file's bytes, its process, and the registries it calls insecure.
type daemonState struct {
	config   []byte
	pid      int
	insecure []string
}

func snapshotDaemons(t *testing.T, ctx context.Context, tf *testfleet.Fleet) map[string]daemonState {
	t.Helper()
	out := map[string]daemonState{}
	for _, n := range tf.Nodes() {
		b, err := os.ReadFile(filepath.Join(n.Dir, "docker", "daemon.json"))
		if err != nil {
			t.Fatal(err)
		}
		c := nodeDockerClient(t, n)
		info, err := c.Info(ctx)
		c.Close()
		if err != nil {
			t.Fatalf("node %s: docker info: %v", n.Name, err)
		}
		out[n.Name] = daemonState{config: b, pid: n.DockerPID, insecure: insecureOf(info)}
	}
	return out
}

// checkDaemons checks that no node's Docker was configured or restarted.
func checkDaemons(t *testing.T, ctx context.Context, tf *testfleet.Fleet, before map[string]daemonState) {
	t.Helper()
	after := snapshotDaemons(t, ctx, tf)
	for _, n := range tf.Nodes() {
		b, a := before[n.Name], after[n.Name]
		if !bytes.Equal(b.config, a.config) || b.pid != a.pid || strings.Join(b.insecure, ",") != strings.Join(a.insecure, ",") {
			t.Errorf("node %s's Docker changed: daemon.json %q → %q, pid %d → %d, insecure registries %v → %v", n.Name, b.config, a.config, b.pid, a.pid, b.insecure, a.insecure)
		}
		for _, r := range a.insecure {
			if r != "127.0.0.0/8" && r != "::1/128" {
				t.Errorf("node %s's Docker calls %s insecure", n.Name, r)
			}
		}
	}
}

func insecureOf(info system.Info) []string {
	var out []string
	if rc := info.RegistryConfig; rc != nil {
		for _, c := range rc.InsecureRegistryCIDRs {
			out = append(out, c.String())
		}
		for name, ic := range rc.IndexConfigs {
			if ic != nil && !ic.Secure {
				out = append(out, name)
			}
		}
	}
	return out
}

func nodeDockerClient(t *testing.T, n *testfleet.Node) *dockerclient.Client {
	t.Helper()
	c, err := dockerclient.NewClientWithOpts(dockerclient.WithHost("unix://"+n.DockerSocket), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
