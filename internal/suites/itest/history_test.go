package itest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
)

// historyEvents are the events of the latest run of workflow id.
func historyEvents(ctx context.Context, t *testing.T, c client.Client, id string) []*historypb.HistoryEvent {
	t.Helper()
	it := c.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var out []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		out = append(out, e)
	}
	return out
}

// saveHistory writes the latest run of workflow id as JSON into
// workflows/testdata/histories/NAME.json when SPARKLANE_WRITE_HISTORIES is
// set: the replay tests in package workflows run those committed histories
// against the current workflow code.
func saveHistory(t *testing.T, f *fleet, id, name string) {
	t.Helper()
	if os.Getenv("SPARKLANE_WRITE_HISTORIES") == "" {
		return
	}
	h := &historypb.History{Events: historyEvents(context.Background(), t, f.env.Client, id)}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "..", "workflows", "testdata", "histories")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote history %s (%d events)", name, len(h.Events))
}

// activitiesScheduled counts the activities of type name the latest run of
// workflow id scheduled.
func activitiesScheduled(t *testing.T, f *fleet, id, name string) int {
	t.Helper()
	n := 0
	for _, e := range historyEvents(context.Background(), t, f.env.Client, id) {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == name {
			n++
		}
	}
	return n
}

// historySize is the number of events of the latest run of workflow id
// and their size as JSON.
func historySize(t *testing.T, f *fleet, id string) (events, size int) {
	t.Helper()
	for _, e := range historyEvents(context.Background(), t, f.env.Client, id) {
		b, err := protojson.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		events, size = events+1, size+len(b)
	}
	return events, size
}
