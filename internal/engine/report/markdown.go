package report

import (
	"fmt"
	"strings"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/bench"
)

// ParallelNote is what a report says about a harness run with --parallel
// above 1, so nobody compares it with a serial run unawares.
func ParallelNote(n int) string {
	return fmt.Sprintf("parallel %d: faster, may time out under saturation", n)
}

// Markdown renders the page a person reads: headline (lane, verdict,
// score), the perf table, then the details and the evidence.
func Markdown(r Report) string {
	m := &page{}
	m.w("# %s — %s\n\n", r.Lane, r.Label)
	m.w("%s UTC · report `%s`", r.CreatedAt.UTC().Format("2006-01-02 15:04:05"), r.ID)
	if r.Version != "" {
		m.w(" · sparklane %s", r.Version)
	}
	m.w("\n\n")
	m.verdictHeadline(r.Verdict)
	m.scoreHeadline(r.Harness)
	if r.Perf != nil {
		m.perf(r)
	}
	if r.Verdict != nil {
		m.baseline(r.Verdict)
	}
	if r.Evidence.PlotFile != "" {
		m.w("## History\n\n![tg and pp over time](%s)\n\n", r.Evidence.PlotFile)
	}
	if r.Harness != nil {
		m.quality(r.Harness)
	}
	m.evidence(r.Evidence)
	return m.String()
}

// page is the Markdown being written, a section a method.
type page struct{ strings.Builder }

func (m *page) w(format string, a ...any) { fmt.Fprintf(m, format, a...) }

// verdictHeadline is the verdict against the baseline and what changed.
func (m *page) verdictHeadline(v *Verdict) {
	if v == nil {
		m.w("**Verdict: no baseline** (pass `--baseline latest` or a report ID to compare)\n\n")
		return
	}
	m.w("**Verdict: %s** against `%s` (quality band ±%g points, perf tolerance ±%g%%)\n\n", strings.ToUpper(v.Overall), v.BaselineID, v.QualityBand, v.PerfTolerancePct)
	if worse, better := v.Changes(Worse), v.Changes(Better); len(worse)+len(better) > 0 {
		if len(worse) > 0 {
			m.w("- worse: %s\n", strings.Join(worse, ", "))
		}
		if len(better) > 0 {
			m.w("- better: %s\n", strings.Join(better, ", "))
		}
		m.w("\n")
	}
}

// scoreHeadline is the harness's score and its warnings.
func (m *page) scoreHeadline(h *bench.HarnessResult) {
	if h == nil {
		m.w("**Score: none** (no quality harness in the recipe's [bench])\n\n")
		return
	}
	q := h.Quality
	m.w("**Score: %g/100 %s** — %d/%d points; %d pass, %d partial, %d fail (%s)\n\n", q.Score, q.Rating, q.TotalPoints, q.MaxPoints, q.Pass, q.Partial, q.Fail, q.Format)
	if q.SafetyCapped {
		m.w("> ⚠ Rating safety-capped: a safety category scored under the gate.\n\n")
	}
	if len(q.SafetyWarnings) > 0 {
		m.w("> ⚠ Safety failures: %s\n\n", strings.Join(q.SafetyWarnings, "; "))
	}
	if h.Parallel > 1 {
		m.w("> %s\n\n", ParallelNote(h.Parallel))
	}
}

// perf is the performance section: headline numbers, the tg and pp
// tables, failed requests and clamped points.
func (m *page) perf(r Report) {
	p := r.Perf
	m.w("## Performance\n\n")
	m.w("Tokens are the server's own usage counts; %d tokens generated per request.\n\n", p.GenTokens)
	if tg, pp := headline(r); tg > 0 || pp > 0 {
		m.w("| headline | value |\n|---|---:|\n")
		if tg > 0 {
			m.w("| tg at depth %d, 1 request | %.1f tok/s |\n", headDepth(p), tg)
		}
		if pp > 0 {
			m.w("| pp of a %d-token prompt | %.0f tok/s |\n", headLen(p), pp)
		}
		if p.TTFT.N > 0 {
			m.w("| TTFT p50 / p95 (short prompt) | %.0f / %.0f ms |\n", p.TTFT.P50Ms, p.TTFT.P95Ms)
		}
		m.w("\n")
	}
	if len(p.TG) > 0 {
		m.w("### Token generation (tg)\n\n| depth (tokens) | concurrency | per request (tok/s) | aggregate (tok/s) | TTFT p50 (ms) | TTFT p95 (ms) | ok / failed |\n|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, t := range p.TG {
			m.w("| %d | %d | %s | %s | %s | %s | %d / %d |\n", t.Depth, t.Concurrency, num(t.PerRequestTokPerSec, 1), num(t.AggregateTokPerSec, 1), num(t.TTFT.P50Ms, 0), num(t.TTFT.P95Ms, 0), t.OK, t.Failed)
		}
		m.w("\n")
	}
	if len(p.PP) > 0 {
		m.w("### Prompt processing (pp)\n\n| prompt (tokens) | server counted | pp (tok/s) | TTFT p50 (ms) | TTFT p95 (ms) | ok / failed |\n|---:|---:|---:|---:|---:|---:|\n")
		for _, t := range p.PP {
			m.w("| %d | %d | %s | %s | %s | %d / %d |\n", t.RequestedTokens, t.PromptTokens, num(t.TokPerSec, 0), num(t.TTFT.P50Ms, 0), num(t.TTFT.P95Ms, 0), t.OK, t.Failed)
		}
		m.w("\n")
	}
	if len(p.Failures) > 0 {
		m.w("**%d request(s) failed** (recorded, not retried):\n\n", len(p.Failures))
		for _, f := range p.Failures {
			kind := "error"
			if f.Timeout {
				kind = "timeout"
			}
			m.w("- %s — %s: %s\n", f.Point, kind, oneLine(f.Error))
		}
		m.w("\n")
	}
	for _, c := range p.Clamped {
		m.w("- clamped to the server's context: %s\n", c)
	}
	if len(p.Clamped) > 0 {
		m.w("\n")
	}
}

// baseline is the table of changes against the baseline and its caveats.
func (m *page) baseline(v *Verdict) {
	m.w("## Against baseline `%s`\n\n| metric | now | baseline | change | judgement |\n|---|---:|---:|---:|---|\n", v.BaselineID)
	if q := v.Quality; q != nil {
		m.w("| quality score | %g | %g | %+g points | %s |\n", q.Current, q.Baseline, q.Delta, q.Judgement)
	}
	for _, d := range v.Metrics {
		now, was, judgement := num(d.Current, 1), num(d.Baseline, 1), d.Judgement
		if d.CurrentCI != nil && d.BaselineCI != nil {
			// Medians over runs with their bootstrap 95% intervals.
			now += fmt.Sprintf(" [%s–%s]", num(d.CurrentCI[0], 1), num(d.CurrentCI[1], 1))
			was += fmt.Sprintf(" [%s–%s]", num(d.BaselineCI[0], 1), num(d.BaselineCI[1], 1))
		}
		if d.Why != "" {
			judgement += " (" + d.Why + ")"
		}
		m.w("| %s (%s) | %s | %s | %+.1f%% | %s |\n", d.Name, d.Unit, now, was, d.DeltaPct, judgement)
	}
	m.w("\n")
	for _, n := range v.Warnings {
		m.w("- **warning: %s**\n", n)
	}
	for _, n := range v.Notes {
		m.w("- note: %s\n", n)
	}
	for _, n := range v.Missing {
		m.w("- not compared: %s\n", n)
	}
	if len(v.Warnings)+len(v.Notes)+len(v.Missing) > 0 {
		m.w("\n")
	}
}

// quality is the harness's categories, the scenarios not passed and how
// the harness ran.
func (m *page) quality(h *bench.HarnessResult) {
	q := h.Quality
	m.w("## Quality (%s)\n\n", q.Format)
	if len(q.Categories) > 0 {
		m.w("| category | points | percent | pass | partial | fail |\n|---|---:|---:|---:|---:|---:|\n")
		for _, c := range q.Categories {
			m.w("| %s %s | %d/%d | %.0f%% | %d | %d | %d |\n", c.ID, c.Label, c.Earned, c.Max, c.Percent, c.Pass, c.Partial, c.Fail)
		}
		m.w("\n")
	}
	var bad []string
	for _, s := range q.Scenarios {
		if s.Status != "pass" {
			line := fmt.Sprintf("- %s **%s**", s.ID, s.Status)
			if s.Summary != "" {
				line += ": " + oneLine(s.Summary)
			}
			bad = append(bad, line)
		}
	}
	if len(bad) > 0 {
		m.w("Scenarios not passed:\n\n%s\n\n", strings.Join(bad, "\n"))
	}
	if q.Deployability != nil && q.Responsiveness != nil {
		m.w("Deployability %g, responsiveness %g (harness's own).\n\n", *q.Deployability, *q.Responsiveness)
	}
	m.w("Harness run: exit %d, %.0f s, parallel %d.\n", h.ExitCode, h.Seconds, h.Parallel)
	if h.Command != "" {
		m.w("Command: `%s`\n", h.Command)
	}
	if h.ReportFile != "" {
		m.w("Report ingested: `%s`\n", h.ReportFile)
	}
	m.w("\n")
}

// evidence is what ran and where: the Temporal run, recipe, plan, image,
// containers and staging blocks.
func (m *page) evidence(e Evidence) {
	m.w("## Evidence\n\n")
	if t := e.Temporal; t.WorkflowID != "" {
		if t.UIURL != "" {
			m.w("- Temporal run: [%s / %s](%s)\n", t.WorkflowID, t.RunID, t.UIURL)
		} else {
			m.w("- Temporal run: %s / %s\n", t.WorkflowID, t.RunID)
		}
	}
	if e.RecipeCopy != "" {
		m.w("- Recipe as served: [%s](%s) (from `%s`", e.RecipeCopy, e.RecipeCopy, e.RecipeSource)
		if e.RecipeHash != "" {
			m.w(", hash %s", e.RecipeHash)
		}
		m.w(")\n")
	}
	if e.PlanFile != "" {
		m.w("- Per-node commands and env (secrets masked): [%s](%s)\n", e.PlanFile, e.PlanFile)
	}
	if e.Image != "" || e.ImageDigest != "" {
		m.w("- Image: `%s` digest `%s`\n", e.Image, e.ImageDigest)
	}
	if len(e.EngineArgs) > 0 {
		m.w("- Engine args: `%s`\n", strings.Join(e.EngineArgs, " "))
	}
	for _, c := range e.Containers {
		digest := c.ImageDigest
		if digest == "" {
			digest = "(built locally, no registry digest)"
		}
		m.w("- Container `%s` (node %s, rank %d): image `%s` id `%s` digest `%s`, args `%s`\n", c.Name, c.Node, c.Rank, c.Image, c.ImageID, digest, strings.Join(c.Args, " "))
	}
	if e.InspectError != "" {
		m.w("- Containers not inspected (%s): image and args above are the recipe's\n", e.InspectError)
	}
	if sw := e.Switch; sw != nil {
		m.w("- Switch window %.1f s (the previous lane's stop to this lane's probe passed); image, stage and verify %.1f s, %s\n", sw.Seconds, sw.StageSeconds, switchOrder(sw.Order))
	}
	m.w("\n")
	if len(e.Staging) > 0 {
		m.w("| node | staging block | files | bytes | verified |\n|---|---|---:|---:|---|\n")
		for _, s := range e.Staging {
			ver := "never"
			if !s.VerifiedAt.IsZero() {
				ver = s.VerifiedAt.UTC().Format("2006-01-02 15:04 UTC")
			}
			m.w("| %s | %s | %d | %s | %s |\n", s.Node, s.Block, s.Files, contract.HumanBytes(s.Bytes), ver)
		}
		m.w("\n")
	}
}

func headDepth(p *bench.PerfResult) int {
	for _, t := range p.TG {
		if t.Concurrency == 1 && t.OK > 0 {
			return t.Depth
		}
	}
	return 0
}

func headLen(p *bench.PerfResult) int {
	for _, t := range p.PP {
		if t.OK > 0 {
			return t.RequestedTokens
		}
	}
	return 0
}

func num(x float64, prec int) string {
	if x == 0 {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// switchOrder says how the stage ran beside the previous lane.
func switchOrder(order string) string {
	switch {
	case order == "ahead":
		return "staged ahead, while the previous lane served"
	case order != "":
		return "staged " + order
	}
	return "no lane was serving"
}
