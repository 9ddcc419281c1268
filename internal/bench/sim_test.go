package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/sim/simtest"
)

// TestPerfAgainstInProcessEngineSim runs the sweep against the real
// engine-sim (in-process, loopback): measured tg must be within 10% of the
// configured decode rate and pp within 15% of the configured prefill rate.
func TestPerfAgainstInProcessEngineSim(t *testing.T) {
	const prefill, decode = 2000.0, 100.0
	model := simtest.WriteModel(t, filepath.Join(t.TempDir(), "model"), simtest.Model{})
	eng := simtest.Start(t, sim.Config{ModelPath: model, ServedModelName: "sim-model", PrefillTPS: prefill, DecodeTPS: decode, ContextLength: 16384})
	eng.WaitServing(t, 30*time.Second)

	// Rates are measurements on a shared 2-core machine: a sweep whose every
	// point is within tolerance passes; up to three sweeps are measured so a
	// scheduler stall is not mistaken for wrong pacing (wrong pacing fails
	// all three). Token counts and structure are checked on every sweep.
	var res PerfResult
	var problems []string
	for attempt := 1; attempt <= 3; attempt++ {
		var err error
		res, err = Perf(context.Background(), PerfInput{
			BaseURL: eng.URL, Model: "sim-model",
			PromptLengths: []int{512, 2048}, Depths: []int{0, 2048}, Concurrency: []int{1, 2},
			GenTokens: 64, Repeats: 2, RequestTimeout: time.Minute,
		})
		if err != nil {
			t.Fatalf("Perf against engine-sim: %v", err)
		}
		if len(res.Failures) > 0 {
			t.Fatalf("failures: %+v", res.Failures)
		}
		if res.ContextTokens != 16384 {
			t.Errorf("context window %d, want 16384 from /v1/models", res.ContextTokens)
		}
		problems = nil
		for _, p := range res.PP {
			if !within(p.TokPerSec, prefill, 0.15) {
				problems = append(problems, fmt.Sprintf("pp %d (server counted %d): %.0f tok/s, want %.0f +-15%%", p.RequestedTokens, p.PromptTokens, p.TokPerSec, prefill))
			}
			if !within(float64(p.PromptTokens), float64(p.RequestedTokens), 0.10) {
				t.Errorf("pp %d: server counted %d tokens", p.RequestedTokens, p.PromptTokens)
			}
		}
		for _, p := range res.TG {
			if !within(p.PerRequestTokPerSec, decode, 0.10) {
				problems = append(problems, fmt.Sprintf("tg d%d c%d: %.1f tok/s, want %.0f +-10%%", p.Depth, p.Concurrency, p.PerRequestTokPerSec, decode))
			}
			for _, s := range p.Requests {
				if s.CompletionTokens != 64 {
					t.Errorf("tg d%d c%d: %d completion tokens, want 64", p.Depth, p.Concurrency, s.CompletionTokens)
				}
			}
		}
		if len(problems) == 0 {
			break
		}
		t.Logf("sweep %d off tolerance: %v", attempt, problems)
	}
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("pp %.0f/%.0f tok/s, tg %.1f/%.1f/%.1f/%.1f tok/s (configured %g/%g)", res.PP[0].TokPerSec, res.PP[1].TokPerSec,
		res.TG[0].PerRequestTokPerSec, res.TG[1].PerRequestTokPerSec, res.TG[2].PerRequestTokPerSec, res.TG[3].PerRequestTokPerSec, prefill, decode)
}

// BenchmarkPerfVsConfigured runs the sweep against engine-sim and reports
// measured/configured ratios (the "peer" is the sim's own pacing): go test
// -run XXX -bench PerfVsConfigured ./internal/bench/
func BenchmarkPerfVsConfigured(b *testing.B) {
	const prefill, decode = 3000.0, 150.0
	model := simtest.WriteModel(b, filepath.Join(b.TempDir(), "model"), simtest.Model{})
	eng := simtest.Start(b, sim.Config{ModelPath: model, ServedModelName: "sim-model", PrefillTPS: prefill, DecodeTPS: decode, ContextLength: 16384})
	eng.WaitServing(b, 30*time.Second)
	var pp, tg, agg float64
	for i := 0; i < b.N; i++ {
		res, err := Perf(context.Background(), PerfInput{BaseURL: eng.URL, Model: "sim-model",
			PromptLengths: []int{2048}, Depths: []int{0, 4096}, Concurrency: []int{1, 2}, GenTokens: 128, Repeats: 3})
		if err != nil {
			b.Fatal(err)
		}
		pp += res.PP[0].TokPerSec
		tg += res.TG[0].PerRequestTokPerSec
		agg += res.TG[1].AggregateTokPerSec
	}
	n := float64(b.N)
	b.ReportMetric(pp/n/prefill, "pp_ratio")
	b.ReportMetric(tg/n/decode, "tg_ratio")
	b.ReportMetric(agg/n/(2*decode), "tg_c2_agg_ratio")
}

// TestPerfClampedPromptsFitEngineSim checks that lengths clamped to a small
// context are accepted by a server that enforces it (no 400s).
func TestPerfClampedPromptsFitEngineSim(t *testing.T) {
	model := simtest.WriteModel(t, filepath.Join(t.TempDir(), "model"), simtest.Model{})
	eng := simtest.Start(t, sim.Config{ModelPath: model, ServedModelName: "sim-model", PrefillTPS: 50000, DecodeTPS: 1000, ContextLength: 1200})
	eng.WaitServing(t, 30*time.Second)
	res, err := Perf(context.Background(), PerfInput{BaseURL: eng.URL, Model: "sim-model",
		PromptLengths: []int{8192}, Depths: []int{8192}, Concurrency: []int{1}, GenTokens: 32, Repeats: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) > 0 || len(res.Clamped) != 2 {
		t.Fatalf("failures %+v, clamped %q", res.Failures, res.Clamped)
	}
	if p := res.PP[0].PromptTokens; p > 1200 || p < 1000 {
		t.Errorf("clamped prompt counted %d tokens, want close to but under 1200", p)
	}
}
