package report

import (
	"fmt"
	"math"
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
)

// CompareOptions tune Compare; zero values take the defaults.
type CompareOptions struct {
	// QualityBand is ± score points (recipe [bench] quality_band).
	QualityBand float64
	// PerfTolerancePct is ± percent for perf metrics.
	PerfTolerancePct float64
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
		gain := d.DeltaPct
		if !m.HigherIsBetter {
			gain = -gain
		}
		switch {
		case gain > opt.PerfTolerancePct:
			d.Judgement = Better
			better = true
		case gain < -opt.PerfTolerancePct:
			d.Judgement = Worse
			worse = true
		default:
			d.Judgement = Neutral
		}
		v.Metrics = append(v.Metrics, d)
	}
	for _, b := range bm {
		if _, ok := find(cm, b.Name); !ok {
			v.Missing = append(v.Missing, b.Name+" (this run has none)")
		}
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
// Current). Points where every request failed are left out.
func perfMetrics(r Report) []MetricDelta {
	if r.Perf == nil {
		return nil
	}
	var out []MetricDelta
	for _, p := range r.Perf.PP {
		if p.OK > 0 && p.TokPerSec > 0 {
			out = append(out, MetricDelta{Name: fmt.Sprintf("pp %d", p.RequestedTokens), Unit: "tok/s", Current: p.TokPerSec, HigherIsBetter: true})
		}
	}
	for _, p := range r.Perf.TG {
		if p.OK == 0 {
			continue
		}
		if p.PerRequestTokPerSec > 0 {
			out = append(out, MetricDelta{Name: fmt.Sprintf("tg d%d c%d", p.Depth, p.Concurrency), Unit: "tok/s", Current: p.PerRequestTokPerSec, HigherIsBetter: true})
		}
		if p.Concurrency > 1 && p.AggregateTokPerSec > 0 {
			out = append(out, MetricDelta{Name: fmt.Sprintf("tg d%d c%d aggregate", p.Depth, p.Concurrency), Unit: "tok/s", Current: p.AggregateTokPerSec, HigherIsBetter: true})
		}
	}
	if r.Perf.TTFT.N > 0 {
		out = append(out,
			MetricDelta{Name: "ttft p50", Unit: "ms", Current: r.Perf.TTFT.P50Ms},
			MetricDelta{Name: "ttft p95", Unit: "ms", Current: r.Perf.TTFT.P95Ms})
	}
	return out
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }
