package itest

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
	"github.com/sparklane/sparklane/workflows"
)

// A Bench attempt lost right after it wrote its bundle (the BenchWritten seam fails
// it there, as a worker dying at that moment would) is retried by the real
// server; the retry finds the bundle of its run and returns it: one bundle,
// the result names it, the history shows the second attempt.
func TestBenchRetryAfterWritingWritesNoSecondBundle(t *testing.T) {
	model := simtest.WriteModel(t, filepath.Join(t.TempDir(), "model"), simtest.Model{})
	eng := simtest.Start(t, sim.Config{ModelPath: model, ServedModelName: "sim-model", PrefillTPS: 4000, DecodeTPS: 200, ContextLength: 16384})
	eng.WaitServing(t, 30*time.Second)
	var attempts atomic.Int32
	written := func(context.Context) error {
		if attempts.Add(1) == 1 {
			return errors.New("fault point: attempt lost after writing its bundle")
		}
		return nil
	}
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"solo": {"n1"}}, seams: &activities.Seams{BenchWritten: written}})
	f.startControl()
	ctx := withTimeout(t, 5*time.Minute)

	in := contract.BenchInput{
		Recipe:  contract.Recipe{Name: "benchy", Bench: contract.Bench{PromptLengths: []int{128}, Depths: []int{0}, Concurrency: []int{1}, GenTokens: 8}},
		Plan:    contract.LanePlan{Lane: "benchy", Cluster: "solo"},
		BaseURL: eng.URL, Model: "sim-model", Label: "retry",
	}
	run, err := f.env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.BenchID("benchy"), TaskQueue: contract.ControlQueue}, workflows.Bench, in)
	if err != nil {
		t.Fatal(err)
	}
	var res contract.BenchResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("bench: %v", err)
	}
	dir := filepath.Join(f.cfg.RecipesDir, "benchy", "reports")
	bundles, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(bundles) != 1 || bundles[0] != res.JSON {
		t.Errorf("bundles %v after a retried attempt; want exactly the result's %s", bundles, res.JSON)
	}
	if attempts.Load() != 1 {
		t.Errorf("the bench ran its sweep and wrote %d times; want once (the retry reuses the bundle)", attempts.Load())
	}
	it := f.env.Client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var maxAttempt int32
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil && a.GetAttempt() > maxAttempt {
			maxAttempt = a.GetAttempt()
		}
	}
	if maxAttempt != 2 {
		t.Errorf("bench activity's last attempt %d; want 2 (the fault point failed the first)", maxAttempt)
	}
}
