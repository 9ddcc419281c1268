package serve_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/tardir"
	"github.com/sparklane/sparklane/internal/testkit/hostimage"
)

// fakeInfiniband makes DIR/dev/infiniband holding uverbs0, a character
// device with /dev/null's numbers (1, 3): a test double for the RDMA verbs
// devices this machine lacks, which Docker maps like the real ones.
func fakeInfiniband(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "dev", "infiniband")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "uverbs0"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("mknod a test device node (needs root): %v", err)
	}
	return dir
}

// hardMemlock is this process's hard RLIMIT_MEMLOCK (what an unprivileged
// dockerd can still grant), -1 when unlimited.
func hardMemlock(t *testing.T) int64 {
	t.Helper()
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Max == unix.RLIM_INFINITY {
		return -1
	}
	return int64(rl.Max)
}

func rankLogs(t *testing.T, d *client.Client, lane string) []string {
	t.Helper()
	st := waitExited(t, d, lane, 1)
	return st[0].Logs
}

// A rank container gets the shape NCCL over RoCE needs, as the renderer
// gives it (sparkrun's rootless launch on DGX Spark): host network and
// IPC, shm size, memlock unlimited and a 64 MiB stack, /dev/infiniband,
// no-new-privileges, the recipe's user and labels, no restart. Checked
// through the Docker API and from inside the container.
func TestStartRankContainerShape(t *testing.T) {
	d, img, lane := dockerLane(t)
	ib := fakeInfiniband(t)
	// The renderer's memlock is -1 (unlimited); this machine's dockerd
	// runs without CAP_SYS_RESOURCE under an 8 MiB hard memlock limit and
	// cannot raise it, so the test asks for that hard limit, read here,
	// which still proves the ulimit reaches the container's process. The
	// -1 default is asserted in internal/config's container tests.
	memlock := hardMemlock(t)
	s := spec(lane, "serve-n1", 0, "h", img, "ids", "ls:/dev/infiniband", "limits", "exit:0")
	// GPUs stay unrequested: the plan asks (a real runtime) but the recipe
	// says gpus = "none" (an empty Container.GPUs). Requests are checked
	// in TestStartRankGPURequest, since this machine has no GPU.
	s.GPUs = true
	s.Container = contract.ContainerSpec{
		Network: "host", IPC: "host", ShmSize: "1gb", ShmBytes: 1 << 30, User: "1000:1000",
		SecurityOpt: []string{"no-new-privileges"},
		Ulimits:     []contract.Ulimit{{Name: "memlock", Soft: memlock, Hard: memlock}, {Name: "stack", Soft: 67108864, Hard: 67108864}},
		Devices:     []string{ib + ":/dev/infiniband"},
		Labels:      []string{"com.example.team=ml", contract.LabelLane + "=not-this"},
	}
	ctx := context.Background()
	r, err := serve.StartRank(ctx, d, s)
	if err != nil {
		t.Fatal(err)
	}
	logs := strings.Join(rankLogs(t, d, lane), "\n")
	ins, err := d.ContainerInspect(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.HostConfig
	if hc.NetworkMode != "host" || hc.IpcMode != "host" {
		t.Errorf("network %q ipc %q, want host/host", hc.NetworkMode, hc.IpcMode)
	}
	if hc.ShmSize != 1<<30 {
		t.Errorf("shm size %d, want 1 GiB", hc.ShmSize)
	}
	ul := map[string][2]int64{}
	for _, u := range hc.Ulimits {
		ul[u.Name] = [2]int64{u.Soft, u.Hard}
	}
	if ul["memlock"] != [2]int64{memlock, memlock} || ul["stack"] != [2]int64{67108864, 67108864} {
		t.Errorf("ulimits %+v, want memlock -1:-1 and stack 67108864", ul)
	}
	if len(hc.Devices) != 1 || hc.Devices[0].PathOnHost != ib || hc.Devices[0].PathInContainer != "/dev/infiniband" || hc.Devices[0].CgroupPermissions != "rwm" {
		t.Errorf("devices %+v, want %s at /dev/infiniband rwm", hc.Devices, ib)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		t.Errorf("security opts %v, want no-new-privileges", hc.SecurityOpt)
	}
	if hc.Privileged {
		t.Error("container is privileged")
	}
	if len(hc.DeviceRequests) != 0 {
		t.Errorf("GPU requested though the recipe says none: %+v", hc.DeviceRequests)
	}
	if hc.RestartPolicy.Name != "no" {
		t.Errorf("restart policy %q, want no (a dead rank stays dead for its logs)", hc.RestartPolicy.Name)
	}
	if ins.Config.User != "1000:1000" {
		t.Errorf("user %q, want 1000:1000", ins.Config.User)
	}
	if ins.Config.Labels["com.example.team"] != "ml" || ins.Config.Labels[contract.LabelLane] != lane {
		t.Errorf("labels %v: want the recipe's label and sparklane's lane label winning", ins.Config.Labels)
	}
	for _, want := range []string{"uid=1000 gid=1000", "ls uverbs0 char", fmt.Sprintf("Max locked memory %d %d bytes", memlock, memlock), "Max stack size 67108864 67108864 bytes"} {
		if !strings.Contains(logs, want) {
			t.Errorf("inside the container: %q missing from\n%s", want, logs)
		}
	}
}

// A device the node lacks is refused before any container exists, naming it.
func TestStartRankMissingDevice(t *testing.T) {
	d, img, lane := dockerLane(t)
	s := spec(lane, "serve-n1", 0, "h", img, "exit:0")
	s.Container = contract.ContainerSpec{Network: "host", IPC: "host", Devices: []string{"/nonexistent/infiniband"}}
	_, err := serve.StartRank(context.Background(), d, s)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/infiniband") || !strings.Contains(err.Error(), "serve-n1") {
		t.Fatalf("StartRank with a missing device: %v, want an error naming the device and node", err)
	}
	if cs := listLane(t, d, lane); len(cs) != 0 {
		t.Errorf("refused start left %+v", cs)
	}
}

var shImage = &onceImage{what: "shell test image", build: buildShellImage}

// shellImage is the test program plus /bin/sh (this machine's dash and the
// libraries it loads), FROM scratch: pre_exec commands need a shell.
func shellImage(t *testing.T, d *client.Client) string {
	t.Helper()
	return shImage.get(t, d)
}

func buildShellImage(d *client.Client, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return hostimage.Build(ctx, d, "sparklane-test/serve-sh", map[string]string{"prog": bin, "bin/sh": "/bin/sh"}, "/prog")
}

// pre_exec as a mod uses it: the mod's directory is copied into the
// container, its run.sh runs there, then the serve command runs under the
// image's own entrypoint as the container's main process. A failing
// pre_exec command stops the rank before the engine starts.
func TestStartRankPreExec(t *testing.T) {
	d := dockerClient(t)
	img := shellImage(t, d)
	mod := filepath.Join(t.TempDir(), "fix-template")
	if err := os.MkdirAll(filepath.Join(mod, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "run.sh"), []byte("echo \"mod ran in $PWD\" > /workspace/marker\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "templates", "chat.jinja"), []byte("{{ messages }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dest := config.ModsContainerDir + "/fix-template"
	pre := []contract.PreExec{{Copy: mod, Dest: dest}, {Run: "cd " + dest + " && . ./run.sh"}}

	lane := newLane(t, d)
	s := spec(lane, "serve-n1", 0, "h", img, "cat:/workspace/marker", "cat:"+dest+"/templates/chat.jinja", "exit:0")
	s.PreExec = pre
	ctx := context.Background()
	startRank(t, ctx, d, s)
	st := waitExited(t, d, lane, 1)
	logs := strings.Join(st[0].Logs, "\n")
	if st[0].ExitCode != 0 || !strings.Contains(logs, "mod ran in "+dest) || !strings.Contains(logs, "{{ messages }}") {
		t.Fatalf("pre_exec then serve: exit %d, logs\n%s\nwant the mod's marker and template read by the serve command", st[0].ExitCode, logs)
	}

	lane2 := newLane(t, d)
	s2 := spec(lane2, "serve-n1", 0, "h", img, "print:1", "exit:0")
	s2.PreExec = []contract.PreExec{{Run: "echo before; exit 7"}}
	startRank(t, ctx, d, s2)
	st2 := waitExited(t, d, lane2, 1)
	if st2[0].ExitCode != 7 || strings.Contains(strings.Join(st2[0].Logs, "\n"), "line-1") {
		t.Fatalf("failing pre_exec: exit %d logs %v, want exit 7 and the serve command never run", st2[0].ExitCode, st2[0].Logs)
	}

	lane3 := newLane(t, d)
	s3 := spec(lane3, "serve-n1", 0, "h", img, "exit:0")
	s3.PreExec = []contract.PreExec{{Copy: filepath.Join(t.TempDir(), "no-such-mod"), Dest: dest}}
	if _, err := serve.StartRank(ctx, d, s3); err == nil || !strings.Contains(err.Error(), "no-such-mod") {
		t.Fatalf("missing mod directory: %v, want an error naming it", err)
	}
	if cs := listLane(t, d, lane3); len(cs) != 0 {
		t.Errorf("refused start left %+v", cs)
	}

	// A mod carried in the plan (read on the control host) is copied from
	// the plan: the node need not have the directory.
	var archive bytes.Buffer
	if err := tardir.Write(&archive, mod, dest); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(mod); err != nil {
		t.Fatal(err)
	}
	lane4 := newLane(t, d)
	s4 := spec(lane4, "serve-n1", 0, "h", img, "cat:/workspace/marker", "cat:"+dest+"/templates/chat.jinja", "exit:0")
	s4.PreExec = []contract.PreExec{{Copy: mod, Dest: dest, Archive: archive.Bytes()}, pre[1]}
	startRank(t, ctx, d, s4)
	st4 := waitExited(t, d, lane4, 1)
	if logs := strings.Join(st4[0].Logs, "\n"); st4[0].ExitCode != 0 || !strings.Contains(logs, "mod ran in "+dest) || !strings.Contains(logs, "{{ messages }}") {
		t.Fatalf("mod carried in the plan: exit %d, logs\n%s", st4[0].ExitCode, logs)
	}
}

// FindInLogs reads a real rank container's log (stdout and stderr) and
// names the lines that are not in it.
func TestFindInLogs(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	startRank(t, ctx, d, spec(lane, "serve-n1", 0, "h", img, "print:3", "eprint:gated adapters on", "exit:0"))
	waitExited(t, d, lane, 1)
	missing, err := serve.FindInLogs(ctx, d, serve.ContainerName(lane, 0), []string{"line-2", "gated adapters on", "drafter loaded"})
	if err != nil || len(missing) != 1 || missing[0] != "drafter loaded" {
		t.Fatalf("FindInLogs = %v, %v; want only \"drafter loaded\" missing", missing, err)
	}
}
