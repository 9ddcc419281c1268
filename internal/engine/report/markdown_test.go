package report

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/bench"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata from the current output")

// TestMarkdownGolden pins the rendered page byte for byte: one report
// with every section and branch filled in, and one with nothing but its
// name, and one between.
func TestMarkdownGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Report
	}{
		{"markdown_full.golden", fullReport()},
		{"markdown_plain.golden", plainReport()},
		{"markdown_bare.golden", Report{ID: "20260101T000000Z_bare", Lane: "mia", Label: "bare", CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Markdown(tc.r)
			path := filepath.Join("testdata", tc.name)
			if *updateGolden {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./internal/engine/report/ -run TestMarkdownGolden -update writes it)", err)
			}
			if got != string(want) {
				t.Errorf("Markdown differs from %s:\n--- got\n%s\n--- want\n%s", path, got, want)
			}
		})
	}
}

// fullReport is a report that reaches every branch Markdown has.
func fullReport() Report {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	perf := perfOf(1800, 42.5, 80, 120, 180)
	perf.PP = append(perf.PP, bench.PPPoint{RequestedTokens: 8192, PromptTokens: 8190, TokPerSec: 1500, OK: 2, Failed: 1})
	perf.Failures = []bench.Failure{{Point: "pp 8192", Timeout: true, Error: "deadline\nexceeded"}, {Point: "tg d0 c2", Error: "connection reset"}}
	perf.Clamped = []string{"pp 65536 → 32768"}
	h := harnessOf(71, 4)
	h.Quality.SafetyCapped = true
	h.Quality.SafetyWarnings = []string{"S-01 leaked a key", "S-02 ran rm"}
	dep, resp := 80.0, 65.5
	h.Quality.Deployability, h.Quality.Responsiveness = &dep, &resp
	h.ExitCode, h.Seconds, h.Command, h.ReportFile = 2, 93.4, "tool-eval-bench --base-url http://x", "harness/report.json"
	return Report{
		ID: "20260304T040607Z_nightly", Lane: "mia", Label: "nightly", CreatedAt: at, Version: "v1.2.3",
		Perf: perf, Harness: h,
		Verdict: &Verdict{
			Overall: "regression", BaselineID: "20260303T040607Z_nightly", QualityBand: 3, PerfTolerancePct: 5,
			Quality: &QualityDelta{Current: 71, Baseline: 75, Delta: -4, Judgement: Worse},
			Metrics: []MetricDelta{
				{Name: "pp 2048", Unit: "tok/s", Current: 1800, Baseline: 1600, DeltaPct: 12.5, HigherIsBetter: true, Judgement: Better},
				{Name: "tg d0 c1", Unit: "tok/s", Current: 42.5, Baseline: 50, DeltaPct: -15, HigherIsBetter: true, Judgement: Worse,
					CurrentCI: &[2]float64{41, 44}, BaselineCI: &[2]float64{49, 51}},
				{Name: "ttft p50", Unit: "ms", Current: 120, Baseline: 118, DeltaPct: 1.7, Judgement: Neutral, Why: "within tolerance"},
			},
			Missing:  []string{"pp 8192"},
			Notes:    []string{"parallel differs: 4 now, 1 then"},
			Warnings: []string{"harness version differs"},
		},
		Evidence: Evidence{
			Dir: "evidence", RecipeSource: "recipes/mia.toml", RecipeCopy: "evidence/recipe.toml", PlanFile: "evidence/plan.json", RecipeHash: "sha256:abc",
			Staging: []StagingSummary{
				{Node: "dgx1", Block: "models--org--m", Files: 12, Bytes: 3 << 30, VerifiedAt: at},
				{Node: "dgx2", Block: "models--org--m", Files: 12, Bytes: 3 << 30},
			},
			Image: "vllm:latest", ImageDigest: "sha256:def", EngineArgs: []string{"serve", "/m", "--api-key", "***"},
			Containers: []ContainerEvidence{
				{Node: "dgx1", Rank: 0, Name: "sparklane-mia-0", Image: "vllm:latest", ImageID: "sha256:111", ImageDigest: "sha256:def", Args: []string{"serve", "/m"}},
				{Node: "dgx2", Rank: 1, Name: "sparklane-mia-1", Image: "vllm:latest", ImageID: "sha256:111", Args: []string{"serve", "/m", "--headless"}},
			},
			InspectError: "docker on dgx3 did not answer",
			Temporal:     TemporalRef{Namespace: "default", WorkflowID: "bench-mia", RunID: "run-1", UIURL: "http://127.0.0.1:8233/x"},
			PlotFile:     "mia.svg",
		},
	}
}

// plainReport takes the other side of the branches fullReport takes: a
// neutral verdict with nothing changed, a harness without warnings, a
// sweep with tg points only, a run without a UI link.
func plainReport() Report {
	r := reportAt("20260305T000000Z_plain", time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC),
		&bench.PerfResult{GenTokens: 64, TG: []bench.TGPoint{{Depth: 4096, Concurrency: 2, PerRequestTokPerSec: 20, AggregateTokPerSec: 40, OK: 2}}},
		harnessOf(90, 1))
	r.Verdict = &Verdict{Overall: "neutral", BaselineID: "20260304T000000Z_plain", QualityBand: 3, PerfTolerancePct: 5,
		Metrics: []MetricDelta{{Name: "tg d4096 c2", Unit: "tok/s", Current: 20, Baseline: 20, Judgement: Neutral}}}
	r.Evidence = Evidence{RecipeSource: "recipes/mia.toml", RecipeCopy: "recipe.toml", Temporal: TemporalRef{WorkflowID: "bench-mia", RunID: "run-2"}}
	return r
}
