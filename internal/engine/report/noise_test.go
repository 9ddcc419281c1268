package report

import (
	"testing"

	"github.com/sparklane/sparklane/internal/engine/bench"
)

func perfReport(id string, ttft []float64, tg []float64) Report {
	p := &bench.PerfResult{
		TTFT:    bench.Latency{N: 9, P50Ms: median(ttft), P95Ms: median(ttft)},
		TG:      []bench.TGPoint{{Depth: 0, Concurrency: 1, OK: 3, PerRequestTokPerSec: median(tg)}},
		Runs:    len(tg),
		Samples: map[string][]float64{"ttft p50": ttft, "ttft p95": ttft, "tg d0 c1": tg},
	}
	return Report{ID: id, Perf: p}
}

// The flip: TTFT 7.3 → 7.8 ms (+7 %, beyond the 5 % tolerance) is
// under the 5 ms floor, so it is never a regression, even with tight runs.
func TestSmallTTFTChangeUnderTheFloorIsNeutral(t *testing.T) {
	base := perfReport("base", []float64{7.3, 7.3, 7.31}, []float64{100, 100, 100})
	cur := perfReport("cur", []float64{7.8, 7.8, 7.81}, []float64{100, 100, 100})
	v := CompareWith(cur, base, CompareOptions{})
	if v.Overall != Neutral {
		t.Fatalf("verdict %s: %+v", v.Overall, v.Metrics)
	}
	for _, m := range v.Metrics {
		if m.Name == "ttft p50" && (m.Judgement != Neutral || m.Why == "") {
			t.Errorf("ttft p50: %+v, want neutral saying why (floor)", m)
		}
	}
}

// A 10 % drop whose runs overlap the baseline's runs is noise; the same
// drop with tight runs is a regression; the verdict is the same every time
// (seeded bootstrap).
func TestChangeMustBeatRunToRunSpread(t *testing.T) {
	base := perfReport("base", []float64{50, 50, 50}, []float64{100, 80, 120})
	noisy := perfReport("cur", []float64{50, 50, 50}, []float64{90, 118, 78})
	if v := CompareWith(noisy, base, CompareOptions{}); v.Overall != Neutral {
		t.Fatalf("overlapping runs judged %s: %+v", v.Overall, v.Metrics)
	}
	tightBase := perfReport("base", []float64{50, 50, 50}, []float64{100, 101, 99})
	slow := perfReport("cur", []float64{50, 50, 50}, []float64{80, 81, 79})
	first := CompareWith(slow, tightBase, CompareOptions{})
	if first.Overall != Regression {
		t.Fatalf("20%% slower with tight runs judged %s: %+v", first.Overall, first.Metrics)
	}
	var tg MetricDelta
	for _, m := range first.Metrics {
		if m.Name == "tg d0 c1" {
			tg = m
		}
	}
	if tg.Judgement != Worse || tg.CurrentCI == nil || tg.BaselineCI == nil || tg.CurrentCI[1] >= tg.BaselineCI[0] || tg.CurrentRuns != 3 || tg.Spread != 2 {
		t.Errorf("tg d0 c1: %+v", tg)
	}
	for i := 0; i < 5; i++ {
		again := CompareWith(slow, tightBase, CompareOptions{})
		if *again.Metrics[0].CurrentCI != *first.Metrics[0].CurrentCI || again.Overall != first.Overall {
			t.Fatal("bootstrap intervals differ between identical comparisons")
		}
	}
	// Single-run reports (older format) still compare by tolerance + floor.
	old := Report{ID: "old", Perf: &bench.PerfResult{TG: []bench.TGPoint{{Depth: 0, Concurrency: 1, OK: 1, PerRequestTokPerSec: 100}}}}
	oldSlow := Report{ID: "new", Perf: &bench.PerfResult{TG: []bench.TGPoint{{Depth: 0, Concurrency: 1, OK: 1, PerRequestTokPerSec: 80}}}}
	if v := CompareWith(oldSlow, old, CompareOptions{}); v.Overall != Regression {
		t.Errorf("single-run 20%% drop judged %s", v.Overall)
	}
}
