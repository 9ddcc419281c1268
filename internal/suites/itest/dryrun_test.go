package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
)

// treeState records every path under dir (but the Temporal state) with its
// size and modification time, to prove a dry run wrote nothing.
func treeState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "state" {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fmt.Sprintf("%v %d %d", info.Mode(), info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The dry run over a local fleet with fixture data: every node's rank,
// container, command, env, mounts and staging plan with the right byte
// counts, the steps in order — and nothing written or started.
func TestCutoverDryRunReportsThePlanAndWritesNothing(t *testing.T) {
	base := t.TempDir()
	nas, err := demo.GenerateNAS(filepath.Join(base, "nas"), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, fleetOptions{nodes: 4,
		clusters: map[string][]string{"demo-4x": {"n1", "n2", "n3", "n4"}, "demo-2x": {"n1", "n2"}},
		extra:    fmt.Sprintf("hf_cache_dir = %q\n", nas.Hub),
		shared:   filepath.Dir(nas.Hub),
	})
	if err := demo.WriteRecipes(filepath.Join(f.dir, "recipes"), "sparklane/engine-sim:dry-run", nas, freePort(t)); err != nil {
		t.Fatal(err)
	}
	f.reload()
	f.startControl()
	for _, n := range []string{"n1", "n2", "n3"} {
		f.startNode(n)
	}
	before, nasBefore := treeState(t, f.dir), treeState(t, base)
	ctx := withTimeout(t, 3*time.Minute)
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "d4", "--dry-run", "--json")
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	var d cli.DryRun
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("dry run JSON: %v\n%s", err, out)
	}
	checkDryRunMemory(t, d)
	if d.Lane != "demo-4x" || d.Action != "cutover" || len(d.Nodes) != 4 || d.TP != 4 {
		t.Fatalf("dry run header: %+v", d)
	}
	modelBytes := nasModelBytes(nas)
	plan, err := sparserows.Plan(sparserows.Spec{Src: nas.EngramSnapshot, Dst: "/x", Roots: []string{"/"}, Format: "packed", Tensors: []string{"model.layers.{L}.engram.table"}, Layers: demo.EngramLayers, Rank: 0, TP: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range d.Nodes {
		checkDryRunNode(t, i, n, modelBytes, plan.Bytes)
	}
	if len(d.Steps) < 9 || !strings.HasPrefix(d.Steps[0], "image sparklane/engine-sim:dry-run on no node of demo-4x: would be built on n1") ||
		!strings.HasPrefix(d.Steps[1], "probe fleet") {
		t.Errorf("steps: %v", d.Steps)
	}
	checkTreeUnchanged(t, before, treeState(t, f.dir), nasBefore, treeState(t, base))
	checkShippedRecipesOnlyLackPins(ctx, t, f)
}

// checkDryRunMemory: the memory fit has the demo model's weights from
// its headers on the NAS, each probed node's memory as its worker just
// read it (n4's worker is not running: a DGX Spark's by default).
func checkDryRunMemory(t *testing.T, d cli.DryRun) {
	t.Helper()
	m := d.Memory
	if m == nil || m.Weights.Bytes <= 0 || len(m.Nodes) != 4 || d.MemoryError != "" {
		t.Errorf("memory fit %+v (note %q, error %q)", m, d.MemoryNote, d.MemoryError)
		return
	}
	for _, n := range m.Nodes {
		want := "MemTotal its worker reported"
		if n.Name == "n4" {
			want = "DGX Spark default"
		}
		if n.Source != want || !n.Fits {
			t.Errorf("memory fit of %s: %+v, want it from %q and fitting", n.Name, n, want)
		}
	}
}

// nasModelBytes is what staging the model repo copies: every blob, and
// refs/main too (the mirror must resolve the revision offline).
func nasModelBytes(nas demo.NAS) int64 {
	var modelBytes int64
	blobs, _ := os.ReadDir(filepath.Join(demo.RepoDir(nas.Hub, demo.ModelRepo), "blobs"))
	for _, b := range blobs {
		info, _ := b.Info()
		modelBytes += info.Size()
	}
	if ref, err := os.Stat(filepath.Join(demo.RepoDir(nas.Hub, demo.ModelRepo), "refs", "main")); err == nil {
		modelBytes += ref.Size()
	}
	return modelBytes
}

// checkDryRunNode checks node i's rank, container, command, mounts, and
// (for a node whose worker runs) its image state and staging plan: all
// the model's bytes, and the engram rows of its rank (rank 0's bytes
// equal to rank0Bytes).
func checkDryRunNode(t *testing.T, i int, n cli.DryRunNode, modelBytes, rank0Bytes int64) {
	t.Helper()
	if n.Rank != i || n.Container != fmt.Sprintf("sparklane-demo-4x-r%d", i) || n.Env["NODE_RANK"] != fmt.Sprint(i) {
		t.Errorf("node %d: rank %d container %s NODE_RANK %s", i, n.Rank, n.Container, n.Env["NODE_RANK"])
	}
	if !strings.Contains(n.Command, "--node-rank "+fmt.Sprint(i)) || !strings.Contains(n.Command, "--nnodes 4") {
		t.Errorf("node %s command lacks the multi-node flags: %s", n.Node, n.Command)
	}
	ro := map[string]string{}
	for _, m := range n.Mounts {
		ro[m.Dst] = m.Mode
	}
	if ro["/hub"] != "ro" || ro["/engram"] != "ro" {
		t.Errorf("node %s mounts %+v: want /hub and /engram read-only", n.Node, n.Mounts)
	}
	if n.Node == "n4" {
		if n.State != "unreachable" || !strings.Contains(n.Why, "node.n4") {
			t.Errorf("n4 (worker down) state %q why %q: want unreachable, reported not fatal", n.State, n.Why)
		}
		return
	}
	// The stage's image step, dry: the plan's image (engine-sim's
	// repository, this test's tag never built) is on no node, so the head
	// says it would be built there before the run, as `image build --sim`
	// builds it, and the others that they would receive it from the head;
	// nothing is built.
	want := "would receive it from n1 once built there"
	if n.Node == "n1" {
		want = "would be built here before the run"
	}
	if !strings.HasPrefix(n.ImageState, "missing") || !strings.Contains(n.ImageState, want) {
		t.Errorf("node %s image state %q: want the image missing everywhere and %q", n.Node, n.ImageState, want)
	}
	if len(n.Staging) != 2 {
		t.Fatalf("node %s staging plan: %+v", n.Node, n.Staging)
	}
	for _, b := range n.Staging {
		if b.Plan == nil || !b.Plan.DryRun {
			t.Fatalf("node %s block %s: no dry-run plan: %+v", n.Node, b.Block, b)
		}
		switch b.Block {
		case "weights":
			if b.Plan.CopiedBytes != modelBytes || b.Plan.TotalBytes != modelBytes || b.Plan.Links == 0 {
				t.Errorf("node %s weights plan copies %d of %d bytes (links %d), want all %d", n.Node, b.Plan.CopiedBytes, b.Plan.TotalBytes, b.Plan.Links, modelBytes)
			}
		case "engram":
			_, count, _ := sparserows.Tile(demo.EngramRows[1], 4, n.Rank)
			_, count3, _ := sparserows.Tile(demo.EngramRows[3], 4, n.Rank)
			if b.Plan.Rows != count+count3 {
				t.Errorf("node %s engram plan: %d rows, want %d", n.Node, b.Plan.Rows, count+count3)
			}
			if n.Rank == 0 && b.Plan.CopiedBytes != rank0Bytes {
				t.Errorf("node %s engram plan: %d bytes, want %d", n.Node, b.Plan.CopiedBytes, rank0Bytes)
			}
		}
	}
}

// checkTreeUnchanged: the dry run changed, added or removed nothing in
// the fleet's directory and left the NAS tree as it was.
func checkTreeUnchanged(t *testing.T, before, after, nasBefore, nasAfter map[string]string) {
	t.Helper()
	for p, v := range after {
		if before[p] != v {
			t.Errorf("dry run changed %s", p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("dry run removed %s", p)
		}
	}
	if len(nasAfter) != len(nasBefore) {
		t.Errorf("dry run changed the NAS tree: %d -> %d entries", len(nasBefore), len(nasAfter))
	}
}

// checkShippedRecipesOnlyLackPins: `starter recipe check` of the shipped
// recipes reports only the pins the operator's log gives in part
// ("complete this digest"), exit 1.
func checkShippedRecipesOnlyLackPins(ctx context.Context, t *testing.T, f *fleet) {
	t.Helper()
	recipes, _ := filepath.Glob(filepath.Join("..", "..", "..", "recipes", "*.toml"))
	code, out, errOut := f.starter(ctx, append([]string{"recipe", "check"}, recipes...)...)
	if code != 1 || len(recipes) < 6 || !strings.Contains(out, "sha256:3dbc3130 has 8 of 64 hex digits: complete this digest") {
		t.Errorf("recipe check of %d shipped files: exit %d\n%s\n%s", len(recipes), code, out, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, "complete this") {
			t.Errorf("recipe check of the shipped files reports more than incomplete pins: %s", line)
		}
	}
}
