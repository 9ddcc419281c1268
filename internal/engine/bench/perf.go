package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
)

// NoUsage is the fault type of a server that streams no usage block: the
// bench cannot count tokens, and retrying will not change that.
const NoUsage = "NoUsage"

// Defaults of the sweep; operators override them per recipe ([bench]).
var (
	DefaultPromptLengths = []int{512, 2048, 8192}
	DefaultDepths        = []int{0, 4096, 8192}
	DefaultConcurrency   = []int{1, 2}
)

const (
	// DefaultGenTokens is the completion length of each measured request.
	DefaultGenTokens = 128
	// DefaultRequestTimeout bounds one request, so a stuck server is a
	// recorded failure and never a hang.
	DefaultRequestTimeout = 5 * time.Minute
	// DefaultRepeats is how many requests each prompt length gets; TTFT
	// p50/p95 per length are taken over them.
	DefaultRepeats = 3
	// DefaultRuns is how many times the whole pp/tg sweep runs: each
	// metric is the median over the runs, and their spread is what a
	// verdict must beat to call a change (report.CompareWith).
	DefaultRuns = 3
)

// PerfInput says what to measure. Zero values take the defaults above.
type PerfInput struct {
	// BaseURL is the API root, with or without a trailing /v1
	// (http://10.0.0.1:8000 or http://10.0.0.1:8000/v1).
	BaseURL string
	// Model is the served model id sent in each request.
	Model string
	// PromptLengths are the pp points in tokens (default 512, 2048, 8192).
	PromptLengths []int
	// Depths are the context sizes in tokens the tg points run at
	// (default 0, 4096, 8192).
	Depths []int
	// Concurrency are the numbers of simultaneous requests per tg point
	// (default 1, 2).
	Concurrency []int
	// GenTokens is max_tokens of each measured request (default 128).
	GenTokens int
	// Repeats is the number of requests per prompt length (default 3).
	Repeats int
	// Runs is how many times the pp/tg sweep is repeated after one warm-up
	// and calibration (default 3); the result's rates are medians over the
	// runs and Samples keeps every run's value.
	Runs int
	// ContextTokens is the server's context window; 0 asks /v1/models
	// (max_model_len, context_length or max_context_length). Prompt lengths
	// and depths above 95% of it minus GenTokens are clamped.
	ContextTokens int
	// RequestTimeout bounds each request (default 5m).
	RequestTimeout time.Duration
	// Seed makes the prompt text reproducible; 0 uses the clock (recorded
	// in the result). Every request also gets a distinct first line so a
	// prefix cache cannot turn prefill into a lookup.
	Seed int64
	// APIKey is sent as a bearer token when set; it never appears in the result.
	APIKey string
	// OnProgress receives one line per step ("pp 2048: 3120 tok/s").
	OnProgress func(string)
	// Client overrides the HTTP client (tests); nil uses a fresh one.
	Client *http.Client
}

// PerfResult is the sweep's outcome. The JSON field names are stable: they
// are the report format. All rates are tokens per second, all latencies
// milliseconds, all token counts the server's own usage figures.
type PerfResult struct {
	// BaseURL and Model identify what was measured.
	BaseURL string `json:"base_url"`
	Model   string `json:"model"`
	// StartedAt is when the sweep began (UTC); Seconds its duration.
	StartedAt time.Time `json:"started_at"`
	Seconds   float64   `json:"seconds"`
	// Seed is the prompt seed actually used.
	Seed int64 `json:"seed"`
	// GenTokens is the max_tokens asked of each measured request.
	GenTokens int `json:"gen_tokens"`
	// ContextTokens is the context window the points were clamped to
	// (0 = unknown, nothing clamped).
	ContextTokens int `json:"context_tokens,omitempty"`
	// Clamped lists the requested lengths or depths that were lowered to
	// fit the context ("pp 8192 -> 4000").
	Clamped []string `json:"clamped,omitempty"`
	// Calibration is how prompt text was sized to the server's tokenizer.
	Calibration Calibration `json:"calibration"`
	// WarmupMs is the warm-up request's total time.
	WarmupMs float64 `json:"warmup_ms"`
	// PP holds one point per prompt length.
	PP []PPPoint `json:"pp"`
	// TG holds one point per depth x concurrency.
	TG []TGPoint `json:"tg"`
	// TTFT is over the tg requests at the smallest depth: the latency a
	// user with a short prompt sees (responsiveness).
	TTFT Latency `json:"ttft"`
	// Runs is how many sweeps the figures above are medians of.
	Runs int `json:"runs,omitempty"`
	// Samples holds every run's value per metric, under the metric names
	// of report verdicts ("pp 2048", "tg d0 c1", "tg d0 c2 aggregate",
	// "ttft p50", "ttft p95"): the run-to-run spread a verdict must beat.
	Samples map[string][]float64 `json:"samples,omitempty"`
	// Failures lists every request that failed or timed out, with the
	// point it belonged to. A failed request is recorded, never retried.
	Failures []Failure `json:"failures,omitempty"`
}

// Calibration records how many characters of filler make a token on this
// server, measured with two requests and read from usage.prompt_tokens.
type Calibration struct {
	// OverheadTokens is the prompt_tokens of a one-word chat (template cost).
	OverheadTokens int `json:"overhead_tokens"`
	// SampleChars / SampleTokens are the calibration text and its count
	// (minus the overhead).
	SampleChars  int     `json:"sample_chars"`
	SampleTokens int     `json:"sample_tokens"`
	CharsPerTok  float64 `json:"chars_per_token"`
}

// PPPoint is prompt processing at one prompt length.
type PPPoint struct {
	// RequestedTokens is the asked-for length; PromptTokens the server's
	// median usage.prompt_tokens over the repeats.
	RequestedTokens int `json:"requested_tokens"`
	PromptTokens    int `json:"prompt_tokens"`
	// TokPerSec is the median over repeats of prompt_tokens / TTFT.
	TokPerSec float64 `json:"tok_per_sec"`
	// TTFT is over the repeats.
	TTFT Latency `json:"ttft"`
	// OK and Failed count the requests.
	OK     int `json:"ok"`
	Failed int `json:"failed"`
}

// TGPoint is token generation at one depth and concurrency.
type TGPoint struct {
	Depth       int `json:"depth"`
	Concurrency int `json:"concurrency"`
	// PromptTokens is the mean usage.prompt_tokens of the requests.
	PromptTokens int `json:"prompt_tokens"`
	// PerRequestTokPerSec is the mean over successful requests of
	// (completion_tokens - 1) / (last token time - first token time).
	PerRequestTokPerSec float64 `json:"per_request_tok_per_sec"`
	// AggregateTokPerSec is the sum over the concurrent requests of
	// (completion_tokens - 1) divided by the wall time from the earliest
	// first token to the latest last token: as in PerRequestTokPerSec, each
	// request's first token marks its start, so a batch whose requests
	// start together is not overstated by n/(n-1).
	AggregateTokPerSec float64 `json:"aggregate_tok_per_sec"`
	// TTFT is over this point's requests.
	TTFT Latency `json:"ttft"`
	// Requests are the individual measurements.
	Requests []Sample `json:"requests"`
	OK       int      `json:"ok"`
	Failed   int      `json:"failed"`
}

// Sample is one streamed request.
type Sample struct {
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	TTFTMs           float64 `json:"ttft_ms"`
	// GenMs is last token time minus first token time.
	GenMs     float64 `json:"gen_ms"`
	TotalMs   float64 `json:"total_ms"`
	TokPerSec float64 `json:"tok_per_sec"`
	// Error is set when the request failed (and the numbers are zero).
	Error string `json:"error,omitempty"`

	first, last time.Time
}

// Latency is a small percentile summary in milliseconds.
type Latency struct {
	N     int     `json:"n"`
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
}

// Failure is one failed request.
type Failure struct {
	// Point names where it happened: "warmup", "pp 2048", "tg d4096 c2".
	Point string `json:"point"`
	// Timeout is true when the request hit RequestTimeout.
	Timeout bool   `json:"timeout"`
	Error   string `json:"error"`
}

// Perf runs the sweep: warm-up, calibration, pp points, tg points.
// Request failures and timeouts are recorded in the result; Perf itself
// fails only when ctx is done, the input is unusable, the server is not
// answering at all (warm-up or calibration failed), or the server does not
// report usage (fault type NoUsage).
func Perf(ctx context.Context, in PerfInput) (res PerfResult, err error) {
	in = in.withDefaults()
	res = PerfResult{BaseURL: in.BaseURL, Model: in.Model, StartedAt: time.Now().UTC(), GenTokens: in.GenTokens, Seed: in.Seed}
	if in.BaseURL == "" || in.Model == "" {
		return res, fault.Permanent(fault.InvalidSpec, errors.New("bench: base URL and model are required (recipe [bench], --lane)"))
	}
	p := &perfRun{in: in, res: &res, c: &client{base: apiRoot(in.BaseURL), model: in.Model, key: in.APIKey, http: in.Client, timeout: in.RequestTimeout}}
	start := time.Now()
	// res is the named result: the deferred duration reaches the caller
	// on every return.
	defer func() { res.Seconds = time.Since(start).Seconds() }()

	if err := p.warmUp(ctx); err != nil {
		return res, err
	}
	if err := p.calibrate(ctx); err != nil {
		return res, err
	}
	var runs []PerfResult
	for p.run = 0; p.run < in.Runs; p.run++ {
		if in.Runs > 1 {
			p.progress("sweep %d of %d", p.run+1, in.Runs)
		}
		res.PP, res.TG = nil, nil
		if err := p.sweepPP(ctx); err != nil {
			return res, err
		}
		if err := p.sweepTG(ctx); err != nil {
			return res, err
		}
		runs = append(runs, PerfResult{PP: res.PP, TG: res.TG, TTFT: res.TTFT})
	}
	combineRuns(&res, runs)
	return res, nil
}

// perfRun is one Perf call's state: the client, the prompt builder, the
// request counter that keeps every prompt distinct, the sweep under way
// and the result being filled.
type perfRun struct {
	in        PerfInput
	c         *client
	pb        promptBuilder
	res       *PerfResult
	ctxTokens int
	run       int
	reqNo     int
}

func (p *perfRun) progress(format string, a ...any) {
	if p.in.OnProgress != nil {
		p.in.OnProgress(fmt.Sprintf(format, a...))
	}
}

// warmUp sends one short request that loads kernels and caches; its
// timing is kept apart from the points.
func (p *perfRun) warmUp(ctx context.Context) error {
	p.progress("warm-up request to %s", p.c.base)
	w, err := p.c.stream(ctx, "Say hello.", 8)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return failWith(err, "bench warm-up against %s (model %s): %w; is the lane serving?", p.c.base, p.in.Model)
	}
	p.res.WarmupMs = w.TotalMs
	return nil
}

// calibrate learns the context window (unless given) and how much filler
// text makes a token, so prompts have the lengths asked for.
func (p *perfRun) calibrate(ctx context.Context) error {
	p.ctxTokens = p.in.ContextTokens
	if p.ctxTokens == 0 {
		p.ctxTokens = p.c.contextWindow(ctx)
	}
	p.res.ContextTokens = p.ctxTokens

	cal, err := p.c.calibrate(ctx, p.in.Seed, p.ctxTokens)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return failWith(err, "bench calibration against %s: %w", p.c.base)
	}
	p.res.Calibration = cal
	p.progress("calibrated: %.2f chars/token, chat overhead %d tokens", cal.CharsPerTok, cal.OverheadTokens)
	p.pb = promptBuilder{seed: p.in.Seed, cal: cal}
	return nil
}

// fit clamps a prompt length or depth to the context window, recording
// the clamp once (in the first sweep).
func (p *perfRun) fit(kind string, n int) int {
	if p.ctxTokens <= 0 {
		return n
	}
	limit := fitLimit(p.ctxTokens, p.in.GenTokens)
	if n > limit && p.run == 0 {
		p.res.Clamped = append(p.res.Clamped, fmt.Sprintf("%s %d -> %d (context %d)", kind, n, limit, p.ctxTokens))
		return limit
	}
	return min(n, limit)
}

// sweepPP measures prefill: Repeats one-token requests per prompt length.
func (p *perfRun) sweepPP(ctx context.Context) error {
	for _, n := range p.in.PromptLengths {
		n = p.fit("pp", n)
		pt := PPPoint{RequestedTokens: n}
		var rates, ttfts []float64
		var ptoks []int
		for r := 0; r < p.in.Repeats; r++ {
			p.reqNo++
			s, err := p.c.stream(ctx, p.pb.prompt(p.reqNo, n), 1)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if isNoUsage(err) {
					return err
				}
				pt.Failed++
				p.res.Failures = append(p.res.Failures, failure(fmt.Sprintf("pp %d", n), err))
				continue
			}
			pt.OK++
			rates = append(rates, float64(s.PromptTokens)/(s.TTFTMs/1000))
			ttfts = append(ttfts, s.TTFTMs)
			ptoks = append(ptoks, s.PromptTokens)
		}
		pt.TokPerSec = round1(percentile(rates, 50))
		pt.TTFT = latency(ttfts)
		pt.PromptTokens = medianInt(ptoks)
		p.res.PP = append(p.res.PP, pt)
		p.progress("pp %d (server counted %d): %.0f tok/s, TTFT p50 %.0f ms (%d ok, %d failed)", n, pt.PromptTokens, pt.TokPerSec, pt.TTFT.P50Ms, pt.OK, pt.Failed)
	}
	return nil
}

// sweepTG measures decode at every depth x concurrency; the TTFT of the
// smallest depth's requests is the sweep's responsiveness figure.
func (p *perfRun) sweepTG(ctx context.Context) error {
	minDepth := -1
	for _, d := range p.in.Depths {
		if minDepth < 0 || d < minDepth {
			minDepth = d
		}
	}
	var shortTTFT []float64
	for _, d := range p.in.Depths {
		d = p.fit("depth", d)
		for _, cc := range p.in.Concurrency {
			name := fmt.Sprintf("tg d%d c%d", d, cc)
			pt, ttfts, err := tgPoint(ctx, p.c, p.pb, p.in.GenTokens, d, cc, &p.reqNo, p.res)
			if err != nil {
				return err
			}
			pt.TTFT = latency(ttfts)
			if d == fitQuiet(minDepth, p.ctxTokens, p.in.GenTokens) {
				shortTTFT = append(shortTTFT, ttfts...)
			}
			p.res.TG = append(p.res.TG, pt)
			p.progress("%s: %.1f tok/s per request, %.1f tok/s aggregate (%d ok, %d failed)", name, pt.PerRequestTokPerSec, pt.AggregateTokPerSec, pt.OK, pt.Failed)
		}
	}
	p.res.TTFT = latency(shortTTFT)
	return nil
}

// tgPoint measures one decode point: cc requests at once, each with a
// prompt of depth d tokens, generating genTokens each. Failures are
// counted in the point and recorded in res; a missing usage report and a
// done ctx end the sweep.
func tgPoint(ctx context.Context, c *client, pb promptBuilder, genTokens, d, cc int, reqNo *int, res *PerfResult) (TGPoint, []float64, error) {
	pt := TGPoint{Depth: d, Concurrency: cc}
	name := fmt.Sprintf("tg d%d c%d", d, cc)
	samples := make([]Sample, cc)
	errs := make([]error, cc)
	var wg sync.WaitGroup
	for i := 0; i < cc; i++ {
		*reqNo++
		prompt := pb.context(*reqNo, d)
		wg.Add(1)
		go func(i int, prompt string) {
			defer wg.Done()
			samples[i], errs[i] = c.stream(ctx, prompt, genTokens)
		}(i, prompt)
	}
	wg.Wait()
	if ctx.Err() != nil {
		return pt, nil, ctx.Err()
	}
	var first, last time.Time
	var sumTok, sumPrompt int
	var rates, ttfts []float64
	for i, s := range samples {
		if errs[i] != nil {
			if isNoUsage(errs[i]) {
				return pt, nil, errs[i]
			}
			pt.Failed++
			res.Failures = append(res.Failures, failure(name, errs[i]))
			pt.Requests = append(pt.Requests, Sample{Error: errs[i].Error()})
			continue
		}
		pt.OK++
		pt.Requests = append(pt.Requests, s)
		sumTok += s.CompletionTokens
		sumPrompt += s.PromptTokens
		if s.TokPerSec > 0 {
			rates = append(rates, s.TokPerSec)
		}
		ttfts = append(ttfts, s.TTFTMs)
		if first.IsZero() || s.first.Before(first) {
			first = s.first
		}
		if s.last.After(last) {
			last = s.last
		}
	}
	if pt.OK > 0 {
		pt.PromptTokens = sumPrompt / pt.OK
		pt.PerRequestTokPerSec = round1(mean(rates))
		if wall := last.Sub(first).Seconds(); wall > 0 {
			pt.AggregateTokPerSec = round1(float64(sumTok-pt.OK) / wall)
		}
	}
	return pt, ttfts, nil
}

// PerfMetrics names a sweep's figures the way verdicts do ("pp 2048",
// "tg d0 c1", "tg d0 c2 aggregate", "ttft p50", "ttft p95"), with whether
// higher is better; points where every request failed are left out.
func PerfMetrics(r PerfResult) []Metric {
	var out []Metric
	for _, p := range r.PP {
		if p.OK > 0 && p.TokPerSec > 0 {
			out = append(out, Metric{Name: fmt.Sprintf("pp %d", p.RequestedTokens), Unit: "tok/s", Value: p.TokPerSec, HigherIsBetter: true})
		}
	}
	for _, p := range r.TG {
		if p.OK == 0 {
			continue
		}
		if p.PerRequestTokPerSec > 0 {
			out = append(out, Metric{Name: fmt.Sprintf("tg d%d c%d", p.Depth, p.Concurrency), Unit: "tok/s", Value: p.PerRequestTokPerSec, HigherIsBetter: true})
		}
		if p.Concurrency > 1 && p.AggregateTokPerSec > 0 {
			out = append(out, Metric{Name: fmt.Sprintf("tg d%d c%d aggregate", p.Depth, p.Concurrency), Unit: "tok/s", Value: p.AggregateTokPerSec, HigherIsBetter: true})
		}
	}
	if r.TTFT.N > 0 {
		out = append(out, Metric{Name: "ttft p50", Unit: "ms", Value: r.TTFT.P50Ms}, Metric{Name: "ttft p95", Unit: "ms", Value: r.TTFT.P95Ms})
	}
	return out
}

// Metric is one named figure of a sweep.
type Metric struct {
	Name           string
	Unit           string
	Value          float64
	HigherIsBetter bool
}

// combineRuns folds repeated sweeps into res: every figure is the median
// over the runs that measured it, counts are summed, requests kept, and
// Samples records each run's value per metric.
func combineRuns(res *PerfResult, runs []PerfResult) {
	if len(runs) == 0 {
		return
	}
	res.Runs = len(runs)
	res.Samples = map[string][]float64{}
	for _, r := range runs {
		for _, m := range PerfMetrics(r) {
			res.Samples[m.Name] = append(res.Samples[m.Name], m.Value)
		}
	}
	med := func(get func(PerfResult) (float64, bool)) float64 {
		var v []float64
		for _, r := range runs {
			if x, ok := get(r); ok {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return 0
		}
		return round1(percentile(v, 50))
	}
	lat := func(get func(PerfResult) Latency) Latency {
		var l Latency
		var p50, p95 []float64
		for _, r := range runs {
			x := get(r)
			if x.N > 0 {
				l.N += x.N
				p50 = append(p50, x.P50Ms)
				p95 = append(p95, x.P95Ms)
			}
		}
		if l.N > 0 {
			l.P50Ms, l.P95Ms = round1(percentile(p50, 50)), round1(percentile(p95, 50))
		}
		return l
	}
	first := runs[0]
	res.PP = append([]PPPoint(nil), first.PP...)
	for i := range res.PP {
		i := i
		p := &res.PP[i]
		p.OK, p.Failed = 0, 0
		for _, r := range runs[:] {
			if i < len(r.PP) {
				p.OK += r.PP[i].OK
				p.Failed += r.PP[i].Failed
			}
		}
		p.TokPerSec = med(func(r PerfResult) (float64, bool) {
			return r.PP[i].TokPerSec, i < len(r.PP) && r.PP[i].OK > 0
		})
		p.TTFT = lat(func(r PerfResult) Latency { return r.PP[i].TTFT })
	}
	res.TG = append([]TGPoint(nil), first.TG...)
	for i := range res.TG {
		i := i
		p := &res.TG[i]
		p.OK, p.Failed, p.Requests = 0, 0, nil
		for _, r := range runs {
			p.OK += r.TG[i].OK
			p.Failed += r.TG[i].Failed
			p.Requests = append(p.Requests, r.TG[i].Requests...)
		}
		p.PerRequestTokPerSec = med(func(r PerfResult) (float64, bool) {
			return r.TG[i].PerRequestTokPerSec, r.TG[i].OK > 0
		})
		p.AggregateTokPerSec = med(func(r PerfResult) (float64, bool) {
			return r.TG[i].AggregateTokPerSec, r.TG[i].OK > 0 && r.TG[i].AggregateTokPerSec > 0
		})
		p.TTFT = lat(func(r PerfResult) Latency { return r.TG[i].TTFT })
	}
	res.TTFT = lat(func(r PerfResult) Latency { return r.TTFT })
}

func fitQuiet(n, ctxTokens, gen int) int {
	if ctxTokens <= 0 {
		return n
	}
	return min(n, fitLimit(ctxTokens, gen))
}

// fitLimit is the largest prompt that surely fits: the context minus the
// generated tokens minus 5% headroom, because prompt sizing from the
// calibration is close but not exact.
func fitLimit(ctxTokens, gen int) int {
	return max(ctxTokens*95/100-gen, 1)
}

func (in PerfInput) withDefaults() PerfInput {
	if len(in.PromptLengths) == 0 {
		in.PromptLengths = DefaultPromptLengths
	}
	if len(in.Depths) == 0 {
		in.Depths = DefaultDepths
	}
	if len(in.Concurrency) == 0 {
		in.Concurrency = DefaultConcurrency
	}
	if in.GenTokens <= 0 {
		in.GenTokens = DefaultGenTokens
	}
	if in.Repeats <= 0 {
		in.Repeats = DefaultRepeats
	}
	if in.Runs <= 0 {
		in.Runs = DefaultRuns
	}
	if in.RequestTimeout <= 0 {
		in.RequestTimeout = DefaultRequestTimeout
	}
	if in.Seed == 0 {
		in.Seed = time.Now().UnixNano()
	}
	in.PromptLengths = positive(in.PromptLengths, 1)
	in.Depths = positive(in.Depths, 0)
	in.Concurrency = positive(in.Concurrency, 1)
	return in
}

// positive drops values below lo (a negative depth or zero concurrency is
// a typo, not a point to measure).
func positive(v []int, lo int) []int {
	out := make([]int, 0, len(v))
	for _, x := range v {
		if x >= lo {
			out = append(out, x)
		}
	}
	return out
}

func failure(point string, err error) Failure {
	return Failure{Point: point, Timeout: errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timed out"), Error: err.Error()}
}

func isNoUsage(err error) bool {
	t, ok := fault.TypeOf(err)
	return ok && t == NoUsage
}

// failWith wraps err, keeping a NoUsage classification.
func failWith(err error, format string, a ...any) error {
	wrapped := fmt.Errorf(format, append(a, err)...)
	if isNoUsage(err) {
		return fault.Permanent(NoUsage, wrapped)
	}
	return wrapped
}

func latency(ms []float64) Latency {
	if len(ms) == 0 {
		return Latency{}
	}
	return Latency{N: len(ms), P50Ms: round1(percentile(ms, 50)), P95Ms: round1(percentile(ms, 95))}
}

// percentile uses linear interpolation between closest ranks.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 1 {
		return s[0]
	}
	r := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(r))
	hi := int(math.Ceil(r))
	return s[lo] + (s[hi]-s[lo])*(r-float64(lo))
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var t float64
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

func medianInt(v []int) int {
	if len(v) == 0 {
		return 0
	}
	s := append([]int(nil), v...)
	sort.Ints(s)
	return s[len(s)/2]
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }
