package sim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// --jitter-pct varies each request's pace by a hash of --seed and the
// prompt: the same request is paced the same way every time, other
// prompts differently, and no request outside ±jitter. Run on the fake
// clock of a synctest bubble, over a PipeNet, so the times are the
// engine's schedule exactly.
func TestJitterPacesEachRequestByItsPrompt(t *testing.T) {
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	const prefill, decode, maxTokens = 1000.0, 100.0, 21
	synctest.Test(t, func(t *testing.T) {
		start := func(jitter float64, seed int64) *http.Client {
			_, c := simtest.StartOnPipe(t, sim.Config{ModelPath: model, PrefillTPS: prefill, DecodeTPS: decode, JitterPct: jitter, Seed: seed})
			return c
		}
		// took answers one non-streaming completion and returns its
		// duration and the schedule's duration at the configured rates.
		took := func(c *http.Client, prompt string) (got, exact time.Duration) {
			t.Helper()
			b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens, "ignore_eos": true})
			begin := time.Now()
			resp, err := c.Post("http://engine-sim.pipe/v1/completions", "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out struct {
				Usage struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
			}
			io.Copy(io.Discard, resp.Body)
			pt, ct := out.Usage.PromptTokens, out.Usage.CompletionTokens
			if ct < 2 {
				t.Fatalf("%d completion tokens: want several to time decode", ct)
			}
			exact = time.Duration((float64(pt)/prefill + float64(ct-1)/decode) * float64(time.Second))
			return time.Since(begin), exact
		}
		prompts := []string{"write about the lane", "write about the other lane", strings.Repeat("long prompt words ", 40)}

		plain := start(0, 0)
		for _, p := range prompts {
			if got, exact := took(plain, p); got != exact {
				t.Errorf("no jitter, prompt %.20q: took %s, want exactly %s", p, got, exact)
			}
		}

		const jitter = 10.0
		jittered, other := start(jitter, 7), start(jitter, 8)
		differs := 0
		for _, p := range prompts {
			first, exact := took(jittered, p)
			again, _ := took(jittered, p)
			seed8, _ := took(other, p)
			if again != first {
				t.Errorf("prompt %.20q: took %s, then %s: the same request must be paced the same way", p, first, again)
			}
			// Each rate is within ±10 %, so each phase takes between
			// 1/1.1 and 1/0.9 of its exact time.
			lo, hi := time.Duration(float64(exact)/1.1), time.Duration(float64(exact)/0.9)+time.Millisecond
			for _, d := range []time.Duration{first, seed8} {
				if d < lo || d > hi {
					t.Errorf("prompt %.20q: took %s, outside [%s, %s] for ±%g%% around %s", p, d, lo, hi, jitter, exact)
				}
			}
			if first != exact {
				differs++
			}
			if seed8 != first {
				differs++
			}
		}
		if differs < 4 {
			t.Errorf("only %d of 6 jittered requests paced off the exact schedule or off the other seed's: the jitter is not applied", differs)
		}
	})
}

func TestJitterFlagsAndRange(t *testing.T) {
	c, err := sim.ParseArgs(strings.Fields("/m --seed 42"), func(k string) string {
		return map[string]string{sim.EnvJitterPct: "7.5"}[k]
	})
	if err != nil || c.JitterPct != 7.5 || c.Seed != 42 || len(c.Ignored) != 0 {
		t.Errorf("--seed 42 with %s=7.5: %+v %v", sim.EnvJitterPct, c, err)
	}
	c, err = sim.ParseArgs(strings.Fields("/m --jitter-pct 3"), func(k string) string {
		return map[string]string{sim.EnvJitterPct: "7.5"}[k]
	})
	if err != nil || c.JitterPct != 3 {
		t.Errorf("--jitter-pct 3 must win over env: %+v %v", c, err)
	}
	for _, bad := range []float64{-1, 100} {
		cfg := sim.Config{ModelPath: "/m", JitterPct: bad}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--jitter-pct") {
			t.Errorf("jitter %g: %v, want an error naming --jitter-pct", bad, err)
		}
	}
}
