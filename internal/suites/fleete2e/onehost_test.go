package fleete2e

import (
	"context"
	"fmt"
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
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// The peer of TestRealFleet's first cutover for scripts/bench-fleet.sh:
// the same lane (fl-a: engine-sim on 3 nodes, a 32 MiB hub-mirror and the
// demo's sparse-rows tables, cold staging, bench) on the single-host demo
// path: three nodes that are directories of this machine, their workers
// inside the control service, one Docker engine.
func TestSameLaneOnOneHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dc, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		t.Fatalf("Docker is required: %v", err)
	}
	defer dc.Close()
	image, err := simimage.Build(ctx, dc, simimage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	nasDir := filepath.Join(dir, "nas")
	nas, err := demo.GenerateNAS(nasDir, 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	recipes := filepath.Join(dir, "recipes")
	if err := os.MkdirAll(recipes, 0o755); err != nil {
		t.Fatal(err)
	}
	port := sshdtest.FreePort(t)
	const lane = "fl-a1"
	if err := os.WriteFile(filepath.Join(recipes, lane+".toml"), []byte(recipeAt(lane, "fl3", image, port, "a", nas.EngramSnapshot, "1, 3", "", nasDir)), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "state_dir = %q\nrecipes_dir = %q\nhf_cache_dir = %q\nshared_roots = [%q]\nprobe_grace = \"2s\"\n\n[temporal]\nport = %d\nui_port = -1\n\n",
		filepath.Join(dir, "state"), recipes, nas.Hub, nasDir, sshdtest.FreePort(t))
	for i := 1; i <= 3; i++ {
		root := filepath.Join(dir, "nodes", fmt.Sprintf("l%d", i))
		if err := os.MkdirAll(filepath.Join(root, "mnt", "nvme", "sl"), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "[[nodes]]\nname = \"l%d\"\naddress = \"127.0.0.1\"\nroots = [\"/mnt/nvme/sl\"]\nfs_root = %q\n\n", i, root)
	}
	b.WriteString("[[clusters]]\nname = \"fl3\"\nnodes = [\"l1\", \"l2\", \"l3\"]\n")
	cfgFile := filepath.Join(dir, "sparklane.toml")
	if err := os.WriteFile(cfgFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	done := runControl(t, cfgFile)
	t.Cleanup(func() {
		cs, _ := dc.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "sparklane.lane="+lane))})
		for _, c := range cs {
			_ = dc.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
		}
	})
	waitControl(t, filepath.Join(dir, "state"), done)
	f := &realFleet{t: t, cfgFile: cfgFile}
	start := time.Now()
	r := <-f.background("--json", "cutover", "--lane", lane, "--bench")
	res := decodeCutover(t, r)
	t.Logf("MEASURE cutover fl-a (3 local nodes, cold staging, bench) on one host: %.1f s", time.Since(start).Seconds())
	if r[0] != "0" || !res.OK || res.Serve == nil || !res.Serve.Answers || res.Bench == nil {
		t.Fatalf("cutover: exit %s %+v\n%s", r[0], res, r[2])
	}
	if code, out, errOut := f.starter("stop", "--lane", lane); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
}
