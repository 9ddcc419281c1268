package bench

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
)

func within(got, want, frac float64) bool {
	return math.Abs(got-want) <= frac*want
}

// The double paces on the fake clock of a synctest bubble, so the sweep
// measures its schedule exactly, however busy this machine is.
func TestPerfMeasuresConfiguredRates(t *testing.T) { synctest.Test(t, testPerfMeasuresConfiguredRates) }

func testPerfMeasuresConfiguredRates(t *testing.T) {
	d := &engineDouble{prefill: 4000, decode: 100}
	base, client := serveDoublePipe(t, d)
	var lines []string
	res, err := Perf(context.Background(), PerfInput{
		BaseURL: base, Model: "double", Client: client,
		PromptLengths: []int{512, 2048}, Depths: []int{0, 512}, Concurrency: []int{1, 2},
		GenTokens: 40, Repeats: 2, Runs: 1, Seed: 7,
		OnProgress: func(s string) { lines = append(lines, s) },
	})
	if err != nil {
		t.Fatalf("Perf: %v", err)
	}
	if len(res.Failures) != 0 {
		t.Fatalf("unexpected failures: %+v", res.Failures)
	}
	if res.Seconds <= 0 {
		t.Errorf("result's duration is %v s: want the sweep's (it generated tokens at %v tok/s)", res.Seconds, d.decode)
	}
	if len(res.PP) != 2 || len(res.TG) != 4 {
		t.Fatalf("want 2 pp and 4 tg points, got %d and %d", len(res.PP), len(res.TG))
	}
	for _, p := range res.PP {
		if !within(float64(p.PromptTokens), float64(p.RequestedTokens), 0.10) {
			t.Errorf("pp %d: server counted %d prompt tokens, want within 10%%", p.RequestedTokens, p.PromptTokens)
		}
		if !within(p.TokPerSec, d.prefill, 0.02) {
			t.Errorf("pp %d: %.0f tok/s, want %.0f +-2%%", p.RequestedTokens, p.TokPerSec, d.prefill)
		}
		if p.OK != 2 || p.TTFT.N != 2 {
			t.Errorf("pp %d: ok=%d ttft.n=%d, want 2", p.RequestedTokens, p.OK, p.TTFT.N)
		}
	}
	for _, p := range res.TG {
		if !within(p.PerRequestTokPerSec, d.decode, 0.01) {
			t.Errorf("tg d%d c%d: %.1f tok/s per request, want %.0f +-1%%", p.Depth, p.Concurrency, p.PerRequestTokPerSec, d.decode)
		}
		wantAgg := d.decode * float64(p.Concurrency)
		if !within(p.AggregateTokPerSec, wantAgg, 0.01) {
			t.Errorf("tg d%d c%d: aggregate %.1f tok/s, want %.0f +-1%%", p.Depth, p.Concurrency, p.AggregateTokPerSec, wantAgg)
		}
		for _, s := range p.Requests {
			if s.CompletionTokens != 40 {
				t.Errorf("tg d%d c%d: completion_tokens %d, want 40 from usage", p.Depth, p.Concurrency, s.CompletionTokens)
			}
		}
		if p.Depth > 0 && !within(float64(p.PromptTokens), float64(p.Depth), 0.10) {
			t.Errorf("tg depth %d: prompt tokens %d, want within 10%%", p.Depth, p.PromptTokens)
		}
	}
	if res.TTFT.N != 3 || res.TTFT.P50Ms <= 0 || res.TTFT.P95Ms < res.TTFT.P50Ms {
		t.Errorf("TTFT over depth-0 requests: %+v", res.TTFT)
	}
	if res.Calibration.CharsPerTok <= 0 || res.Calibration.OverheadTokens != doubleOverhead {
		t.Errorf("calibration %+v, want overhead %d", res.Calibration, doubleOverhead)
	}
	if len(lines) < 6 || !strings.Contains(lines[0], "warm-up") {
		t.Errorf("progress lines: %q", lines)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"pp":`, `"tg":`, `"tok_per_sec":`, `"per_request_tok_per_sec":`, `"aggregate_tok_per_sec":`, `"p95_ms":`, `"calibration":`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
}

func TestPerfWithoutUsageFails(t *testing.T) {
	base := serveDouble(t, &engineDouble{prefill: 50000, decode: 1000, noUsage: true})
	_, err := Perf(context.Background(), PerfInput{BaseURL: base + "/v1", Model: "double", PromptLengths: []int{64}, Depths: []int{0}, Concurrency: []int{1}, GenTokens: 4, Repeats: 1, Runs: 1})
	if err == nil {
		t.Fatal("Perf against a server without usage succeeded")
	}
	if typ, ok := fault.TypeOf(err); !ok || typ != NoUsage {
		t.Errorf("fault type = %q, %v; want %s", typ, ok, NoUsage)
	}
	if !strings.Contains(err.Error(), "did not report usage") {
		t.Errorf("error does not say the server did not report usage: %v", err)
	}
}

// On the fake clock of a synctest bubble: the request timeout is the only
// thing that ends a hanging request, and the sweep's time is exact.
func TestPerfTimeoutsAreRecordedNotHangs(t *testing.T) {
	synctest.Test(t, testPerfTimeoutsAreRecordedNotHangs)
}

func testPerfTimeoutsAreRecordedNotHangs(t *testing.T) {
	// Generation with a long context hangs forever on this double.
	base, client := serveDoublePipe(t, &engineDouble{prefill: 50000, decode: 500, hangAbove: 300})
	start := time.Now()
	res, err := Perf(context.Background(), PerfInput{
		BaseURL: base, Model: "double", Client: client, PromptLengths: []int{128}, Depths: []int{0, 1000}, Concurrency: []int{1, 2},
		GenTokens: 8, Repeats: 1, Runs: 1, RequestTimeout: 400 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Perf: %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("Perf took %s with a hanging server", el)
	}
	if len(res.Failures) != 3 {
		t.Fatalf("want 3 failures (d1000 c1 + c2), got %+v", res.Failures)
	}
	for _, f := range res.Failures {
		if !f.Timeout || !strings.HasPrefix(f.Point, "tg d1000") || !strings.Contains(f.Error, "timed out") {
			t.Errorf("failure %+v: want a recorded timeout at tg d1000", f)
		}
	}
	for _, p := range res.TG {
		if p.Depth == 0 && (p.OK != p.Concurrency || p.PerRequestTokPerSec <= 0) {
			t.Errorf("tg d0 c%d: %+v, want all ok", p.Concurrency, p)
		}
		if p.Depth == 1000 && (p.Failed != p.Concurrency || p.OK != 0) {
			t.Errorf("tg d1000 c%d: ok %d failed %d, want all failed", p.Concurrency, p.OK, p.Failed)
		}
	}
}

func TestPerfClampsToServerContext(t *testing.T) {
	base := serveDouble(t, &engineDouble{prefill: 50000, decode: 1000, contextLen: 600})
	res, err := Perf(context.Background(), PerfInput{BaseURL: base, Model: "double", PromptLengths: []int{256, 2048}, Depths: []int{4096}, Concurrency: []int{1}, GenTokens: 16, Repeats: 1, Runs: 1})
	if err != nil {
		t.Fatalf("Perf: %v", err)
	}
	limit := 600*95/100 - 16
	if res.ContextTokens != 600 {
		t.Errorf("context tokens %d, want 600 from /v1/models", res.ContextTokens)
	}
	if res.PP[0].RequestedTokens != 256 || res.PP[1].RequestedTokens != limit || res.TG[0].Depth != limit {
		t.Errorf("points not clamped to %d: pp %+v tg depth %d", limit, res.PP, res.TG[0].Depth)
	}
	if len(res.Clamped) != 2 {
		t.Errorf("clamped notes: %q", res.Clamped)
	}
	if res.PP[1].PromptTokens > 600 {
		t.Errorf("clamped prompt still %d tokens", res.PP[1].PromptTokens)
	}
}

func TestPerfStopsOnCancel(t *testing.T) {
	base := serveDouble(t, &engineDouble{prefill: 50000, decode: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Perf(ctx, PerfInput{BaseURL: base, Model: "double", PromptLengths: []int{64}, Depths: []int{0}, Concurrency: []int{1}, GenTokens: 500, Repeats: 1, Runs: 1})
	if err == nil {
		t.Fatal("Perf succeeded after its context ended")
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Perf returned %s after cancel", el)
	}
}

func TestPerfRejectsMissingModel(t *testing.T) {
	_, err := Perf(context.Background(), PerfInput{BaseURL: "http://127.0.0.1:1"})
	if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec {
		t.Errorf("want InvalidSpec, got %v", err)
	}
}
