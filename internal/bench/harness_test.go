package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
)

// toolEvalReport builds a report in tool-eval-bench's documented --json
// shape (schema 1) from per-scenario outcomes, computing the totals the
// way tool-eval-bench does (2 points a pass, 1 a partial).
func toolEvalReport(t *testing.T, outcomes map[string]string, capped bool) map[string]any {
	t.Helper()
	cats := map[string]map[string]any{}
	var scen []any
	total, maxp := 0, 0
	for _, id := range sortedKeys(outcomes) {
		st := outcomes[id]
		pts := map[string]int{"pass": 2, "partial": 1, "fail": 0}[st]
		cat := id[:1]
		c, ok := cats[cat]
		if !ok {
			c = map[string]any{"category": cat, "label": "Cat " + cat, "earned": 0, "max": 0, "percent": 0.0, "pass_count": 0, "partial_count": 0, "fail_count": 0}
			cats[cat] = c
		}
		c["earned"] = c["earned"].(int) + pts
		c["max"] = c["max"].(int) + 2
		c[st+"_count"] = c[st+"_count"].(int) + 1
		c["percent"] = float64(c["earned"].(int)) * 100 / float64(c["max"].(int))
		total += pts
		maxp += 2
		scen = append(scen, map[string]any{"scenario_id": id, "status": st, "points": pts, "summary": st + " " + id, "turn_count": 2})
	}
	var catList []any
	for _, k := range sortedKeys(cats) {
		catList = append(catList, cats[k])
	}
	score := total * 100 / maxp
	rating := "★★★★ Good"
	if capped {
		rating = "★★★ Adequate (safety-capped)"
	}
	return map[string]any{
		"schema_version": "1", "tool_eval_bench_version": "1.8.0",
		"final_score": score, "rating": rating, "safety_warnings": []string{},
		"deployability": 70, "responsiveness": 60, "total_scenarios": len(scen), "run_id": "2026-11-30T05-00-00.000000Z_abc",
		"config": map[string]any{}, "metadata": map[string]any{},
		"scores": map[string]any{
			"final_score": score, "total_points": total, "max_points": maxp, "rating": rating,
			"category_scores": catList, "scenario_results": scen,
			"throughput": map[string]any{"samples": 2, "failed": 1, "results": []any{map[string]any{"pp_tokens": 2048, "tg_tokens": 128, "depth": 0, "concurrency": 1, "ttft_ms": 420.5, "pp_tps": 4870.2, "tg_tps": 35.1}}},
		},
		"safety_gate": map[string]any{"passed": true, "warnings": []string{}},
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// writeHarnessScript writes a shell script standing in for the harness:
// it prints progress on stdout and stderr and copies the given JSON to
// $1 (the report path), exiting with status code.
func writeHarnessScript(t *testing.T, dir string, report []byte, code int) string {
	t.Helper()
	src := filepath.Join(dir, "report.src")
	if err := os.WriteFile(src, report, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "fake-tool-eval-bench.sh")
	body := "#!/bin/sh\n" +
		"echo \"scenario_start base=$2 model=$3 parallel=$4\"\n" +
		"echo '{\"event\": \"scenario_result\", \"status\": \"pass\"}' >&2\n" +
		"cp " + ShellQuote(src) + " \"$1\"\n" +
		"echo done\n" +
		"exit " + strconv.Itoa(code) + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

func TestRunHarnessIngestsToolEvalBenchReport(t *testing.T) {
	dir := t.TempDir()
	outcomes := map[string]string{"A-01": "pass", "A-02": "partial", "B-01": "fail", "K-01": "pass"}
	rep := toolEvalReport(t, outcomes, false)
	b, _ := json.Marshal(rep)
	script := writeHarnessScript(t, dir, b, 0)
	var mu sync.Mutex
	var lines []string
	model := "org/Model It's \"big\"; $(touch pwned)"
	res, err := RunHarness(context.Background(), HarnessInput{
		Template: ShellQuote(script) + " {output_dir}/result.json {base_url} {model} {parallel}",
		Vars:     HarnessVars{BaseURL: "http://127.0.0.1:8000/v1", Model: model, OutputDir: filepath.Join(dir, "out"), Seed: 42, Parallel: 4},
		Dir:      dir,
		OnLine:   func(s string) { mu.Lock(); lines = append(lines, s); mu.Unlock() },
	})
	if err != nil {
		t.Fatalf("RunHarness: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Fatal("a template value was executed by the shell")
	}
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, "model="+model) || !strings.Contains(joined, "parallel=4") || !strings.Contains(joined, `"event": "scenario_result"`) {
		t.Errorf("streamed lines lack stdout/stderr or the exact model value: %q", lines)
	}
	if res.Parallel != 4 || res.ExitCode != 0 || res.ReportFile != filepath.Join(dir, "out", "result.json") {
		t.Errorf("result %+v", res)
	}
	q := res.Quality
	wantScore := float64(rep["final_score"].(int))
	if q.Score != wantScore || q.TotalPoints != 5 || q.MaxPoints != 8 || q.Stars != 4 || q.SafetyCapped {
		t.Errorf("quality headline %+v, want score %g 5/8 four stars uncapped", q, wantScore)
	}
	if q.Pass != 2 || q.Partial != 1 || q.Fail != 1 || len(q.Scenarios) != 4 || len(q.Categories) != 3 {
		t.Errorf("counts pass %d partial %d fail %d, %d scenarios, %d categories", q.Pass, q.Partial, q.Fail, len(q.Scenarios), len(q.Categories))
	}
	for _, s := range q.Scenarios {
		if outcomes[s.ID] != s.Status {
			t.Errorf("scenario %s status %s, want %s", s.ID, s.Status, outcomes[s.ID])
		}
	}
	if q.Perf == nil || q.Perf.Samples != 2 || len(q.Perf.Results) != 1 || q.Perf.Results[0].TGTokPerSec != 35.1 {
		t.Errorf("perf block %+v", q.Perf)
	}
	if q.Deployability == nil || *q.Deployability != 70 {
		t.Errorf("deployability %v", q.Deployability)
	}
}

func TestRunHarnessMalformedReportNamesFieldAndFile(t *testing.T) {
	dir := t.TempDir()
	rep := toolEvalReport(t, map[string]string{"A-01": "pass"}, false)
	delete(rep["scores"].(map[string]any), "max_points")
	b, _ := json.Marshal(rep)
	script := writeHarnessScript(t, dir, b, 0)
	_, err := RunHarness(context.Background(), HarnessInput{
		Template: ShellQuote(script) + " {output_dir}/r.json", Vars: HarnessVars{OutputDir: filepath.Join(dir, "o")},
	})
	if err == nil {
		t.Fatal("malformed report accepted")
	}
	for _, want := range []string{"scores.max_points", filepath.Join(dir, "o", "r.json")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestRunHarnessWithoutReportFails(t *testing.T) {
	dir := t.TempDir()
	_, err := RunHarness(context.Background(), HarnessInput{Template: "echo oops >&2; exit 3", Vars: HarnessVars{OutputDir: dir}})
	if err == nil || !strings.Contains(err.Error(), "status 3") || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("want an error naming the exit status, output dir and last line, got %v", err)
	}
}

func TestRunHarnessNonZeroExitWithReportIsKept(t *testing.T) {
	dir := t.TempDir()
	b, _ := json.Marshal(toolEvalReport(t, map[string]string{"K-01": "fail", "A-01": "pass"}, true))
	script := writeHarnessScript(t, dir, b, 2)
	res, err := RunHarness(context.Background(), HarnessInput{Template: ShellQuote(script) + " {output_dir}/r.json", Vars: HarnessVars{OutputDir: dir}})
	if err != nil {
		t.Fatalf("RunHarness: %v", err)
	}
	if res.ExitCode != 2 || !res.Quality.SafetyCapped || res.Quality.Stars != 3 {
		t.Errorf("exit %d capped %v stars %d", res.ExitCode, res.Quality.SafetyCapped, res.Quality.Stars)
	}
}

func TestRunHarnessCancelKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var once sync.Once
	go func() {
		<-started
		time.Sleep(200 * time.Millisecond)
		cancel()
	}()
	begin := time.Now()
	_, err := RunHarness(ctx, HarnessInput{
		Template: "sleep 60 & echo $! > " + ShellQuote(pidFile) + "; echo started; sleep 60",
		Vars:     HarnessVars{OutputDir: dir},
		OnLine:   func(string) { once.Do(func() { close(started) }) },
	})
	if err == nil {
		t.Fatal("cancelled harness reported success")
	}
	if el := time.Since(begin); el > 10*time.Second {
		t.Fatalf("RunHarness returned %s after cancel", el)
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatalf("child pid file: %v", rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(3 * time.Second)
	for {
		// The killed child is reaped by init; signal 0 fails once it is gone.
		if err := syscall.Kill(pid, 0); err != nil {
			break
		}
		if stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); strings.Contains(string(stat), ") Z ") {
			break // zombie: dead, waiting for its reaper
		}
		if time.Now().After(deadline) {
			t.Fatalf("background child %d of the harness survived the cancel", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunHarnessRejectsBadSpec(t *testing.T) {
	for _, in := range []HarnessInput{
		{Template: "", Vars: HarnessVars{OutputDir: t.TempDir()}},
		{Template: "true", Vars: HarnessVars{}},
		{Template: "true", Format: "lm-eval", Vars: HarnessVars{OutputDir: t.TempDir()}},
	} {
		_, err := RunHarness(context.Background(), in)
		if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec {
			t.Errorf("input %+v: want InvalidSpec, got %v", in, err)
		}
	}
}

func TestRenderTemplateQuotesAndKeepsOtherBraces(t *testing.T) {
	got := RenderTemplate("run --url {base_url} --model {model} --seed {seed} --p {parallel} --tok {tokenizer} ${HOME} {unknown}",
		HarnessVars{BaseURL: "http://h:1/v1", Model: "a b'c", Seed: 9, Parallel: 0})
	want := `run --url http://h:1/v1 --model 'a b'\''c' --seed 9 --p 1 --tok '' ${HOME} {unknown}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestParseToolEvalBenchShapes(t *testing.T) {
	good := toolEvalReport(t, map[string]string{"A-01": "pass"}, false)
	cases := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"failed run", func(m map[string]any) { m["error"] = "connection_failed"; m["final_score"] = nil }, "failed run"},
		{"unknown schema", func(m map[string]any) { m["schema_version"] = "7" }, `schema_version "7"`},
		{"no scores", func(m map[string]any) { delete(m, "scores") }, `"scores"`},
		{"no score", func(m map[string]any) {
			delete(m, "final_score")
			delete(m["scores"].(map[string]any), "final_score")
		}, `"final_score"`},
		{"no categories", func(m map[string]any) { delete(m["scores"].(map[string]any), "category_scores") }, "scores.category_scores"},
		{"scenario without status", func(m map[string]any) {
			m["scores"].(map[string]any)["scenario_results"] = []any{map[string]any{"scenario_id": "A-01", "points": 2}}
		}, "scores.scenario_results[0].status"},
		{"odd status", func(m map[string]any) {
			m["scores"].(map[string]any)["scenario_results"] = []any{map[string]any{"scenario_id": "A-01", "points": 2, "status": "skipped"}}
		}, `"skipped"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, _ := json.Marshal(good)
			var m map[string]any
			json.Unmarshal(b, &m)
			c.edit(m)
			b, _ = json.Marshal(m)
			_, err := ParseToolEvalBench(b)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("want error naming %s, got %v", c.want, err)
			}
		})
	}
	if _, err := ParseToolEvalBench([]byte("[1,2]")); err == nil {
		t.Error("a JSON list parsed as a report")
	}
	// Safety warnings from the gate block when the envelope has none.
	b, _ := json.Marshal(good)
	var g map[string]any
	json.Unmarshal(b, &g)
	delete(g, "safety_warnings")
	g["safety_gate"] = map[string]any{"passed": false, "warnings": []string{"K-01 (Refuse rm -rf): ran it"}}
	b, _ = json.Marshal(g)
	if q, err := ParseToolEvalBench(b); err != nil || len(q.SafetyWarnings) != 1 || !strings.Contains(q.SafetyWarnings[0], "K-01") {
		t.Errorf("safety_gate warnings: %+v %v", q.SafetyWarnings, err)
	}
	// The fallback to scores.* when the envelope fields are absent (the
	// raw run_data shape).
	b, _ = json.Marshal(good)
	var m map[string]any
	json.Unmarshal(b, &m)
	delete(m, "final_score")
	delete(m, "rating")
	b, _ = json.Marshal(m)
	q, err := ParseToolEvalBench(b)
	if err != nil || q.Score != 100 || q.Stars != 4 {
		t.Errorf("fallback to scores.*: %+v %v", q, err)
	}
}
