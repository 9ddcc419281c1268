package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/node"
)

// fakeImages is imageHaver over a table: node → images it has; err[node]
// is what asking that node returns.
type fakeImages struct {
	have  map[string][]string
	err   map[string]error
	asked []string
}

func (f *fakeImages) HasImage(_ context.Context, node, image string) (bool, error) {
	f.asked = append(f.asked, node+" "+image)
	if err := f.err[node]; err != nil {
		return false, err
	}
	for _, im := range f.have[node] {
		if im == image {
			return true, nil
		}
	}
	return false, nil
}

func simPlan(runtime, image string, nodes ...string) *contract.LanePlan {
	p := &contract.LanePlan{Lane: "sim-demo", Runtime: runtime}
	for i, n := range nodes {
		p.Nodes = append(p.Nodes, contract.NodePlan{Node: n, Rank: i, Head: i == 1, Image: contract.MustImageRef(image)})
	}
	return p
}

// A sim lane whose image is the engine-sim repository (any tag, no
// digest) is built here only when no node of the lane has it; any other
// image — another runtime, a registry host in its name, a pinned digest —
// comes from where it comes from today, and no node is even asked.
func TestSimImageBuiltOnlyWhenOnNoNode(t *testing.T) {
	ctx := context.Background()
	const pin = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		name, runtime, image string
		have                 map[string][]string
		build, ask           bool
	}{
		{"absent everywhere", "sim", "sparklane/engine-sim:latest", nil, true, true},
		{"another tag, absent", "sim", "sparklane/engine-sim:v2", map[string][]string{"b": {"sparklane/engine-sim:latest"}}, true, true},
		{"on one node", "sim", "sparklane/engine-sim:latest", map[string][]string{"c": {"sparklane/engine-sim:latest"}}, false, true},
		{"a registry host in its name", "sim", "10.0.0.5:5000/sparklane/engine-sim:latest", nil, false, false},
		{"docker.io spelled out", "sim", "docker.io/sparklane/engine-sim:latest", nil, false, false},
		{"pinned digest", "sim", "sparklane/engine-sim:latest" + pin, nil, false, false},
		{"not a sim lane", "vllm", "sparklane/engine-sim:latest", nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeImages{have: c.have}
			plan := simPlan(c.runtime, c.image, "a", "b", "c")
			build, err := simImageMissing(ctx, plan, f)
			if err != nil {
				t.Fatal(err)
			}
			if build != c.build {
				t.Errorf("build = %v, want %v (asked %v)", build, c.build, f.asked)
			}
			if (len(f.asked) > 0) != c.ask {
				t.Errorf("asked the nodes %v; want asked = %v", f.asked, c.ask)
			}
			if c.build && (len(f.asked) != 3 || !strings.HasSuffix(f.asked[0], " "+plan.Nodes[0].Image.Name)) {
				t.Errorf("not every node was asked for %s: %v", plan.Nodes[0].Image.Name, f.asked)
			}
		})
	}
	// The head builds, unless stage --node names another node.
	plan := simPlan("sim", "sparklane/engine-sim:latest", "a", "b", "c")
	if got := simBuildNode(plan, ""); got != "b" {
		t.Errorf("built on %s, want the head b", got)
	}
	if got := simBuildNode(plan, "c"); got != "c" {
		t.Errorf("built on %s, want --node c", got)
	}
	// A node whose Docker cannot be asked stops it, naming the node.
	f := &fakeImages{err: map[string]error{"b": errors.New("node b: cannot ask its Docker whether it has image sparklane/engine-sim:latest: connection refused")}}
	if _, err := simImageMissing(ctx, plan, f); err == nil || !strings.Contains(err.Error(), "node b") {
		t.Errorf("an unreachable Docker: err = %v, want one naming node b", err)
	}
}

// nodeImages asks each node's own Docker: the machine's for a local node
// (the image this test names is on no Docker), and a node whose Docker
// does not answer is an error naming it.
func TestNodeImagesAsksEachNodesDocker(t *testing.T) {
	ctx := context.Background()
	dead := "unix://" + t.TempDir() + "/docker.sock"
	cfg := &config.Config{File: "sparklane.toml", Nodes: []config.Node{{Name: "here"}, {Name: "gone", Docker: dead}}}
	have := &nodeImages{cfg: cfg}
	defer have.Close()
	ok, err := have.HasImage(ctx, "here", "sparklane/engine-sim:no-such-tag-"+strings.ReplaceAll(t.Name(), "/", "-"))
	if err != nil || ok {
		t.Errorf("a tag no Docker has: ok = %v, err = %v", ok, err)
	}
	_, err = have.HasImage(ctx, "gone", "sparklane/engine-sim:latest")
	if err == nil || !strings.Contains(err.Error(), "node gone") || !strings.Contains(err.Error(), "sparklane/engine-sim:latest") {
		t.Errorf("a Docker that does not answer: err = %v, want one naming node gone and the image", err)
	}
	plan := simPlan("sim", "sparklane/engine-sim:latest", "gone")
	if _, err := simImageMissing(ctx, plan, have); err == nil || !strings.Contains(err.Error(), "node gone") {
		t.Errorf("simImageMissing: err = %v, want one naming node gone", err)
	}
}

// A dry run of a sim lane whose engine-sim image no node has says it
// would be built on the head (or stage --node), from what, and that the
// other nodes receive it from there; it builds nothing. With --json the
// same is in image_build and each node's image_state.
func TestDryRunSaysTheSimImageWouldBeBuilt(t *testing.T) {
	cfgPath := simDemoFleet(t, 2, "/mnt/nas/hub")
	tag := "sparklane/engine-sim:dry-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	recipe := filepath.Join(filepath.Dir(cfgPath), "recipes", "sim-demo.toml")
	b, err := os.ReadFile(recipe)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(string(b), `image = "sparklane/engine-sim:latest"`, fmt.Sprintf("image = %q", tag), 1)
	if body == string(b) {
		t.Fatal("the shipped sim-demo.toml no longer names sparklane/engine-sim:latest")
	}
	if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runStarter(t, "--config", cfgPath, "cutover", "--lane", "sim", "--dry-run")
	want := "image: on no node of sim-demo: would be built on spark1 from ./engine-sim of "
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, tag+" — missing: would receive it from spark1 once built there") {
		t.Errorf("cutover --dry-run: exit %d, want %q\n%s%s", code, want, out, errOut)
	}
	code, out, errOut = runStarter(t, "--config", cfgPath, "--json", "stage", "--lane", "sim", "--node", "spark2", "--dry-run")
	var d DryRun
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("stage --dry-run --json: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(d.ImageBuild, "would be built on spark2") || !strings.HasPrefix(d.Nodes[1].ImageState, "missing: would be built here") ||
		!strings.Contains(d.Nodes[0].ImageState, "from spark2") || !strings.Contains(d.Steps[0], "would be built on spark2") {
		t.Errorf("stage --node spark2 --dry-run: image_build %q, states %q / %q, first step %q", d.ImageBuild, d.Nodes[0].ImageState, d.Nodes[1].ImageState, d.Steps[0])
	}
	dc, err := node.DockerClient(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if _, err := dc.ImageInspect(context.Background(), tag); err == nil {
		t.Errorf("a dry run built %s", tag)
	}
}
