package report

import (
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/bench"
)

func TestCompareVerdicts(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	type run struct {
		score                    float64 // <0: no harness
		pp, tg, agg, ttft50, t95 float64
	}
	base := run{80, 3000, 35, 68, 200, 260}
	cases := []struct {
		name     string
		cur      run
		opt      CompareOptions
		overall  string
		quality  string            // judgement of the score, "" = not compared
		judgment map[string]string // metric -> judgement (others must be neutral)
	}{
		{"identical", base, CompareOptions{}, Neutral, Neutral, nil},
		{"score inside band", run{81.5, 3000, 35, 68, 200, 260}, CompareOptions{}, Neutral, Neutral, nil},
		{"score at band edge", run{78, 3000, 35, 68, 200, 260}, CompareOptions{}, Neutral, Neutral, nil},
		{"score below band", run{77.5, 3000, 35, 68, 200, 260}, CompareOptions{}, Regression, Worse, nil},
		{"score above band", run{83, 3000, 35, 68, 200, 260}, CompareOptions{}, Improvement, Better, nil},
		{"wider band keeps it neutral", run{76, 3000, 35, 68, 200, 260}, CompareOptions{QualityBand: 5}, Neutral, Neutral, nil},
		{"tg drop within tolerance", run{80, 3000, 33.5, 68, 200, 260}, CompareOptions{}, Neutral, Neutral, nil},
		{"tg drop beyond tolerance", run{80, 3000, 31, 68, 200, 260}, CompareOptions{}, Regression, Neutral, map[string]string{"tg d0 c1": Worse, "tg d0 c2": Worse}},
		{"tg drop under a looser tolerance", run{80, 3000, 31, 68, 200, 260}, CompareOptions{PerfTolerancePct: 15}, Neutral, Neutral, nil},
		{"pp gain", run{80, 3600, 35, 68, 200, 260}, CompareOptions{}, Improvement, Neutral, map[string]string{"pp 2048": Better}},
		{"ttft slower is worse", run{80, 3000, 35, 68, 240, 260}, CompareOptions{}, Regression, Neutral, map[string]string{"ttft p50": Worse}},
		{"ttft faster is better", run{80, 3000, 35, 68, 150, 200}, CompareOptions{}, Improvement, Neutral, map[string]string{"ttft p50": Better, "ttft p95": Better}},
		{"aggregate only regresses", run{80, 3000, 35, 50, 200, 260}, CompareOptions{}, Regression, Neutral, map[string]string{"tg d0 c2 aggregate": Worse}},
		{"better score cannot hide a perf regression", run{90, 3000, 30, 68, 200, 260}, CompareOptions{}, Regression, Better, map[string]string{"tg d0 c1": Worse, "tg d0 c2": Worse}},
		{"no harness now", run{-1, 3000, 35, 68, 200, 260}, CompareOptions{}, Neutral, "", nil},
	}
	mk := func(r run, id string, at time.Time) Report {
		var h *bench.HarnessResult
		if r.score >= 0 {
			h = harnessOf(r.score, 1)
		}
		return reportAt(id, at, perfOf(r.pp, r.tg, r.agg, r.ttft50, r.t95), h)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := mk(base, "20261129T050000Z_nightly", t0)
			v := CompareWith(mk(c.cur, "20261130T050000Z_nightly", t0.Add(24*time.Hour)), b, c.opt)
			if v.Overall != c.overall {
				t.Errorf("overall %s, want %s (%+v)", v.Overall, c.overall, v)
			}
			if v.Regression() != (c.overall == Regression) {
				t.Errorf("Regression() = %v", v.Regression())
			}
			if v.BaselineID != b.ID {
				t.Errorf("baseline id %q", v.BaselineID)
			}
			switch {
			case c.quality == "" && v.Quality != nil:
				t.Errorf("quality compared without a harness: %+v", v.Quality)
			case c.quality != "" && (v.Quality == nil || v.Quality.Judgement != c.quality):
				t.Errorf("quality %+v, want %s", v.Quality, c.quality)
			}
			if len(v.Metrics) != 6 {
				t.Errorf("want 6 perf metrics compared, got %d: %+v", len(v.Metrics), v.Metrics)
			}
			for _, m := range v.Metrics {
				want := Neutral
				if j, ok := c.judgment[m.Name]; ok {
					want = j
				}
				if m.Judgement != want {
					t.Errorf("%s: %s (%+.1f%%), want %s", m.Name, m.Judgement, m.DeltaPct, want)
				}
			}
		})
	}
}

func TestCompareDefaultsAndCaveats(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	base := reportAt("b", t0, perfOf(3000, 35, 68, 200, 260), harnessOf(80, 1))
	cur := reportAt("c", t0.Add(time.Hour), nil, harnessOf(80, 4))
	v := Compare(cur, base, 0)
	if v.QualityBand != DefaultQualityBand || v.PerfTolerancePct != DefaultPerfTolerancePct {
		t.Errorf("defaults band %g tol %g", v.QualityBand, v.PerfTolerancePct)
	}
	if len(v.Missing) != 6 || !strings.Contains(strings.Join(v.Missing, ","), "this run has none") {
		t.Errorf("missing metrics not listed: %q", v.Missing)
	}
	if len(v.Notes) != 1 || !strings.Contains(v.Notes[0], "--parallel differs: 4 now, 1") {
		t.Errorf("parallel caveat missing: %q", v.Notes)
	}
	if v.Overall != Neutral {
		t.Errorf("overall %s, want neutral", v.Overall)
	}
	// The verdict's percentages are the real relative changes.
	v = Compare(reportAt("c", t0, perfOf(3300, 35, 68, 200, 260), nil), reportAt("b", t0, perfOf(3000, 35, 68, 200, 260), nil), 2)
	for _, m := range v.Metrics {
		if m.Name == "pp 2048" && (m.DeltaPct != 10 || m.Current != 3300 || m.Baseline != 3000) {
			t.Errorf("pp delta %+v, want +10%%", m)
		}
	}
}
