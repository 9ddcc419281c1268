package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/simimage"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

// Dry runs tell the truth and leave nothing failed behind, through the
// real server, workers, Docker and a Hub double: `cutover --fetch
// --dry-run` of a lane whose repo is only on the Hub says each node's
// image state (present, with its ID) and plans the block against what
// the fetch writes ("after the fetch", its files and bytes), never "not
// in src: download it on the NAS"; `stage --dry-run` without the fetch
// names the repo missing; `fetch --dry-run` of a repo the Hub lacks exits
// 1 naming it. Every workflow those dry runs started completed: none is
// Failed in the server's list.
func TestDryRunsTellTheTruthAndLeaveNoFailedWorkflow(t *testing.T) {
	ctx := withTimeout(t, 8*time.Minute)
	dc, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		t.Fatalf("Docker is required (the nodes' image state): %v", err)
	}
	t.Cleanup(func() { dc.Close() })
	image, err := simimage.Build(ctx, dc, simimage.Options{})
	if err != nil {
		t.Fatalf("build engine-sim image: %v", err)
	}
	inspect, err := dc.ImageInspect(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	files := hubFiles(t)
	sha := s.AddRepo(hubtest.Repo{ID: "org/absent", LFSThreshold: 64 << 10, Files: hubtestFiles(files)})
	var wantFiles int
	var wantBytes int64
	for p, b := range files {
		if !strings.HasPrefix(p, "original/") {
			wantFiles, wantBytes = wantFiles+1, wantBytes+int64(len(b))
		}
	}
	dir := t.TempDir()
	hub := filepath.Join(dir, "nas", "hub")
	recipe := func(name, repo string) string {
		return fmt.Sprintf(`name = %q
cluster = "trio"
runtime = "sim"
image = %q
model = %q
command = "/engine-sim /hub --port {port}"

[[staging]]
kind = "hub-mirror"
id = "weights"
src = %q
dst = "/srv/%s"
repos = [%q]
skip = ["original/**"]
revision = %q
`, name, image, repo, hub, name, repo, sha)
	}
	f := newFleet(t, fleetOptions{nodes: 3, clusters: map[string][]string{"trio": {"n1", "n2", "n3"}}, shared: filepath.Join(dir, "nas"),
		extra:   fmt.Sprintf("hf_endpoint = %q\n", s.URL),
		recipes: map[string]string{"absent": recipe("absent", "org/absent"), "nohub": recipe("nohub", "org/nowhere")}})
	f.startControl()
	for _, n := range []string{"n1", "n2", "n3"} {
		f.startNode(n)
	}

	code, out, errOut := f.starter(ctx, "cutover", "--lane", "absent", "--fetch", "--dry-run")
	if code != 0 {
		t.Fatalf("cutover --fetch --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("cutover --fetch --dry-run:\n%s", out)
	present := "present " + contract.ShortID(inspect.ID)
	if strings.Count(out, "image   "+image+" — "+present+"\n") != 3 {
		t.Errorf("want each of the 3 nodes' image %q:\n%s", present, out)
	}
	after := fmt.Sprintf("staging weights (hub-mirror): after the fetch: copy up to %d files / %s", wantFiles, contract.HumanBytes(wantBytes))
	if strings.Count(out, after) != 3 || strings.Contains(out, "download it on the NAS") || strings.Contains(out, "would stop") {
		t.Errorf("want each node's block planned after the fetch (%q), not refused:\n%s", after, out)
	}
	fetchStep := fmt.Sprintf("fetch org/absent@%s from the Hub into %s on control: %d of %d files", sha, hub, wantFiles, wantFiles)
	if !strings.Contains(out, fetchStep) {
		t.Errorf("the fetch step does not say what it downloads (%q):\n%s", fetchStep, out)
	}

	code, out, errOut = f.starter(ctx, "stage", "--lane", "absent", "--fetch", "--dry-run", "--json")
	var d cli.DryRun
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || len(d.Nodes) != 3 || d.FetchDry == nil || d.StageError != "" {
		t.Fatalf("stage --fetch --dry-run --json: exit %d %+v\n%s%s", code, d, out, errOut)
	}
	saveHistory(t, f, contract.StageID("absent")+"/dry-run", "stage-dry-run")
	saveHistory(t, f, contract.StageNodeID("absent", "n1"), "stagenode-dry-run")
	for _, n := range d.Nodes {
		if len(n.Staging) != 1 || len(n.Staging[0].AfterFetch) != 1 || n.Staging[0].AfterFetch[0].Files != wantFiles || n.Staging[0].Error != "" || !strings.HasPrefix(n.ImageState, present) {
			t.Errorf("node %s: image %q, staging %+v", n.Node, n.ImageState, n.Staging)
		}
	}

	// Without the fetch the repo is missing, said per node; exit 0 (a
	// dry run describes, it does not fail).
	code, out, errOut = f.starter(ctx, "stage", "--lane", "absent", "--dry-run")
	if code != 0 || strings.Count(out, "models--org--absent is not in src") != 3 {
		t.Errorf("stage --dry-run of a lane whose repo is not on the NAS: exit %d\n%s%s", code, out, errOut)
	}
	// A repo the Hub lacks: the fetch's dry run says so, exit 1.
	code, out, errOut = f.starter(ctx, "fetch", "--lane", "nohub", "--dry-run")
	if code != 1 || !strings.Contains(errOut, "org/nowhere") {
		t.Errorf("fetch --dry-run of a repo the Hub lacks: exit %d, want 1 naming it\n%s%s", code, out, errOut)
	}
	code, out, errOut = f.starter(ctx, "cutover", "--lane", "nohub", "--fetch", "--dry-run")
	if code != 0 || !strings.Contains(out, "the stage would stop: ") || !strings.Contains(out, "org/nowhere") {
		t.Errorf("cutover --fetch --dry-run of a repo the Hub lacks: exit %d, want the refusal in the plan\n%s%s", code, out, errOut)
	}
	saveHistory(t, f, contract.FetchID("nohub")+"/dry-run", "fetch-dry-run-refused")
	checkNoFailedWorkflow(ctx, t, f, "stage/absent/dry-run", "fetch/absent/dry-run", "stage/absent/n1", "dry-run/fetch/nohub/", "fetch/nohub/dry-run")
}

// checkNoFailedWorkflow lists every workflow the server closed: none
// failed, and one whose ID starts with each of want completed. The list
// is the server's visibility store, updated after a run closes: it is
// read again (bounded) until every wanted run shows.
func checkNoFailedWorkflow(ctx context.Context, t *testing.T, f *fleet, want ...string) {
	t.Helper()
	var status map[string]enumspb.WorkflowExecutionStatus
	var missing []string
	for try := 0; try < 100; try++ {
		status = closedWorkflows(ctx, t, f)
		missing = missing[:0]
		for _, w := range want {
			found := false
			for id := range status {
				found = found || strings.HasPrefix(id, w)
			}
			if !found {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if len(missing) > 0 {
		t.Errorf("no closed workflow %v among %v", missing, status)
	}
	for id, st := range status {
		if st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Errorf("workflow %s closed %s", id, st)
		}
	}
	t.Logf("%d closed workflows, all completed", len(status))
}

// closedWorkflows is every closed run's status, by "ID run RUNID".
func closedWorkflows(ctx context.Context, t *testing.T, f *fleet) map[string]enumspb.WorkflowExecutionStatus {
	t.Helper()
	out := map[string]enumspb.WorkflowExecutionStatus{}
	var token []byte
	for {
		resp, err := f.env.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "ExecutionStatus != 'Running'", NextPageToken: token})
		if err != nil {
			t.Fatalf("list closed workflows: %v", err)
		}
		for _, e := range resp.GetExecutions() {
			out[e.GetExecution().GetWorkflowId()+" run "+e.GetExecution().GetRunId()] = e.GetStatus()
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out
		}
	}
}
