package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// wrkResult is one wrk run: latency percentiles (ms) and requests/s.
type wrkResult struct {
	p50, p99, rps float64
}

// body is the non-streaming request: one token, so the engine's time is
// its HTTP handling alone.
func body(model string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello"}],"max_tokens":1,"stream":%v}`, model, stream)
}

// runWrk runs wrk against t at conc connections for dur (after a 1 s
// warm-up run) and reads its latency distribution and rate.
func runWrk(dir string, t target, conc int, dur time.Duration) (wrkResult, error) {
	script := filepath.Join(dir, "post-"+t.name+".lua")
	lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.body = '%s'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n", body(t.model, false))
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		return wrkResult{}, err
	}
	threads := min(conc, 2)
	wrk := func(d time.Duration) (string, error) {
		out, err := exec.Command("wrk", "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conc), "-d", fmt.Sprintf("%.0fs", d.Seconds()),
			"--latency", "-s", script, t.url+"/v1/chat/completions").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("wrk %s: %v\n%s", t.name, err, out)
		}
		if strings.Contains(string(out), "Non-2xx") || strings.Contains(string(out), "Socket errors") {
			return "", fmt.Errorf("wrk %s c=%d: errors:\n%s", t.name, conc, out)
		}
		return string(out), nil
	}
	if _, err := wrk(time.Second); err != nil {
		return wrkResult{}, err
	}
	out, err := wrk(dur)
	if err != nil {
		return wrkResult{}, err
	}
	var r wrkResult
	for _, p := range []struct {
		re *regexp.Regexp
		v  *float64
	}{
		{regexp.MustCompile(`(?m)^\s+50%\s+([\d.]+)(us|ms|s)\s*$`), &r.p50},
		{regexp.MustCompile(`(?m)^\s+99%\s+([\d.]+)(us|ms|s)\s*$`), &r.p99},
	} {
		m := p.re.FindStringSubmatch(out)
		if m == nil {
			return r, fmt.Errorf("wrk %s: no latency distribution in:\n%s", t.name, out)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		*p.v = v * map[string]float64{"us": 0.001, "ms": 1, "s": 1000}[m[2]]
	}
	m := regexp.MustCompile(`Requests/sec:\s+([\d.]+)`).FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk %s: no Requests/sec in:\n%s", t.name, out)
	}
	r.rps, _ = strconv.ParseFloat(m[1], 64)
	return r, nil
}

// ttftResult is the time to the first body byte of streamed answers (ms).
type ttftResult struct {
	p50, p99 float64
	n        int
}

// measureTTFT sends n streamed requests to t one after another (after
// 20 not counted) and times each answer's first body byte from the
// request's start.
func measureTTFT(t target, n int) (ttftResult, error) {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
	defer c.CloseIdleConnections()
	b := body(t.model, true)
	var took []float64
	one := make([]byte, 1)
	for i := 0; i < n+20; i++ {
		start := time.Now()
		resp, err := c.Post(t.url+"/v1/chat/completions", "application/json", bytes.NewBufferString(b))
		if err != nil {
			return ttftResult{}, fmt.Errorf("stream %s: %v", t.name, err)
		}
		if _, err := io.ReadFull(resp.Body, one); err != nil || resp.StatusCode != 200 {
			resp.Body.Close()
			return ttftResult{}, fmt.Errorf("stream %s: status %d: %v", t.name, resp.StatusCode, err)
		}
		d := time.Since(start)
		rest, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Contains(rest, []byte("[DONE]")) {
			return ttftResult{}, fmt.Errorf("stream %s: cut short: %v", t.name, err)
		}
		if i >= 20 {
			took = append(took, float64(d.Microseconds())/1000)
		}
	}
	sort.Float64s(took)
	return ttftResult{p50: pct(took, 50), p99: pct(took, 99), n: n}, nil
}

// pct is the p-th percentile of sorted xs (nearest rank).
func pct(xs []float64, p float64) float64 {
	i := int(float64(len(xs))*p/100+0.5) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// report prints the table docs/benchmarks.md carries, and whether each
// goal is met.
func report(res map[string]map[int]wrkResult, ttft map[string]ttftResult, dur time.Duration, streamN int) {
	fmt.Printf("\n| what | direct | gateway | nginx | added by the gateway | added by nginx | goal |\n|---|---|---|---|---|---|---|\n")
	for _, c := range []int{1, 64} {
		d, g, n := res["direct"][c], res["gateway"][c], res["nginx"][c]
		for _, q := range []struct {
			name    string
			d, g, n float64
			goal    bool
		}{{"p50", d.p50, g.p50, n.p50, false}, {"p99", d.p99, g.p99, n.p99, true}} {
			goal := "—"
			if q.goal {
				goal = fmt.Sprintf("gateway ≤ nginx + 1 ms: %s", met(q.g-q.d <= q.n-q.d+1))
			}
			fmt.Printf("| non-streaming c=%d %s (%s wrk) | %.3f ms | %.3f ms | %.3f ms | %+.3f ms | %+.3f ms | %s |\n", c, q.name, dur, q.d, q.g, q.n, q.g-q.d, q.n-q.d, goal)
		}
		fmt.Printf("| non-streaming c=%d throughput | %.0f req/s | %.0f req/s | %.0f req/s | %.2f× direct | %.2f× direct | gateway ≥ 0.9× nginx: %.2f×, %s |\n",
			c, d.rps, g.rps, n.rps, g.rps/d.rps, n.rps/d.rps, g.rps/n.rps, met(g.rps >= 0.9*n.rps))
	}
	d, g, n := ttft["direct"], ttft["gateway"], ttft["nginx"]
	fmt.Printf("| streaming TTFT p50 (%d sequential) | %.3f ms | %.3f ms | %.3f ms | %+.3f ms | %+.3f ms | — |\n", streamN, d.p50, g.p50, n.p50, g.p50-d.p50, n.p50-d.p50)
	fmt.Printf("| streaming TTFT p99 (%d sequential) | %.3f ms | %.3f ms | %.3f ms | %+.3f ms | %+.3f ms | gateway added ≤ 2 ms: %s |\n", streamN, d.p99, g.p99, n.p99, g.p99-d.p99, n.p99-d.p99, met(g.p99-d.p99 <= 2))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
