package simimage_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/probe"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/simimage"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// dockerClient connects to the real local Docker engine; no Docker is a
// failure, never a skip.
func dockerClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("Docker client: %v (these tests need the Docker engine at /var/run/docker.sock)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("Docker engine not reachable at %s: %v (these tests need a running Docker engine; start dockerd)", cli.DaemonHost(), err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func moduleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestBuildTagsByHashAndSkipsRebuild(t *testing.T) {
	cli := dockerClient(t)
	ctx := context.Background()
	var log bytes.Buffer
	ref, err := simimage.Build(ctx, cli, simimage.Options{ModuleDir: moduleDir(), Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^sparklane/engine-sim:[0-9a-f]{12}$`).MatchString(ref) {
		t.Fatalf("ref %q is not %s:<12 hex>", ref, simimage.Repo)
	}
	img, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config == nil || img.Config.Labels[simimage.LabelVersion] != strings.TrimPrefix(ref, simimage.Repo+":") {
		t.Errorf("image %s lacks label %s=<version>: %+v", ref, simimage.LabelVersion, img.Config)
	}
	if img.Config == nil || strings.Join(img.Config.Entrypoint, " ") != "/engine-sim" {
		t.Errorf("entrypoint %v", img.Config.Entrypoint)
	}
	latest, err := cli.ImageInspect(ctx, simimage.Repo+":latest")
	if err != nil || latest.ID != img.ID {
		t.Errorf(":latest is %s (%v), want %s", latest.ID, err, img.ID)
	}

	// A given binary is tagged by its hash and built once: the second
	// Build finds the tag and skips. (A prebuilt binary, because other
	// engineers edit the shared tree while this runs.)
	bin := filepath.Join(t.TempDir(), "engine-sim")
	gb := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", bin, "./engine-sim")
	gb.Dir = moduleDir()
	gb.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := gb.CombinedOutput(); err != nil {
		t.Fatalf("go build ./engine-sim: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(bin)
	sum := sha256.Sum256(data)
	want := simimage.Repo + ":" + hex.EncodeToString(sum[:])[:12]
	ref1, err := simimage.Build(ctx, cli, simimage.Options{Binary: bin})
	if err != nil || ref1 != want {
		t.Fatalf("build from %s: %q %v, want %q", bin, ref1, err, want)
	}
	img1, _ := cli.ImageInspect(ctx, ref1)
	log.Reset()
	ref2, err := simimage.Build(ctx, cli, simimage.Options{Binary: bin, Log: &log})
	if err != nil || ref2 != want {
		t.Fatalf("second build: %q %v, want %q", ref2, err, want)
	}
	if !strings.Contains(log.String(), "already present") {
		t.Errorf("second build did not skip: %q", log.String())
	}
	img2, _ := cli.ImageInspect(ctx, ref2)
	if img2.ID != img1.ID || img2.Created != img1.Created {
		t.Errorf("image rebuilt: %s/%s vs %s/%s", img2.ID, img2.Created, img1.ID, img1.Created)
	}

	if _, err := simimage.Build(ctx, cli, simimage.Options{ModuleDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "engine-sim/main.go") {
		t.Errorf("build outside the module: %v", err)
	}
}

// simImageAndModel builds the engine-sim image from this module and writes
// a small model tree for it; it returns the image reference and the tree.
func simImageAndModel(t *testing.T, cli *client.Client) (ref, model string) {
	t.Helper()
	ref, err := simimage.Build(context.Background(), cli, simimage.Options{ModuleDir: moduleDir()})
	if err != nil {
		t.Fatal(err)
	}
	return ref, simtest.WriteModel(t, filepath.Join(t.TempDir(), "model"), simtest.Model{})
}

// TestTwoContainersJoinAndServe runs a 2-rank lane of real engine-sim
// containers (host network, model bind-mounted read-only), waits with
// probe.WaitReady (rank states from the Docker API), smoke-tests it, then
// kills rank 1 and checks rank 0 exits non-zero naming it.
func TestTwoContainersJoinAndServe(t *testing.T) {
	cli := dockerClient(t)
	ctx := context.Background()
	ref, model := simImageAndModel(t, cli)
	run := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	labels := map[string]string{"sparklane.test": "1", "sparklane.test.run": run}
	t.Cleanup(func() {
		f := filters.NewArgs(filters.Arg("label", "sparklane.test=1"), filters.Arg("label", "sparklane.test.run="+run))
		cs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: f})
		if err != nil {
			t.Errorf("list test containers: %v", err)
			return
		}
		for _, c := range cs {
			if err := cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}); err != nil {
				t.Errorf("remove test container %s: %v", c.Names, err)
			}
		}
	})

	port, dist := simtest.FreePort(t), simtest.FreePort(t)
	ids := make([]string, 2)
	for rank := 1; rank >= 0; rank-- { // worker first: it must wait for rank 0
		cmd := []string{"/model", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--nnodes", "2", "--node-rank", fmt.Sprint(rank),
			"--dist-init-addr", fmt.Sprintf("127.0.0.1:%d", dist), "--served-model-name", "org/sim", "--mem-fraction-static", "0.88", "--nofollow"}
		cc, err := cli.ContainerCreate(ctx, &container.Config{Image: ref, Cmd: cmd, Labels: labels, Env: []string{"ENGINE_SIM_DECODE_TPS=200"}},
			&container.HostConfig{NetworkMode: "host", Binds: []string{model + ":/model:ro"}}, nil, nil, fmt.Sprintf("sparklane-simimage-test-%s-r%d", run, rank))
		if err != nil {
			t.Fatalf("create rank %d: %v", rank, err)
		}
		ids[rank] = cc.ID
		if err := cli.ContainerStart(ctx, cc.ID, container.StartOptions{}); err != nil {
			t.Fatalf("start rank %d: %v", rank, err)
		}
	}
	logs := func(id string) []string {
		rc, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "50"})
		if err != nil {
			return []string{"logs: " + err.Error()}
		}
		defer rc.Close()
		var out bytes.Buffer
		stdcopy.StdCopy(&out, &out, rc)
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	ranks := func(ctx context.Context) ([]probe.RankState, error) {
		var out []probe.RankState
		for rank, id := range ids {
			ci, err := cli.ContainerInspect(ctx, id)
			if err != nil {
				return nil, err
			}
			st := probe.RankState{Node: "local", Rank: rank, Container: ci.Name, State: ci.State.Status, ExitCode: ci.State.ExitCode}
			if st.Exited() {
				st.Logs = logs(id)
			}
			out = append(out, st)
		}
		return out, nil
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	res, err := probe.WaitReady(ctx, probe.ReadyInput{BaseURL: base, Budget: time.Minute, Interval: 200 * time.Millisecond}, ranks, nil)
	if err != nil {
		t.Fatalf("lane not ready: %v\nrank 0 log:\n%s", err, strings.Join(logs(ids[0]), "\n"))
	}
	if res.Model != "org/sim" {
		t.Errorf("model %q", res.Model)
	}
	sr, err := probe.Smoke(ctx, base, "", []contract.Smoke{{Prompt: "What is 127*89?", Expect: "11303"}})
	if err != nil || len(sr) != 1 || !sr[0].OK {
		t.Fatalf("smoke: %+v %v", sr, err)
	}
	if l := strings.Join(logs(ids[0]), "\n"); !strings.Contains(l, "rank 1 joined") || !strings.Contains(l, "ignoring engine flag --mem-fraction-static 0.88") {
		t.Errorf("rank 0 log lacks the join / ignored flag lines:\n%s", l)
	}

	// Kill rank 1: rank 0 exits non-zero and says which rank left.
	if err := cli.ContainerKill(ctx, ids[1], "KILL"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	okc, errc := cli.ContainerWait(wctx, ids[0], container.WaitConditionNotRunning)
	select {
	case w := <-okc:
		if w.StatusCode == 0 {
			t.Errorf("rank 0 exited 0 after rank 1 was killed")
		}
	case err := <-errc:
		t.Fatalf("rank 0 still running after rank 1 was killed: %v", err)
	}
	if l := logs(ids[0]); !strings.Contains(l[len(l)-1], "rank 1") {
		t.Errorf("rank 0's last log line does not name rank 1: %q", l[len(l)-1])
	}
}

// TestCorruptTreeContainerFailsWaitReady: a container given a corrupt tree
// exits, and WaitReady fails at once with RankExited quoting the engine's
// own one-line message from the container log.
func TestCorruptTreeContainerFailsWaitReady(t *testing.T) {
	cli := dockerClient(t)
	ctx := context.Background()
	ref, model := simImageAndModel(t, cli)
	if err := os.Remove(filepath.Join(model, "model-00002-of-00002.safetensors")); err != nil {
		t.Fatal(err)
	}
	run := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	port := simtest.FreePort(t)
	cc, err := cli.ContainerCreate(ctx, &container.Config{Image: ref, Cmd: []string{"/model", "--port", fmt.Sprint(port)}, Labels: map[string]string{"sparklane.test": "1", "sparklane.test.run": run}},
		&container.HostConfig{NetworkMode: "host", Binds: []string{model + ":/model:ro"}}, nil, nil, "sparklane-simimage-test-"+run+"-corrupt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cli.ContainerRemove(context.Background(), cc.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("remove test container: %v", err)
		}
	})
	if err := cli.ContainerStart(ctx, cc.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	ranks := func(ctx context.Context) ([]probe.RankState, error) {
		ci, err := cli.ContainerInspect(ctx, cc.ID)
		if err != nil {
			return nil, err
		}
		st := probe.RankState{Node: "local", Rank: 0, Container: ci.Name, State: ci.State.Status, ExitCode: ci.State.ExitCode}
		if st.Exited() {
			rc, err := cli.ContainerLogs(ctx, cc.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "50"})
			if err != nil {
				return nil, err
			}
			var out bytes.Buffer
			stdcopy.StdCopy(&out, &out, rc)
			rc.Close()
			st.Logs = strings.Split(strings.TrimSpace(out.String()), "\n")
		}
		return []probe.RankState{st}, nil
	}
	start := time.Now()
	_, err = probe.WaitReady(ctx, probe.ReadyInput{BaseURL: fmt.Sprintf("http://127.0.0.1:%d", port), Budget: time.Minute, Interval: 200 * time.Millisecond}, ranks, nil)
	if typ, _ := fault.TypeOf(err); typ != fault.RankExited {
		t.Fatalf("WaitReady on a corrupt tree: %v (type %q), want %s", err, typ, fault.RankExited)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("reported after %s, want within 5s", took)
	}
	for _, want := range []string{"exit code 1", "engine-sim: /model/model-00002-of-00002.safetensors: shard named by /model/model.safetensors.index.json is missing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
