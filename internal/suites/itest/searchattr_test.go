package itest

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
)

// Search attributes come from one definition and reach every run: a stage
// run's per-node child carries the lane (found by the UI's lane filter
// beside its parent), and the nightly-verify schedule and its runs do too.
// A second `schedule nightly-verify` updates the schedule in place: same
// creation time, new cron.
func TestSearchAttributesOnChildrenAndSchedulesUpdatedInPlace(t *testing.T) {
	nas := writeHub(t, "few", 3)
	recipe := hubRecipe("few", "solo", "few", "", nas)
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"solo": {"n1"}}, shared: nas, recipes: map[string]string{"few": recipe}})
	f.startControl()
	f.startNode("n1")
	ctx := withTimeout(t, 3*time.Minute)

	if code, out, errOut := f.starter(ctx, "stage", "--lane", "few"); code != 0 {
		t.Fatalf("stage: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, id := range []string{contract.StageID("few"), contract.StageNodeID("few", "n1")} {
		d, err := f.env.Client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		var lane string
		p := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[searchattr.Lane]
		if p == nil || converter.GetDefaultDataConverter().FromPayload(p, &lane) != nil || lane != "few" {
			t.Errorf("run %s: search attribute %s = %q, want \"few\"", id, searchattr.Lane, lane)
		}
	}

	sc := f.env.Client.ScheduleClient()
	if code, out, errOut := f.starter(ctx, "schedule", "nightly-verify", "--lanes", "few", "--cron", "0 3 * * *"); code != 0 {
		t.Fatalf("schedule: exit %d\n%s\n%s", code, out, errOut)
	}
	h := sc.GetHandle(ctx, cli.NightlyVerifyID)
	first, err := h.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := f.starter(ctx, "schedule", "nightly-verify", "--lanes", "few", "--cron", "30 4 * * *"); code != 0 {
		t.Fatalf("schedule again: exit %d\n%s\n%s", code, out, errOut)
	}
	second, err := h.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Info.CreatedAt.Equal(first.Info.CreatedAt) {
		t.Errorf("schedule re-created (created %s, then %s); want it updated in place", first.Info.CreatedAt, second.Info.CreatedAt)
	}
	if next := second.Info.NextActionTimes; len(next) == 0 || next[0].UTC().Hour() != 4 || next[0].UTC().Minute() != 30 {
		t.Errorf("updated schedule's next runs %v; want 04:30 UTC", next)
	}
	act, ok := second.Schedule.Action.(*client.ScheduleWorkflowAction)
	if !ok {
		t.Fatalf("schedule action %T", second.Schedule.Action)
	}
	if v, ok := act.TypedSearchAttributes.GetKeyword(searchattr.LaneKey); !ok || v != "few" {
		t.Errorf("scheduled runs' %s = %q (%v); want \"few\"", searchattr.Lane, v, ok)
	}
	if v, ok := second.SearchAttributes.GetIndexedFields()[searchattr.Lane]; !ok || !strings.Contains(string(v.GetData()), "few") {
		t.Errorf("schedule's own %s: %v", searchattr.Lane, v)
	}
	if err := h.Delete(ctx); err != nil {
		t.Fatal(err)
	}
}
