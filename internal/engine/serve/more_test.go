package serve_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/ranklogs"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// lyingDocker is a test double over the real engine whose stop and remove
// report success but do nothing — the failure a verified stop exists for
// (a tool once printed "Stopped" while containers kept the GPU). A real
// daemon cannot be made to do this on demand.
type lyingDocker struct{ serve.Docker }

func (lyingDocker) ContainerStop(context.Context, string, container.StopOptions) error { return nil }
func (lyingDocker) ContainerRemove(context.Context, string, container.RemoveOptions) error {
	return nil
}

func TestStopLaneLooksAgain(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	startRank(t, ctx, d, spec(lane, "serve-n1", 0, "h", img, "sleep"))
	_, err := serve.StopLane(ctx, lyingDocker{d}, lane, time.Second)
	if typ, _ := fault.TypeOf(err); typ != fault.StopIncomplete {
		t.Fatalf("StopLane whose stop did nothing: %v, want StopIncomplete", err)
	}
	if name := serve.ContainerName(lane, 0); !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "running") {
		t.Errorf("StopIncomplete does not name %s and its state: %v", name, err)
	}
}

func TestStartRankConcurrent(t *testing.T) {
	d, img, lane := dockerLane(t)
	s := spec(lane, "serve-n1", 0, "h", img, "sleep")
	var wg sync.WaitGroup
	res := make([]serve.RankStarted, 3)
	errs := make([]error, 3)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = serve.StartRank(context.Background(), d, s)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent StartRank %d: %v", i, err)
		}
	}
	cs := listLane(t, d, lane)
	if len(cs) != 1 || cs[0].State != "running" {
		t.Fatalf("after 3 concurrent starts the lane has %+v, want one running container", cs)
	}
	for i, r := range res {
		if r.ID != cs[0].ID {
			t.Errorf("start %d returned %s, the running container is %s", i, r.ID, cs[0].ID)
		}
	}
}

// There is no GPU here: the real engine refuses the NVIDIA device request,
// which proves it was sent, and the half-made container is not left behind.
func TestStartRankGPURequest(t *testing.T) {
	d, img, lane := dockerLane(t)
	s := spec(lane, "serve-n1", 0, "h", img, "sleep")
	s.GPUs = true
	_, err := serve.StartRank(context.Background(), d, s)
	if err == nil {
		cs := listLane(t, d, lane)
		if len(cs) != 1 {
			t.Fatalf("GPU rank started but lane has %+v", cs)
		}
		ins, _ := d.ContainerInspect(context.Background(), cs[0].ID)
		dr := ins.HostConfig.DeviceRequests
		if len(dr) != 1 || dr[0].Driver != "nvidia" || dr[0].Count != -1 || len(dr[0].Capabilities) != 1 || dr[0].Capabilities[0][0] != "gpu" {
			t.Errorf("device requests = %+v, want nvidia, all GPUs", dr)
		}
		return // an engine with the NVIDIA runtime
	}
	if !strings.Contains(err.Error(), "nvidia") || !strings.Contains(err.Error(), serve.ContainerName(lane, 0)) {
		t.Errorf("GPU start without a GPU runtime: %v, want the engine's nvidia error naming the container", err)
	}
	if cs := listLane(t, d, lane); len(cs) != 0 {
		t.Errorf("failed start left %+v", cs)
	}
}

// A control activity inspects a remote node's lane through SSH: the same
// engine calls, with log demultiplexing, over a stream-local forward.
func TestInspectLaneOverSSH(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	startRank(t, ctx, d, spec(lane, "serve-n1", 0, "h", img, "print:5", "nap:100", "eprint:boom", "exit:9"))
	waitRankExited(t, d, serve.ContainerName(lane, 0))
	srv := sshdtest.Start(t)
	tg := srv.Target()
	remote, err := node.DockerClient(ctx, "unix:///var/run/docker.sock", &tg)
	if err != nil {
		t.Fatalf("docker over SSH: %v", err)
	}
	defer remote.Close()
	st, err := serve.InspectLane(ctx, remote, lane, 3)
	if err != nil {
		t.Fatalf("InspectLane over SSH: %v", err)
	}
	if len(st) != 1 || st[0].ExitCode != 9 || len(st[0].Logs) != 3 || st[0].Logs[2] != "boom" {
		t.Fatalf("InspectLane over SSH = %+v, want exit 9 and the last 3 lines ending in boom", st)
	}
	res, err := serve.StopLane(ctx, remote, lane, time.Second)
	if err != nil || len(res.Stopped) != 1 {
		t.Fatalf("StopLane over SSH = %+v, %v", res, err)
	}
	if cs := listLane(t, d, lane); len(cs) != 0 {
		t.Errorf("StopLane over SSH left %+v", cs)
	}
}

// A rank's env_from values are masked for every reader of its log through
// this package — InspectLane (the control service's readiness wait, which
// never resolves a secret) and CopyLogs (`starter logs`) — from the
// container's own label and env; the label holds names only.
func TestSecretEnvIsMaskedForEveryLogReader(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const secret = "hf_secret_value_7391"
	s := spec(lane, "serve-n1", 0, "h", img, "env:HF_TOKEN", "env:PLAIN", "eprint:loading with token "+secret+" now", "exit:1")
	s.Env = map[string]string{"HF_TOKEN": secret, "PLAIN": "visible-value"}
	s.SecretEnv = []string{"HF_TOKEN"}
	startRank(t, ctx, d, s)
	st := waitExited(t, d, lane, 1)
	logs := strings.Join(st[0].Logs, "\n")
	if strings.Contains(logs, secret) || !strings.Contains(logs, "HF_TOKEN=***") || !strings.Contains(logs, "loading with token *** now") || !strings.Contains(logs, "PLAIN=visible-value") {
		t.Errorf("InspectLane logs:\n%s\nwant HF_TOKEN's value masked and PLAIN's shown", logs)
	}
	ins, err := d.ContainerInspect(ctx, serve.ContainerName(lane, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := ins.Config.Labels[contract.LabelSecretEnv]; got != "HF_TOKEN" {
		t.Errorf("label %s = %q, want the names only", contract.LabelSecretEnv, got)
	}
	srcs, err := ranklogs.LaneLogSources(ctx, d, lane, "serve-n1", -1)
	if err != nil || len(srcs) != 1 {
		t.Fatalf("LaneLogSources = %v, %v", srcs, err)
	}
	var out bytes.Buffer
	if err := ranklogs.CopyLogs(ctx, d, srcs[0], "all", false, &sync.Mutex{}, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), secret) || !strings.Contains(out.String(), "[serve-n1 r0] HF_TOKEN=***") || !strings.Contains(out.String(), "PLAIN=visible-value") {
		t.Errorf("CopyLogs:\n%s\nwant HF_TOKEN's value masked and PLAIN's shown", out.String())
	}
}
