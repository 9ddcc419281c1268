package itest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// saveHistory writes the latest run of workflow id as JSON into
// workflows/testdata/histories/NAME.json when SPARKLANE_WRITE_HISTORIES is
// set: the replay tests in package workflows run those committed histories
// against the current workflow code.
func saveHistory(t *testing.T, f *fleet, id, name string) {
	t.Helper()
	if os.Getenv("SPARKLANE_WRITE_HISTORIES") == "" {
		return
	}
	ctx := context.Background()
	it := f.env.Client.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		h.Events = append(h.Events, e)
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "workflows", "testdata", "histories")
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
	it := f.env.Client.GetWorkflowHistory(context.Background(), id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
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
	it := f.env.Client.GetWorkflowHistory(context.Background(), id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		b, err := protojson.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		events, size = events+1, size+len(b)
	}
	return events, size
}
