package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/workflows"
)

// What the web UI shows, read through the real server: every per-node
// activity carries a summary naming its node and rank (user metadata), a
// per-node child its static summary, and durations in workflow inputs are
// human strings ("1m", "30m"), not nanoseconds.
func TestHistoryShowsNodeRankSummariesAndHumanDurations(t *testing.T) {
	nas := writeHub(t, "summaries", 3)
	recipe := hubRecipe("sum", "duo", "summaries", "node_outage_budget = \"30m\"\n", nas)
	f := newFleet(t, fleetOptions{nodes: 2, clusters: map[string][]string{"duo": {"n1", "n2"}}, shared: nas, recipes: map[string]string{"sum": recipe}})
	f.startControl()
	f.startNode("n1")
	f.startNode("n2")
	ctx := withTimeout(t, 3*time.Minute)
	if code, out, errOut := f.starter(ctx, "stage", "--lane", "sum"); code != 0 {
		t.Fatalf("stage: exit %d\n%s%s", code, out, errOut)
	}
	dc := converter.GetDefaultDataConverter()
	summary := func(p *commonpb.Payload) string {
		var s string
		if p != nil {
			if err := dc.FromPayload(p, &s); err != nil {
				t.Fatalf("summary payload: %v", err)
			}
		}
		return s
	}
	var stageInput string
	for _, n := range []struct {
		node string
		rank int
	}{{"n1", 0}, {"n2", 1}} {
		id := contract.StageNodeID("sum", n.node)
		var got []string
		for _, e := range history(ctx, t, f, id) {
			switch e.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				stageInput = string(e.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()[0].GetData())
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				got = append(got, summary(e.GetUserMetadata().GetSummary()))
			}
		}
		// The post-stage verify runs inside the StageBlock
		// (versionStageVerifyInBlock), and its summary says so.
		want := []string{fmt.Sprintf("%s rank %d: stage + verify sum/weights", n.node, n.rank)}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s activity summaries %q, want %q", id, got, want)
		}
		// The parent's child-started event carries the child's static summary.
		d, err := f.env.Client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		if s := summary(d.GetExecutionConfig().GetUserMetadata().GetSummary()); s != fmt.Sprintf("%s rank %d: stage sum", n.node, n.rank) {
			t.Errorf("%s static summary %q", id, s)
		}
	}
	var in map[string]any
	if err := json.Unmarshal([]byte(stageInput), &in); err != nil {
		t.Fatalf("StageNode input: %v\n%s", err, stageInput)
	}
	if in["outage_budget"] != "30m" {
		t.Errorf("StageNode input outage_budget %v, want the human string \"30m\" (the recipe's node_outage_budget):\n%s", in["outage_budget"], stageInput)
	}

	// status's workflow: the fleet probe's per-node activities and its input.
	run, err := f.env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "fleet-probe/summaries", TaskQueue: contract.ControlQueue},
		workflows.FleetProbe, contract.FleetProbeInput{Nodes: []string{"n1", "n2"}, Grace: contract.Duration(time.Second), PickupTimeout: contract.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("FleetProbe: %v", err)
	}
	var probe []string
	var probeInput string
	for _, e := range history(ctx, t, f, run.GetID()) {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			probeInput = string(e.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()[0].GetData())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			probe = append(probe, summary(e.GetUserMetadata().GetSummary()))
		}
	}
	for _, want := range []string{"n1: ssh check", "n1: node status", "n2: ssh check", "n2: node status"} {
		if !strings.Contains(strings.Join(probe, "|"), want) {
			t.Errorf("FleetProbe summaries %q lack %q", probe, want)
		}
	}
	if !strings.Contains(probeInput, `"grace":"1s"`) || !strings.Contains(probeInput, `"pickup_timeout":"5s"`) {
		t.Errorf("FleetProbe input grace is not the human \"1s\": %s", probeInput)
	}
	t.Logf("FleetProbe input: %s\nStageNode input: %s\nFleetProbe summaries: %q", probeInput, stageInput, probe)
}

// history reads a run's whole history through the server.
func history(ctx context.Context, t *testing.T, f *fleet, id string) []*historypb.HistoryEvent {
	t.Helper()
	return historyEvents(ctx, t, f.env.Client, id)
}
