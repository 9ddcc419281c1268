package report

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand"
	"sort"
	"strings"

	"github.com/sparklane/sparklane/internal/engine/bench"
)

// Verdict words. The overall verdict drives `starter bench
// --fail-on-regression`; per-metric judgements explain it.
const (
	Regression  = "regression"
	Improvement = "improvement"
	Neutral     = "neutral"
	Better      = "better"
	Worse       = "worse"
)

const (
	// DefaultQualityBand is the ± score points judged neutral.
	DefaultQualityBand = 2.0
	// DefaultPerfTolerancePct is the ± % perf change judged neutral (run
	// to run noise on a healthy lane is a few percent).
	DefaultPerfTolerancePct = 5.0
	// DefaultFloorMs is the smallest latency change ever called a change:
	// a TTFT of 7.3 → 7.8 ms is scheduler noise, never a regression.
	DefaultFloorMs = 5.0
	// DefaultFloorTokPerSec is the smallest rate change ever called one.
	DefaultFloorTokPerSec = 1.0
	// bootstrapResamples and bootstrapLevel shape the confidence interval
	// of each metric's median over repeated runs.
	bootstrapResamples = 2000
	bootstrapLevel     = 0.95
)

// CompareOptions tune Compare; zero values take the defaults.
type CompareOptions struct {
	// QualityBand is ± score points (recipe [bench] quality_band).
	QualityBand float64
	// PerfTolerancePct is ± percent for perf metrics.
	PerfTolerancePct float64
	// FloorMs and FloorTokPerSec are absolute changes below which a
	// latency or rate metric is always neutral (defaults 5 ms, 1 tok/s).
	FloorMs        float64
	FloorTokPerSec float64
}

// Verdict is a report compared with its baseline.
type Verdict struct {
	// Overall is regression (quality worse or any perf metric worse beyond
	// tolerance), improvement (something better, nothing worse) or neutral.
	Overall          string        `json:"overall"`
	BaselineID       string        `json:"baseline_id"`
	QualityBand      float64       `json:"quality_band"`
	PerfTolerancePct float64       `json:"perf_tolerance_pct"`
	Quality          *QualityDelta `json:"quality,omitempty"`
	Metrics          []MetricDelta `json:"metrics"`
	// Missing names metrics present in only one of the two reports.
	Missing []string `json:"missing,omitempty"`
	// Notes explain comparability caveats (different --parallel, ...).
	Notes []string `json:"notes,omitempty"`
	// Warnings say the two runs measured different things — another
	// harness version, scenario pool, mode or seed — so a score change
	// may be the harness's, not the lane's. The operator compared across
	// harness versions only with such a caveat.
	Warnings []string `json:"warnings,omitempty"`
}

// QualityDelta is the score change in points.
type QualityDelta struct {
	Current  float64 `json:"current"`
	Baseline float64 `json:"baseline"`
	Delta    float64 `json:"delta"`
	// Judgement is better, worse or neutral (within the band).
	Judgement string `json:"judgement"`
}

// MetricDelta is one perf metric's change in percent.
type MetricDelta struct {
	// Name is stable across reports: "pp 2048", "tg d0 c1",
	// "tg d0 c2 aggregate", "ttft p50", "ttft p95".
	Name     string  `json:"name"`
	Unit     string  `json:"unit"`
	Current  float64 `json:"current"`
	Baseline float64 `json:"baseline"`
	DeltaPct float64 `json:"delta_pct"`
	// HigherIsBetter is true for rates, false for latencies.
	HigherIsBetter bool   `json:"higher_is_better"`
	Judgement      string `json:"judgement"`
	// Runs are how many sweeps each side's value is the median of; the
	// intervals are seeded bootstrap 95% confidence intervals of those
	// medians (absent for single-run reports). A change is called only
	// when the intervals do not overlap, the change exceeds the tolerance
	// and the absolute floor; Why says which test kept a change neutral.
	CurrentRuns  int         `json:"current_runs,omitempty"`
	BaselineRuns int         `json:"baseline_runs,omitempty"`
	CurrentCI    *[2]float64 `json:"current_ci,omitempty"`
	BaselineCI   *[2]float64 `json:"baseline_ci,omitempty"`
	// Spread is max-min over the current runs (run-to-run noise).
	Spread float64 `json:"spread,omitempty"`
	Why    string  `json:"why,omitempty"`

	samples []float64
}

// Regression reports whether the verdict should fail `--fail-on-regression`.
func (v Verdict) Regression() bool { return v.Overall == Regression }

// Changes lists the metrics judged j (Better or Worse) with their change,
// quality first: "quality -3.5 points", "tg d0 c1 -11.4%".
func (v Verdict) Changes(j string) []string {
	var out []string
	if v.Quality != nil && v.Quality.Judgement == j {
		out = append(out, fmt.Sprintf("quality %+g points", v.Quality.Delta))
	}
	for _, m := range v.Metrics {
		if m.Judgement == j {
			out = append(out, fmt.Sprintf("%s %+.1f%%", m.Name, m.DeltaPct))
		}
	}
	return out
}

// Compare judges cur against base with a quality band (≤0 → default 2
// points) and the default perf tolerance of 5%.
func Compare(cur, base Report, band float64) Verdict {
	return CompareWith(cur, base, CompareOptions{QualityBand: band})
}

// CompareWith is Compare with every knob.
func CompareWith(cur, base Report, opt CompareOptions) Verdict {
	if opt.QualityBand <= 0 {
		opt.QualityBand = DefaultQualityBand
	}
	if opt.PerfTolerancePct <= 0 {
		opt.PerfTolerancePct = DefaultPerfTolerancePct
	}
	if opt.FloorMs <= 0 {
		opt.FloorMs = DefaultFloorMs
	}
	if opt.FloorTokPerSec <= 0 {
		opt.FloorTokPerSec = DefaultFloorTokPerSec
	}
	v := Verdict{BaselineID: base.ID, QualityBand: opt.QualityBand, PerfTolerancePct: opt.PerfTolerancePct, Metrics: []MetricDelta{}}
	better, worse := false, false

	switch {
	case cur.Harness != nil && base.Harness != nil:
		q := QualityDelta{Current: cur.Harness.Quality.Score, Baseline: base.Harness.Quality.Score}
		q.Delta = round2(q.Current - q.Baseline)
		switch {
		case q.Delta > opt.QualityBand:
			q.Judgement = Better
			better = true
		case q.Delta < -opt.QualityBand:
			q.Judgement = Worse
			worse = true
		default:
			q.Judgement = Neutral
		}
		v.Quality = &q
		if cur.Harness.Parallel != base.Harness.Parallel {
			v.Notes = append(v.Notes, fmt.Sprintf("harness --parallel differs: %d now, %d in the baseline (timeouts under saturation can lower a parallel run's score)", cur.Harness.Parallel, base.Harness.Parallel))
		}
		v.Warnings = append(v.Warnings, harnessWarnings(cur.Harness, base.Harness)...)
	case cur.Harness != nil:
		v.Missing = append(v.Missing, "quality score (baseline has none)")
	case base.Harness != nil:
		v.Missing = append(v.Missing, "quality score (this run has none)")
	}

	cm, bm := perfMetrics(cur), perfMetrics(base)
	for _, m := range cm {
		b, ok := find(bm, m.Name)
		if !ok {
			v.Missing = append(v.Missing, m.Name+" (baseline has none)")
			continue
		}
		if b.Current == 0 {
			continue
		}
		d := MetricDelta{Name: m.Name, Unit: m.Unit, Current: m.Current, Baseline: b.Current, HigherIsBetter: m.HigherIsBetter}
		d.DeltaPct = round2((m.Current - b.Current) / b.Current * 100)
		d.Judgement = judge(&d, m.samples, b.samples, opt)
		switch d.Judgement {
		case Better:
			better = true
		case Worse:
			worse = true
		}
		v.Metrics = append(v.Metrics, d)
	}
	for _, b := range bm {
		if _, ok := find(cm, b.Name); !ok {
			v.Missing = append(v.Missing, b.Name+" (this run has none)")
		}
	}
	if cur.Perf != nil && base.Perf != nil && cur.Perf.Seed != base.Perf.Seed && base.Perf.Seed != 0 {
		v.Notes = append(v.Notes, fmt.Sprintf("perf prompt seed differs: %d now, %d in the baseline", cur.Perf.Seed, base.Perf.Seed))
	}
	if cur.Perf != nil && base.Perf != nil && cur.Perf.GenTokens != base.Perf.GenTokens {
		v.Notes = append(v.Notes, fmt.Sprintf("gen_tokens differs: %d now, %d in the baseline", cur.Perf.GenTokens, base.Perf.GenTokens))
	}

	switch {
	case worse:
		v.Overall = Regression
	case better:
		v.Overall = Improvement
	default:
		v.Overall = Neutral
	}
	return v
}

func find(ms []MetricDelta, name string) (MetricDelta, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m, true
		}
	}
	return MetricDelta{}, false
}

// perfMetrics flattens a report's perf sweep into named metrics (value in
// Current, each run's value in samples). Points where every request
// failed are left out.
func perfMetrics(r Report) []MetricDelta {
	if r.Perf == nil {
		return nil
	}
	var out []MetricDelta
	for _, m := range bench.PerfMetrics(*r.Perf) {
		out = append(out, MetricDelta{Name: m.Name, Unit: m.Unit, Current: m.Value, HigherIsBetter: m.HigherIsBetter, samples: r.Perf.Samples[m.Name]})
	}
	return out
}

// judge calls one metric better, worse or neutral. A change must exceed
// the percent tolerance and the metric's absolute floor; when both sides
// were measured over repeated runs it must also exceed the run-to-run
// spread: the bootstrap confidence intervals of the two medians must not
// overlap. d gets the intervals and, when neutral, why.
func judge(d *MetricDelta, cur, base []float64, opt CompareOptions) string {
	d.CurrentRuns, d.BaselineRuns = len(cur), len(base)
	if len(cur) > 1 {
		lo, hi := minMax(cur)
		d.Spread = round2(hi - lo)
	}
	gain := d.DeltaPct
	if !d.HigherIsBetter {
		gain = -gain
	}
	floor := opt.FloorTokPerSec
	if d.Unit == "ms" {
		floor = opt.FloorMs
	}
	overlap := false
	if len(cur) > 1 && len(base) > 1 {
		c, b := bootstrapCI(d.Name+"/current", cur), bootstrapCI(d.Name+"/baseline", base)
		d.CurrentCI, d.BaselineCI = &c, &b
		overlap = c[0] <= b[1] && b[0] <= c[1]
	}
	switch {
	case math.Abs(gain) <= opt.PerfTolerancePct:
		return Neutral
	case math.Abs(d.Current-d.Baseline) < floor:
		d.Why = fmt.Sprintf("change %.2f %s under the floor %g %s", math.Abs(d.Current-d.Baseline), d.Unit, floor, d.Unit)
		return Neutral
	case overlap:
		d.Why = "within run-to-run noise (confidence intervals overlap)"
		return Neutral
	case gain > 0:
		return Better
	default:
		return Worse
	}
}

// bootstrapCI is the bootstrapLevel confidence interval of the median of
// v, from bootstrapResamples resamples drawn by a generator seeded with
// the metric's name: the same reports always give the same verdict.
func bootstrapCI(name string, v []float64) [2]float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	rng := rand.New(rand.NewSource(int64(h.Sum64())))
	meds := make([]float64, bootstrapResamples)
	buf := make([]float64, len(v))
	for i := range meds {
		for j := range buf {
			buf[j] = v[rng.Intn(len(v))]
		}
		meds[i] = median(buf)
	}
	sort.Float64s(meds)
	tail := (1 - bootstrapLevel) / 2
	lo := meds[int(math.Floor(tail*float64(len(meds)-1)))]
	hi := meds[int(math.Ceil((1-tail)*float64(len(meds)-1)))]
	return [2]float64{round2(lo), round2(hi)}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func minMax(v []float64) (float64, float64) {
	lo, hi := v[0], v[0]
	for _, x := range v[1:] {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// harnessWarnings lists what makes two harness runs' scores incomparable:
// harness version, scenario pool, mode and seed. A field the baseline
// lacks (a report from before it was recorded) is said to be unknown.
func harnessWarnings(cur, base *bench.HarnessResult) []string {
	var out []string
	cq, bq := cur.Quality, base.Quality
	switch {
	case cq.ToolVersion != "" && bq.ToolVersion == "":
		out = append(out, fmt.Sprintf("harness version %s now, unknown in the baseline: scores may not be comparable", cq.ToolVersion))
	case cq.ToolVersion != bq.ToolVersion:
		out = append(out, fmt.Sprintf("harness version differs: %s now, %s in the baseline: a score change may be the harness's, not the lane's", orUnknown(cq.ToolVersion), bq.ToolVersion))
	}
	if d := poolDiff(cq.ScenarioIDs, bq.ScenarioIDs); d != "" {
		out = append(out, "scenario pool differs: "+d+": scores are over different scenarios")
	} else if len(cq.ScenarioIDs) == 0 && cq.ScenarioSelector != bq.ScenarioSelector {
		out = append(out, fmt.Sprintf("scenario pool differs: %s now, %s in the baseline", orUnknown(cq.ScenarioSelector), orUnknown(bq.ScenarioSelector)))
	}
	if cur.Mode != base.Mode {
		out = append(out, fmt.Sprintf("bench mode differs: %s now, %s in the baseline", orUnknown(cur.Mode), orUnknown(base.Mode)))
	}
	if cur.Seed != base.Seed {
		out = append(out, fmt.Sprintf("harness seed differs: %d now, %d in the baseline", cur.Seed, base.Seed))
	}
	return out
}

// poolDiff describes how two scenario pools differ ("" when equal or
// either is unknown).
func poolDiff(cur, base []string) string {
	if len(cur) == 0 || len(base) == 0 {
		return ""
	}
	in := func(set []string) map[string]bool {
		m := make(map[string]bool, len(set))
		for _, s := range set {
			m[s] = true
		}
		return m
	}
	cm, bm := in(cur), in(base)
	var added, removed []string
	for _, s := range cur {
		if !bm[s] {
			added = append(added, s)
		}
	}
	for _, s := range base {
		if !cm[s] {
			removed = append(removed, s)
		}
	}
	if len(added)+len(removed) == 0 {
		return ""
	}
	return fmt.Sprintf("%d scenarios now, %d in the baseline (%s new, %s gone)", len(cur), len(base), list(added), list(removed))
}

func list(s []string) string {
	switch {
	case len(s) == 0:
		return "none"
	case len(s) > 5:
		return strings.Join(s[:5], ", ") + fmt.Sprintf(" and %d more", len(s)-5)
	}
	return strings.Join(s, ", ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
