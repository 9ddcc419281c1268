package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/testkit/loopfs"
	"github.com/sparklane/sparklane/workflows"
)

// diskRecipe is a one-node sim lane staging the NAS hub into its own
// mirror under /srv (the loop-mounted root).
func diskRecipe(name, image, hub string, port int) string {
	return fmt.Sprintf(`name = %[1]q
cluster = "solo"
runtime = "sim"
image = %[2]q
model = %[3]q
command = "/engine-sim /hub --served-model-name {model} --host 0.0.0.0 --port {port}"

[defaults]
port = %[4]d
dist_port = %[5]d

[[mounts]]
src = %[6]q
dst = "/hub"
read_only = true

[[staging]]
kind = "hub-mirror"
id = "weights"
src = %[6]q
dst = "/srv/%[1]s/hf"
repos = [%[3]q]
verify = "sampled"

[probe]
ready = "5m"
`, name, image, demo.ModelRepo, port, port+1000, hub)
}

type diskJSON struct {
	WorkflowID string              `json:"workflow_id"`
	Nodes      []contract.DiskNode `json:"nodes"`
	Running    []string            `json:"running"`
	Error      string              `json:"error"`
}

func statfsFree(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// `starter disk` and `starter disk prune` through the real server and
// node worker, on a node whose root is a real 96 MiB ext4 filesystem
// (loop-mounted): two lanes staged, one served (last served recorded by
// the serve step, running); the listing shows both blocks with bytes, last
// served and verified times; a dry run removes nothing; pruning the
// running lane keeps its block; an LRU prune removes the never-served
// lane's block and the filesystem's free space grows by it.
func TestDiskListsAndPrunesStagedBlocksOnLoopFS(t *testing.T) {
	ctx := withTimeout(t, 10*time.Minute)
	dc, image := buildSimImage(ctx, t)
	nas, err := demo.GenerateNAS(filepath.Join(t.TempDir(), "nas"), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"solo": {"n1"}},
		extra: fmt.Sprintf("hf_cache_dir = %q\n", nas.Hub), shared: filepath.Dir(nas.Hub),
		recipes: map[string]string{
			"old":  diskRecipe("old", image, nas.Hub, port),
			"live": diskRecipe("live", image, nas.Hub, port+10),
		}})
	root := filepath.Join(f.dir, "nodes", "n1", "srv")
	loopfs.MountAt(t, 96, root)
	f.startControl()
	f.startNode("n1")
	t.Cleanup(func() { removeLaneContainers(dc, "old", "live") })

	for _, args := range [][]string{{"stage", "--lane", "old"}, {"stage", "--lane", "live"}, {"up", "--lane", "live"}} {
		if code, out, errOut := f.starter(ctx, args...); code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	d := &diskRun{ctx: ctx, f: f, root: root, image: image, hub: nas.Hub, port: port}
	oldBytes := d.list(t)
	d.prune(t, oldBytes)
	d.makeRoom(t)
}

// diskRun is the disk test's fleet: one node whose root is a loop-mounted
// filesystem, lanes old and live staged, live served.
type diskRun struct {
	ctx        context.Context
	f          *fleet
	root       string // n1's root on the loop filesystem
	image, hub string
	port       int
}

// disk runs `starter disk --json ARGS...` and decodes its answer.
func (d *diskRun) disk(t *testing.T, args ...string) (int, diskJSON, string) {
	t.Helper()
	code, out, errOut := d.f.starter(d.ctx, append([]string{"disk", "--json"}, args...)...)
	var res diskJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("disk %s --json is not JSON: %v\n%s\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return code, res, out + errOut
}

// list checks the listing (JSON and table) of both blocks and returns the
// old block's bytes.
func (d *diskRun) list(t *testing.T) int64 {
	ctx, f := d.ctx, d.f
	code, res, out := d.disk(t)
	if code != 0 || len(res.Nodes) != 1 || res.Nodes[0].Disk == nil {
		t.Fatalf("disk: exit %d\n%s", code, out)
	}
	saveHistory(t, f, res.WorkflowID, "disk-list")
	if len(res.Running) != 1 || res.Running[0] != "live" {
		t.Fatalf("running lanes %v, want [live]\n%s", res.Running, out)
	}
	roots := res.Nodes[0].Disk.Roots
	if len(roots) != 1 || len(roots[0].Blocks) != 2 {
		t.Fatalf("roots: %+v", roots)
	}
	var oldBytes int64
	for _, b := range roots[0].Blocks {
		if !b.Present || b.Bytes < 8<<20 || b.VerifiedAt.IsZero() || b.Error != "" {
			t.Errorf("block %s: %+v, want present, >= 8 MiB, verified", b.Dst, b)
		}
		switch b.Lanes[0] {
		case "live":
			if b.LastServed.IsZero() || time.Since(b.LastServed) > 10*time.Minute {
				t.Errorf("live block last served %v, want just now (up served it)", b.LastServed)
			}
		case "old":
			oldBytes = b.Bytes
			if !b.LastServed.IsZero() {
				t.Errorf("old block last served %v, want never", b.LastServed)
			}
		}
	}
	// The table names both blocks.
	if code, table, errOut := f.starter(ctx, "disk"); code != 0 || !strings.Contains(table, "old/weights") || !strings.Contains(table, "live/weights") || !strings.Contains(table, "RUNNING") {
		t.Errorf("disk table (exit %d):\n%s\n%s", code, table, errOut)
	}
	return oldBytes
}

// prune checks that a prune waits for n1's node lease, that a dry run
// removes nothing, that the running lane's block is kept and that an LRU
// prune frees the old block's space.
func (d *diskRun) prune(t *testing.T, oldBytes int64) {
	ctx, f, root := d.ctx, d.f, d.root
	// A prune is a mutating run: while another run holds n1's node lease
	// (the real NodeLease workflow, started here as a stage would), a
	// prune is refused naming the holder; a dry run removes nothing and
	// needs no lease.
	lease, err := f.env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.NodeLeaseID("n1"), TaskQueue: contract.ControlQueue},
		workflows.NodeLease, contract.NodeLeaseHolder{Node: "n1", WorkflowID: "stage/old", Kind: contract.LeaseStage, Lane: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if code, held, errOut := f.starter(ctx, "disk", "prune", "--lane", "old"); code == 0 || !strings.Contains(errOut, "node n1 is held by stage stage/old") {
		t.Fatalf("prune while n1 is held: exit %d, want refused naming the holder\n%s\n%s", code, held, errOut)
	}
	if _, err := os.Stat(filepath.Join(root, "old", "hf", "hub")); err != nil {
		t.Fatalf("the refused prune removed the old block: %v", err)
	}
	free0 := statfsFree(t, root)
	want := strconv.FormatInt(free0+4<<20, 10)
	code, res, out := d.disk(t, "prune", "--lru", "--free", want, "--dry-run", "--images=false")
	if code != 0 || res.Nodes[0].Disk.Prune == nil || len(res.Nodes[0].Disk.Prune.Removals) != 1 || res.Nodes[0].Disk.Prune.Removals[0].Lanes[0] != "old" || res.Nodes[0].Disk.Prune.Removals[0].Removed {
		t.Fatalf("dry-run prune: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(root, "old", "hf")); err != nil {
		t.Fatalf("dry run removed the old block: %v", err)
	}
	if err := f.env.Client.SignalWorkflow(ctx, lease.GetID(), "", contract.LeaseReleaseSignal, nil); err != nil {
		t.Fatal(err)
	}
	if err := lease.Get(ctx, nil); err != nil {
		t.Fatalf("the test's node lease did not end on release: %v", err)
	}
	code, res, out = d.disk(t, "prune", "--lane", "live")
	if p := res.Nodes[0].Disk.Prune; code != 0 || p == nil || len(p.Removals) != 0 || len(p.Kept) != 1 || !strings.Contains(p.Kept[0], "live is running") {
		t.Fatalf("prune of the running lane: exit %d\n%s", code, out)
	}
	code, res, out = d.disk(t, "prune", "--lru", "--free", want, "--images=false")
	p := res.Nodes[0].Disk.Prune
	if code != 0 || p == nil || len(p.Removals) != 1 || !p.Removals[0].Removed || p.Removals[0].Lanes[0] != "old" || !p.Enough {
		t.Fatalf("LRU prune: exit %d\n%s", code, out)
	}
	saveHistory(t, f, res.WorkflowID, "disk-prune-leased")
	if _, err := os.Lstat(filepath.Join(root, "old", "hf")); !os.IsNotExist(err) {
		t.Fatalf("old block still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "live", "hf", "hub")); err != nil {
		t.Fatalf("the running lane's block was touched: %v", err)
	}
	free1 := statfsFree(t, root)
	if free1-free0 < oldBytes*9/10 {
		t.Errorf("free space grew by %d bytes, want about the old block's %d", free1-free0, oldBytes)
	}
	t.Logf("LRU prune freed %d bytes (block listed as %d) on the loop filesystem", free1-free0, oldBytes)
}

// makeRoom checks a stage refused for min_free names what to prune, and
// with --make-room prunes it and stages.
func (d *diskRun) makeRoom(t *testing.T) {
	ctx, f, root, image, port := d.ctx, d.f, d.root, d.image, d.port
	// A stage that would fail min_free names the lanes whose blocks would
	// free enough and the prune command; with --make-room it prunes them
	// itself and stages. The old lane is staged again (never served: the
	// first to go); the big lane's min_free needs 4 MiB more than is free.
	if code, out, errOut := f.starter(ctx, "stage", "--lane", "old"); code != 0 {
		t.Fatalf("stage old again: exit %d\n%s\n%s", code, out, errOut)
	}
	free2 := statfsFree(t, root)
	big := strings.Replace(diskRecipe("big", image, d.hub, port+20), `verify = "sampled"`, fmt.Sprintf("verify = \"sampled\"\nmin_free = \"%d\"", free2+4<<20), 1)
	if err := os.WriteFile(filepath.Join(f.dir, "recipes", "big.toml"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	code, sout, errOut := f.starter(ctx, "stage", "--lane", "big")
	if code == 0 {
		t.Fatalf("stage big with %d bytes free and min_free %d succeeded\n%s", free2, free2+4<<20, sout)
	}
	for _, want := range []string{"need", "lanes old", "would free enough", "starter disk prune --lane old", "--node n1", "--make-room"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("refused stage does not say %q:\n%s", want, errOut)
		}
	}
	t.Logf("refused stage: %s", strings.TrimSpace(errOut))
	if strings.Contains(errOut, "live") {
		t.Errorf("refused stage suggests pruning the running lane live:\n%s", errOut)
	}
	if _, err := os.Stat(filepath.Join(root, "old", "hf", "hub")); err != nil {
		t.Fatalf("the refused stage removed the old block without --make-room: %v", err)
	}
	if code, out, errOut := f.starter(ctx, "stage", "--lane", "big", "--make-room"); code != 0 {
		t.Fatalf("stage big --make-room: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Lstat(filepath.Join(root, "old", "hf")); !os.IsNotExist(err) {
		t.Errorf("--make-room did not remove the old lane's block: %v", err)
	}
	for _, keep := range []string{"live", "big"} {
		if _, err := os.Stat(filepath.Join(root, keep, "hf", "hub")); err != nil {
			t.Errorf("%s's block missing after --make-room: %v", keep, err)
		}
	}
}
