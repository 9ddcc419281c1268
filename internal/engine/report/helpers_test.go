package report

import (
	"time"

	"github.com/sparklane/sparklane/internal/engine/bench"
)

// perfOf builds a perf result with one pp point, tg at depth 0 for
// concurrency 1 and 2, and a TTFT summary.
func perfOf(pp, tg, tgAgg, ttftP50, ttftP95 float64) *bench.PerfResult {
	return &bench.PerfResult{
		GenTokens: 128,
		PP:        []bench.PPPoint{{RequestedTokens: 2048, PromptTokens: 2050, TokPerSec: pp, OK: 3, TTFT: bench.Latency{N: 3, P50Ms: 600, P95Ms: 700}}},
		TG: []bench.TGPoint{
			{Depth: 0, Concurrency: 1, PerRequestTokPerSec: tg, AggregateTokPerSec: tg, OK: 1},
			{Depth: 0, Concurrency: 2, PerRequestTokPerSec: tg * 0.9, AggregateTokPerSec: tgAgg, OK: 2},
		},
		TTFT: bench.Latency{N: 3, P50Ms: ttftP50, P95Ms: ttftP95},
	}
}

func harnessOf(score float64, parallel int) *bench.HarnessResult {
	return &bench.HarnessResult{Format: bench.FormatToolEvalBench, Parallel: parallel, Quality: bench.Quality{
		Format: bench.FormatToolEvalBench, Score: score, TotalPoints: int(score), MaxPoints: 100, Rating: "★★★★ Good", Stars: 4,
		Pass: 2, Partial: 1, Fail: 1,
		Categories: []bench.CategoryScore{{ID: "A", Label: "Tool Selection", Earned: 3, Max: 4, Percent: 75, Pass: 1, Partial: 1}},
		Scenarios:  []bench.ScenarioScore{{ID: "TC-01", Status: "pass", Points: 2}, {ID: "TC-02", Status: "partial", Points: 1, Summary: "asked twice"}, {ID: "TC-03", Status: "fail", Summary: "wrong tool"}},
	}}
}

func reportAt(id string, at time.Time, perf *bench.PerfResult, h *bench.HarnessResult) Report {
	return Report{ID: id, Lane: "mia", Label: "nightly", CreatedAt: at, Perf: perf, Harness: h}
}
