package itest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/simimage"
)

// Issue 14, items 4 and 6, through the real server, workers and containers:
// a lane with a create = true JIT cache mount and a sparse-copy engram block
// whose rows_env is not in the recipe serves on fresh nodes. The cache dirs
// are made under each node's root; SPARK_ENGRAM_ROWS is filled per layer
// from the staged manifest (two layers, 100,003 and 100,019 rows) and
// engine-sim, which cross-checks each rank's tables against it, loads.
func TestServeCreatesJITCacheAndFillsEngramRows(t *testing.T) {
	ctx := withTimeout(t, 10*time.Minute)
	dc, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		t.Fatalf("Docker is required for this test (real containers): %v", err)
	}
	t.Cleanup(func() { dc.Close() })
	image, err := simimage.Build(ctx, dc, simimage.Options{})
	if err != nil {
		t.Fatalf("build engine-sim image: %v", err)
	}
	nas, err := demo.GenerateNAS(filepath.Join(t.TempDir(), "nas"), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	recipe := fmt.Sprintf(`name = "rows14"
cluster = "pair"
runtime = "sim"
image = %q
model = %q
command = "/engine-sim /hub --served-model-name {model} --host 0.0.0.0 --port {port} --tp {tensor_parallel} --decode-tps 2000 --prefill-tps 100000"

[defaults]
port = %d
dist_port = %d

[[mounts]]
src = %q
dst = "/hub"
read_only = true

[[mounts]]
src = "/srv/cache/{lane}/jit"
dst = "/jit"
create = true

[[staging]]
kind = "sparse-rows"
id = "engram"
format = "sparse-copy"
src = %q
dst = "/srv/engram"
tensors = ["model.layers.{L}.engram.table"]
layers = [1, 3]
mount = "/engram"
env = "SPARK_ENGRAM_DIR"
rows_env = "SPARK_ENGRAM_ROWS"

[probe]
ready = "2m"
decode_prompt_tokens = 64
decode_max_tokens = 16
`, image, demo.ModelRepo, port, port+1000, nas.Hub, nas.EngramSnapshot)
	f := newFleet(t, fleetOptions{nodes: 2, clusters: map[string][]string{"pair": {"n1", "n2"}},
		extra: fmt.Sprintf("hf_cache_dir = %q\n", nas.Hub), shared: filepath.Dir(nas.Hub),
		recipes: map[string]string{"rows14": recipe}})
	f.startControl()
	f.startNode("n1")
	f.startNode("n2")
	t.Cleanup(func() { removeLaneContainers(dc, "rows14") })
	for _, n := range []string{"n1", "n2"} {
		if _, err := os.Stat(filepath.Join(f.dir, "nodes", n, "srv", "cache")); !os.IsNotExist(err) {
			t.Fatalf("node %s: the cache exists before the first serve (%v)", n, err)
		}
	}
	code, res, errOut := cutover(t, f, "--lane", "rows14")
	if code != 0 {
		t.Fatalf("cutover on fresh nodes: exit %d, %+v\n%s", code, res, errOut)
	}
	want := fmt.Sprintf("%d,%d", demo.EngramRows[1], demo.EngramRows[3])
	cs, err := dc.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "sparklane.lane=rows14"))})
	if err != nil || len(cs) != 2 {
		t.Fatalf("running rank containers: %d (%v), want 2", len(cs), err)
	}
	for _, c := range cs {
		n := c.Labels["sparklane.node"]
		jit := filepath.Join(f.dir, "nodes", n, "srv", "cache", "rows14", "jit")
		if fi, err := os.Stat(jit); err != nil || !fi.IsDir() {
			t.Errorf("node %s: JIT cache %s not created: %v", n, jit, err)
		}
		ins, err := dc.ContainerInspect(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !contains(ins.Config.Env, "SPARK_ENGRAM_ROWS="+want) {
			t.Errorf("node %s: env %v, want SPARK_ENGRAM_ROWS=%s from the staged manifest", n, ins.Config.Env, want)
		}
		bound := false
		for _, m := range ins.Mounts {
			bound = bound || (m.Destination == "/jit" && m.Source == jit && m.RW)
		}
		if !bound {
			t.Errorf("node %s: /jit is not %s bound read-write: %+v", n, jit, ins.Mounts)
		}
		logs := containerLogs(t, ctx, c.ID)
		if !strings.Contains(logs, "engram files checked") {
			t.Errorf("node %s: engine-sim did not check its engram tables against SPARK_ENGRAM_ROWS:\n%s", n, logs)
		}
	}
	if code, out, errOut := f.starter(ctx, "stop", "--lane", "rows14"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func containerLogs(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	dc, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	rc, err := dc.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}
