package report

import (
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/bench"
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

// TestVerdictWarnsWhenHarnessOrPoolDiffer: the operator compared runs
// across harness versions only with a caveat; the verdict gives it, and
// says so for another scenario pool, mode or seed — and stays silent when
// all of them match.
func TestVerdictWarnsWhenHarnessOrPoolDiffer(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	h := func(version string, ids []string, mode string, seed int64) *bench.HarnessResult {
		r := harnessOf(80, 1)
		r.Quality.ToolVersion, r.Quality.ScenarioIDs, r.Mode, r.Seed = version, ids, mode, seed
		return r
	}
	pool := []string{"TC-01", "TC-02", "TC-03"}
	same := Compare(reportAt("c", t0, nil, h("1.4.3.1", pool, "hardmode", 42)), reportAt("b", t0, nil, h("1.4.3.1", pool, "hardmode", 42)), 0)
	if len(same.Warnings) != 0 {
		t.Errorf("identical harness runs warned: %q", same.Warnings)
	}
	v := Compare(reportAt("c", t0, nil, h("1.4.3.1", append(pool, "TC-70", "TC-71"), "hardmode", 42)),
		reportAt("b", t0, nil, h("1.3.0", pool[:2], "standard", 7)), 0)
	got := strings.Join(v.Warnings, "\n")
	for _, want := range []string{
		"harness version differs: 1.4.3.1 now, 1.3.0 in the baseline",
		"scenario pool differs: 5 scenarios now, 2 in the baseline (TC-03, TC-70, TC-71 new, none gone)",
		"bench mode differs: hardmode now, standard in the baseline",
		"harness seed differs: 42 now, 7 in the baseline",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if v.Overall != Neutral {
		t.Errorf("overall %s: a warning alone changes no verdict", v.Overall)
	}
	// A baseline from before versions were recorded: unknown, said so.
	v = Compare(reportAt("c", t0, nil, h("1.4.3.1", pool, "", 0)), reportAt("b", t0, nil, h("", nil, "", 0)), 0)
	if len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], "unknown in the baseline") {
		t.Errorf("old baseline: %q", v.Warnings)
	}
	cur := reportAt("c", t0, nil, h("1.4.3.1", pool, "", 0))
	v = Compare(cur, reportAt("b", t0, nil, h("1.3.0", pool, "", 0)), 0)
	cur.Verdict = &v
	md := Markdown(cur)
	if !strings.Contains(md, "**warning: harness version differs") {
		t.Errorf("markdown lacks the warning:\n%s", md)
	}
}
