package activities

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// A retried Bench attempt (same workflow run and activity) against a real
// in-process engine-sim returns the report the first attempt wrote and
// writes no second bundle; another run writes its own.
func TestBenchRetriedAttemptWritesNoSecondBundle(t *testing.T) {
	model := simtest.WriteModel(t, filepath.Join(t.TempDir(), "model"), simtest.Model{})
	eng := simtest.Start(t, sim.Config{ModelPath: model, ServedModelName: "sim-model", PrefillTPS: 4000, DecodeTPS: 200, ContextLength: 16384})
	eng.WaitServing(t, 30*time.Second)
	cfg := &config.Config{RecipesDir: t.TempDir()}
	a := &ControlActivities{Config: cfg, Version: "test"}
	in := contract.BenchInput{
		Recipe:  contract.Recipe{Name: "lane1", Bench: contract.Bench{PromptLengths: []int{128}, Depths: []int{0}, Concurrency: []int{1}, GenTokens: 8}},
		Plan:    contract.LanePlan{Lane: "lane1"},
		BaseURL: eng.URL, Model: "sim-model", Label: "retry",
		WorkflowID: "cutover/c1", RunID: "run-1",
	}
	ctx := context.Background()
	first, err := a.Bench(ctx, in)
	if err != nil {
		t.Fatalf("first attempt: %v", err)
	}
	again, err := a.Bench(ctx, in)
	if err != nil {
		t.Fatalf("retried attempt: %v", err)
	}
	if b, err := os.ReadFile(first.JSON); err != nil || !strings.Contains(string(b), `"seed": 42`) {
		t.Errorf("report %s does not record the default seed 42: %v", first.JSON, err)
	}
	if !reflect.DeepEqual(again, first) {
		t.Errorf("retried attempt returned %+v, want the first attempt's %+v", again, first)
	}
	dir := filepath.Join(cfg.RecipesDir, "lane1", "reports")
	if n := bundles(t, dir); n != 1 {
		t.Errorf("%d report bundles after a retried attempt, want 1", n)
	}
	in.RunID = "run-2"
	other, err := a.Bench(ctx, in)
	if err != nil {
		t.Fatalf("another run: %v", err)
	}
	if other.ReportID == first.ReportID || bundles(t, dir) != 2 {
		t.Errorf("another run reused report %s (%d bundles); want its own", other.ReportID, bundles(t, dir))
	}
}

func bundles(t *testing.T, dir string) int {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

// Single flight: while a live attempt holds the lock (its lease fresh), a
// second one does not take it and gives up when its context ends; once the
// holder stopped renewing past the lease, the lock is taken over.
func TestBenchLockIsSingleFlight(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "k.lock")
	if err := os.WriteFile(lock, []byte("pid 1 (the older attempt)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the second attempt lost its own heartbeat
	h := newBenchBeat(ctx, lock)
	defer h.stop()
	if err := h.acquire(ctx); err == nil {
		t.Fatal("took a lock whose holder is alive")
	}
	if b, _ := os.ReadFile(lock); !strings.Contains(string(b), "older attempt") {
		t.Errorf("the live holder's lock was replaced: %q", b)
	}
	old := time.Now().Add(-2 * benchLease())
	if err := os.Chtimes(lock, old, old); err != nil {
		t.Fatal(err)
	}
	h2 := newBenchBeat(context.Background(), lock)
	defer h2.stop()
	if err := h2.acquire(context.Background()); err != nil {
		t.Fatalf("take over a stale lock: %v", err)
	}
	if b, _ := os.ReadFile(lock); strings.Contains(string(b), "older attempt") {
		t.Errorf("stale lock not taken over: %q", b)
	}
	h2.release()
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("lock left after release: %v", err)
	}
}

// A recipe's [bench] runs reaches the sweep: the bundle's figures are
// medians over that many runs, each run's value kept in the samples.
func TestBenchRecipeRunsRepeatsTheSweep(t *testing.T) {
	recipes := t.TempDir()
	if err := os.WriteFile(filepath.Join(recipes, "lane1.toml"), []byte(`runtime = "sim"
image = "i"
command = "serve"
[bench]
prompt_lengths = [128]
depths = [0]
concurrency = [1]
gen_tokens = 8
runs = 2
`), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, _, err := config.LoadRecipeDir(recipes, "")
	if err != nil || len(rs) != 1 || rs[0].Bench.Runs != 2 {
		t.Fatalf("recipe: %v %+v", err, rs)
	}
	model := simtest.WriteModel(t, filepath.Join(t.TempDir(), "model"), simtest.Model{})
	eng := simtest.Start(t, sim.Config{ModelPath: model, ServedModelName: "sim-model", PrefillTPS: 4000, DecodeTPS: 200, ContextLength: 16384})
	eng.WaitServing(t, 30*time.Second)
	cfg := &config.Config{RecipesDir: t.TempDir()}
	a := &ControlActivities{Config: cfg, Version: "test"}
	res, err := a.Bench(context.Background(), contract.BenchInput{Recipe: lane.Wire(rs[0]), Plan: contract.LanePlan{Lane: "lane1"},
		BaseURL: eng.URL, Model: "sim-model", Label: "runs", WorkflowID: "bench/lane1", RunID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cfg.RecipesDir, "lane1", "reports", res.ReportID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var bundle struct {
		Perf struct {
			Runs int `json:"runs"`
		} `json:"perf"`
	}
	if err := json.Unmarshal(b, &bundle); err != nil || bundle.Perf.Runs != 2 {
		t.Fatalf("bundle perf.runs = %d (%v), want the recipe's 2:\n%.400s", bundle.Perf.Runs, err, b)
	}
}
