package bench

import (
	"context"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// TestPerfAgainstInProcessEngineSim runs the sweep against the real
// engine-sim (in-process) in a synctest bubble over an in-memory network:
// the clock is fake, so what the sweep measures is the engine's pacing and
// nothing of this machine's load. Measured tg must be within 1% of the
// configured decode rate (per request and aggregate) and pp within 2% of
// the configured prefill rate (the sweep's own rounding and the prompt's
// token count are the slack).
func TestPerfAgainstInProcessEngineSim(t *testing.T) {
	const prefill, decode = 2000.0, 100.0
	model := simtest.WriteModel(t, filepath.Join(t.TempDir(), "model"), simtest.Model{})
	synctest.Test(t, func(t *testing.T) {
		eng, client := simtest.StartOnPipe(t, sim.Config{ModelPath: model, ServedModelName: "sim-model", PrefillTPS: prefill, DecodeTPS: decode, ContextLength: 16384})

		res, err := Perf(context.Background(), PerfInput{
			BaseURL: eng.URL, Model: "sim-model", Client: client,
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
		for _, p := range res.PP {
			if !within(p.TokPerSec, prefill, 0.02) {
				t.Errorf("pp %d (server counted %d): %.0f tok/s, want %.0f +-2%%", p.RequestedTokens, p.PromptTokens, p.TokPerSec, prefill)
			}
			if !within(float64(p.PromptTokens), float64(p.RequestedTokens), 0.10) {
				t.Errorf("pp %d: server counted %d tokens", p.RequestedTokens, p.PromptTokens)
			}
		}
		for _, p := range res.TG {
			if !within(p.PerRequestTokPerSec, decode, 0.01) {
				t.Errorf("tg d%d c%d: %.1f tok/s, want %.0f +-1%%", p.Depth, p.Concurrency, p.PerRequestTokPerSec, decode)
			}
			if wantAgg := decode * float64(p.Concurrency); !within(p.AggregateTokPerSec, wantAgg, 0.01) {
				t.Errorf("tg d%d c%d: aggregate %.1f tok/s, want %.0f +-1%%", p.Depth, p.Concurrency, p.AggregateTokPerSec, wantAgg)
			}
			for _, s := range p.Requests {
				if s.CompletionTokens != 64 {
					t.Errorf("tg d%d c%d: %d completion tokens, want 64", p.Depth, p.Concurrency, s.CompletionTokens)
				}
			}
		}
		t.Logf("pp %.0f/%.0f tok/s, tg %.1f/%.1f/%.1f/%.1f tok/s, aggregate c2 %.1f/%.1f (configured %g/%g)", res.PP[0].TokPerSec, res.PP[1].TokPerSec,
			res.TG[0].PerRequestTokPerSec, res.TG[1].PerRequestTokPerSec, res.TG[2].PerRequestTokPerSec, res.TG[3].PerRequestTokPerSec,
			res.TG[1].AggregateTokPerSec, res.TG[3].AggregateTokPerSec, prefill, decode)
	})
}

// BenchmarkPerfVsConfigured runs the sweep against engine-sim and reports
// measured/configured ratios (the "peer" is the sim's own pacing): go test
// -run XXX -bench PerfVsConfigured ./internal/engine/bench/
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
