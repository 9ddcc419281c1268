package bench_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sparklane/sparklane/internal/engine/bench"
	"github.com/sparklane/sparklane/internal/engine/report"
	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// Verdicts do not flip on noise (issue 17): an unchanged engine-sim lane
// benched 10 times against its first bench gives 0 regressions, and the
// same lane slowed by 20 % (prefill and decode) is a regression every time.
// Each bench repeats its sweep bench.DefaultRuns times.
//
// The engine and the bench client run in a synctest bubble over an
// in-memory network, so time is the bubble's fake clock: what the bench
// measures is the engine's pacing and nothing of this machine's load. The
// noise the verdict must see through is the engine's own: every request's
// rates vary by up to ±8 % (sim.Config.JitterPct, a hash of the seed and
// the prompt), and each bench sends other prompts (its own seed), so no
// two benches measure the same numbers (checked below), and every run of
// this test measures the same ones.
func TestVerdictsUnchangedLaneNeverRegressesSlowedLaneAlways(t *testing.T) {
	const prefill, decode, jitter = 20000.0, 400.0, 8.0
	model := simtest.WriteModel(t, filepath.Join(t.TempDir(), "model"), simtest.Model{})
	synctest.Test(t, func(t *testing.T) {
		start := func(slow float64) (*simtest.Engine, *http.Client) {
			return simtest.StartOnPipe(t, sim.Config{ModelPath: model, ServedModelName: "sim-model",
				PrefillTPS: prefill * slow, DecodeTPS: decode * slow, JitterPct: jitter, Seed: 7, ContextLength: 16384})
		}
		fast, fastClient := start(1)
		slowed, slowedClient := start(0.8)
		bench1 := func(e *simtest.Engine, c *http.Client, id string, seed int64) report.Report {
			t.Helper()
			res, err := bench.Perf(context.Background(), bench.PerfInput{BaseURL: e.URL, Model: "sim-model", Client: c,
				PromptLengths: []int{2048}, Depths: []int{0}, Concurrency: []int{1, 2}, GenTokens: 32, Repeats: 2, Seed: seed, RequestTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if res.Runs != bench.DefaultRuns || len(res.Samples["tg d0 c1"]) != bench.DefaultRuns {
				t.Fatalf("runs %d, samples %v: want %d runs per bench", res.Runs, res.Samples, bench.DefaultRuns)
			}
			return report.Report{ID: id, Perf: &res}
		}
		base := bench1(fast, fastClient, "base", 11)
		regressions, flips := 0, 0
		distinct := map[string]bool{fmt.Sprint(base.Perf.Samples["tg d0 c1"]): true}
		for i := 0; i < 10; i++ {
			same := bench1(fast, fastClient, fmt.Sprintf("same-%d", i), int64(12+i))
			distinct[fmt.Sprint(same.Perf.Samples["tg d0 c1"])] = true
			v := report.CompareWith(same, base, report.CompareOptions{})
			if v.Overall == report.Regression {
				regressions++
				t.Logf("unchanged bench %d judged a regression: %v", i, v.Changes(report.Worse))
			}
			if v.Overall != report.Neutral {
				flips++
			}
		}
		if regressions != 0 {
			t.Errorf("unchanged lane: %d regressions in 10 benches, want 0", regressions)
		}
		// The noise is there: the 11 benches of the unchanged lane did not
		// measure one set of numbers.
		if len(distinct) < 6 {
			t.Errorf("unchanged lane: only %d distinct tg d0 c1 sample sets in 11 benches: the engine's jitter is not reaching the measurement", len(distinct))
		}
		for i := 0; i < 10; i++ {
			v := report.CompareWith(bench1(slowed, slowedClient, fmt.Sprintf("slow-%d", i), int64(30+i)), base, report.CompareOptions{})
			if v.Overall != report.Regression {
				t.Errorf("lane slowed by 20%%, bench %d: verdict %s, want regression: %+v", i, v.Overall, v.Metrics)
			} else if i == 0 {
				t.Logf("slowed: %v", v.Changes(report.Worse))
			}
		}
		t.Logf("unchanged lane: %d of 10 benches not neutral (improvements), 0 regressions allowed; %d distinct sample sets", flips, len(distinct))
	})
}
