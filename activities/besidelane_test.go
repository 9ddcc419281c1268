package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/testkit/hostimage"
)

// Issue 53, item 3: while a lane's containers run on a node, StageBlock
// stages beside it under the memory floor. With MemAvailable (the seam)
// under min_available the pass pauses, its heartbeat saying why and
// beside which lane; once memory is freed it resumes and completes, and
// the block verifies. The serving lane is a real container on the local
// Docker; the block a real file tree. The same low memory on a node
// serving nothing pauses nothing: the floor guards a running engine.
func TestStageBlockPausesUnderTheMemoryFloorBesideAServingLane(t *testing.T) {
	dir := t.TempDir()
	nas, err := demo.GenerateNAS(filepath.Join(dir, "nas"), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	node := fmt.Sprintf("memguard-%d", time.Now().UnixNano())
	d := hostimage.Docker(t, "this test runs a lane's container")
	runLaneContainer(t, d, "serving", node)

	var freed atomic.Bool
	seams := &Seams{MemAvailable: func(n string) int64 {
		if n != node || !freed.Load() {
			return 3 << 30
		}
		return 20 << 30
	}}
	newNode := func(name string) *NodeActivities {
		root := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(root, "srv"), 0o755); err != nil {
			t.Fatal(err)
		}
		return &NodeActivities{Node: config.Node{Name: name, FSRoot: root, Roots: []string{"/srv"}}, SharedRoots: []string{filepath.Join(dir, "nas")},
			Log: zap.NewNop(), Seams: seams}
	}
	b := contract.Staging{Kind: "hub-mirror", ID: "weights", Src: nas.Hub, Dst: "/srv/hub", Repos: []string{demo.ModelRepo}, Verify: "sampled"}
	in := contract.StageBlockInput{Lane: "next", Block: b, Verify: true}

	// Beside the serving lane: paused until the test frees memory, which
	// it does once a heartbeat has said why the pass waits.
	beats := runStageBlock(t, newNode(node), in, func(p contract.StageProgress) {
		if p.Waiting != "" {
			freed.Store(true)
		}
	})
	want := "paused: MemAvailable 3.0 GiB under min_available 8.0 GiB"
	paused, resumed := -1, -1
	for i, p := range beats.list {
		if strings.Join(p.Beside, ",") != "serving" {
			t.Fatalf("heartbeat %d: beside %q, want the serving lane", i, p.Beside)
		}
		if p.Waiting == want && paused < 0 {
			paused = i
		}
		if paused >= 0 && p.Waiting == "" && resumed < 0 {
			resumed = i
		}
		if p.Waiting != "" && p.Waiting != want {
			t.Fatalf("heartbeat %d waits on %q, want %q", i, p.Waiting, want)
		}
	}
	t.Logf("%d heartbeats; paused from %d, resumed at %d", len(beats.list), paused, resumed)
	if paused < 0 || resumed < 0 {
		t.Fatalf("heartbeats %+v: want one waiting on %q, then one without (resumed)", beats.list, want)
	}
	if out := beats.out; out.Result.CopiedFiles == 0 || out.Verified == nil || !out.Verified.Result.Clean() {
		t.Fatalf("the pass after resuming: %+v, verified %+v", out.Result, out.Verified)
	}

	// Serving nothing, the same low memory pauses nothing.
	freed.Store(false)
	idle := runStageBlock(t, newNode(node+"-idle"), in, nil)
	for i, p := range idle.list {
		if p.Waiting != "" || len(p.Beside) != 0 {
			t.Fatalf("idle node, heartbeat %d: waiting %q beside %q, want neither", i, p.Waiting, p.Beside)
		}
	}
	if idle.out.Result.CopiedFiles == 0 {
		t.Fatalf("idle node: %+v", idle.out.Result)
	}
}

// stageRun is one StageBlock run in the SDK's activity test environment:
// its result and every heartbeat it sent, in order.
type stageRun struct {
	out  contract.StageBlockResult
	list []contract.StageProgress
}

// runStageBlock runs a.StageBlock(in) as an activity in the SDK's test
// environment and records every heartbeat it makes (through an activity
// interceptor: the SDK sends them on throttled), each handed to seen (may
// be nil) as it is made.
func runStageBlock(t *testing.T, a *NodeActivities, in contract.StageBlockInput, seen func(contract.StageProgress)) stageRun {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	var mu sync.Mutex
	var run stageRun
	rec := &beatRecorder{seen: func(details []any) {
		if len(details) != 1 {
			t.Errorf("heartbeat details %v, want one value", details)
			return
		}
		p, ok := details[0].(contract.StageProgress)
		if !ok {
			t.Errorf("heartbeat details are a %T, want contract.StageProgress", details[0])
			return
		}
		mu.Lock()
		run.list = append(run.list, p)
		mu.Unlock()
		if seen != nil {
			seen(p)
		}
	}}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{rec}})
	env.SetTestTimeout(5 * time.Minute)
	env.RegisterActivity(a)
	v, err := env.ExecuteActivity(a.StageBlock, in)
	if err != nil {
		t.Fatalf("StageBlock on %s: %v", a.Node.Name, err)
	}
	if err := v.Get(&run.out); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return run
}

// beatRecorder is a worker interceptor that hands every heartbeat an
// activity records to seen, before the SDK throttles what it sends.
type beatRecorder struct {
	interceptor.WorkerInterceptorBase
	seen func(details []any)
}

// InterceptActivity wraps each activity so its outbound calls are seen.
func (r *beatRecorder) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &beatInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, r: r}
}

type beatInbound struct {
	interceptor.ActivityInboundInterceptorBase
	r *beatRecorder
}

// Init hands the activity an outbound interceptor that records heartbeats.
func (i *beatInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	return i.Next.Init(&beatOutbound{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: outbound}, r: i.r})
}

type beatOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	r *beatRecorder
}

// RecordHeartbeat records the details, then lets the SDK send them.
func (o *beatOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	o.r.seen(details)
	o.Next.RecordHeartbeat(ctx, details...)
}

// runLaneContainer starts a container labelled as lane's rank on node (a
// sleeping process in a FROM scratch image of this machine's sleep,
// hostimage.Build), as serve starts an engine, and removes it when the
// test ends.
func runLaneContainer(t *testing.T, d *client.Client, lane, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	img, err := hostimage.Build(ctx, d, "sparklane-test/activities-sleep", map[string]string{"sleep": "/bin/sleep"}, "")
	if err != nil {
		t.Fatalf("build the sleeping test image: %v", err)
	}
	c, err := d.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"/sleep", "600"},
		Labels: map[string]string{contract.LabelLane: lane, contract.LabelNode: node, "sparklane.test": "1"}},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})
	if err := d.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
}
