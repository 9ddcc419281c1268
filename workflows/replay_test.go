package workflows

import (
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
)

// Committed histories of real runs (a successful cutover and one that
// failed at probe and rolled back, recorded by the integration tests with
// SPARKLANE_WRITE_HISTORIES=1) must replay against the current code: a
// change to a workflow's command sequence without workflow.GetVersion fails
// here instead of breaking runs in flight.
func TestReplayCommittedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"cutover-ok.json": false, "cutover-rolled-back.json": false}
	for _, f := range files {
		want[filepath.Base(f)] = true
	}
	for name, ok := range want {
		if !ok {
			t.Errorf("history %s is missing from testdata/histories: regenerate with SPARKLANE_WRITE_HISTORIES=1 go test -run TestCutoverServes ./internal/itest", name)
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if st, err := os.Stat(f); err != nil || st.Size() == 0 {
				t.Fatalf("history %s unreadable or empty: %v", f, err)
			}
			r := worker.NewWorkflowReplayer()
			for _, wf := range []any{FleetProbe, StageNode, Stage, Verify, Serve, Probe, Stop, Cutover, Bench, Power} {
				r.RegisterWorkflow(wf)
			}
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
