package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// toolEvalReport builds a report in the layout tool-eval-bench 1.4.3.1
// prints with --json (run_id, config, scores, metadata; see
// testdata/tool-eval-bench-1.4.3.1.json) from per-scenario outcomes,
// computing the totals the way tool-eval-bench does (2 points a pass, 1 a
// partial).
func toolEvalReport(t *testing.T, outcomes map[string]string, capped bool) map[string]any {
	t.Helper()
	cats := map[string]map[string]any{}
	var scen []any
	var ids []string
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
		ids = append(ids, id)
		scen = append(scen, map[string]any{"scenario_id": id, "status": st, "points": pts, "summary": st + " " + id, "note": nil,
			"tool_calls_made": []any{}, "expected_behavior": "", "duration_seconds": 1.5, "turn_count": 2})
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
		"run_id": "20261130T050000Z_abc", "status": "completed",
		"config": map[string]any{"model": "m", "backend": "vllm", "base_url": "http://127.0.0.1:8000", "temperature": 0.0,
			"timeout_seconds": 60.0, "max_turns": 8, "seed": 42, "reference_date": nil, "scenario_count": len(ids), "scenario_ids": ids},
		"scores": map[string]any{
			"final_score": score, "total_points": total, "max_points": maxp, "rating": rating,
			"category_scores": catList, "scenario_results": scen,
			"deployability": 70, "responsiveness": 60, "median_turn_ms": 812.4, "alpha": 0.7,
		},
		"metadata": map[string]any{"tool_version": "1.4.3.1", "hostname": "bench", "platform_info": "Linux", "python_version": "3.12.3",
			"model": "m", "backend": "vllm", "base_url": "http://127.0.0.1:8000", "seed": 42, "scenario_selector": fmt.Sprintf("all (%d)", len(ids)),
			"trials": 1, "parallel": 1, "error_rate": 0.0, "thinking_enabled": true},
		"report_path": "runs/20261130T050000Z_abc.md",
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
		"cp " + contract.QuoteWord(src) + " \"$1\"\n" +
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
		Template: contract.QuoteWord(script) + " {output_dir}/result.json {base_url} {model} {parallel}",
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
	wantScore := float64(rep["scores"].(map[string]any)["final_score"].(int))
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
	if q.Deployability == nil || *q.Deployability != 70 || q.Responsiveness == nil || *q.Responsiveness != 60 {
		t.Errorf("deployability %v responsiveness %v, want 70 and 60 (scores.deployability, scores.responsiveness)", q.Deployability, q.Responsiveness)
	}
	if q.ToolVersion != "1.4.3.1" || q.Seed == nil || *q.Seed != 42 || len(q.ScenarioIDs) != 4 || q.ScenarioSelector != "all (4)" {
		t.Errorf("version %q seed %v pool %v %q, want 1.4.3.1, 42, 4 scenarios", q.ToolVersion, q.Seed, q.ScenarioIDs, q.ScenarioSelector)
	}
}

func TestRunHarnessMalformedReportNamesFieldAndFile(t *testing.T) {
	dir := t.TempDir()
	rep := toolEvalReport(t, map[string]string{"A-01": "pass"}, false)
	delete(rep["scores"].(map[string]any), "max_points")
	b, _ := json.Marshal(rep)
	script := writeHarnessScript(t, dir, b, 0)
	_, err := RunHarness(context.Background(), HarnessInput{
		Template: contract.QuoteWord(script) + " {output_dir}/r.json", Vars: HarnessVars{OutputDir: filepath.Join(dir, "o")},
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
	res, err := RunHarness(context.Background(), HarnessInput{Template: contract.QuoteWord(script) + " {output_dir}/r.json", Vars: HarnessVars{OutputDir: dir}})
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
		Template: "sleep 60 & echo $! > " + contract.QuoteWord(pidFile) + "; echo started; sleep 60",
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
	got, err := RenderTemplate("run --url {base_url} --model {model} --seed {seed} --p {parallel} --tok '{tokenizer}' {mode_flags} ${HOME} {unknown}",
		HarnessVars{BaseURL: "http://h:1/v1", Model: "a b'c", Seed: 9, Parallel: 0})
	want := `run --url http://h:1/v1 --model 'a b'\''c' --seed 9 --p 1 --tok ''  ${HOME} {unknown}`
	if err != nil || got != want {
		t.Errorf("got  %s, %v\nwant %s", got, err, want)
	}
	// A placeholder the template put inside quotes stays one word: the
	// model's $(...) is never run.
	got, err = RenderTemplate(`run --model '{model}' --out "{output_dir}/r.json"`, HarnessVars{Model: "m'$(touch x)'", OutputDir: "/o d/$(id)"})
	want = `run --model '''m'\''$(touch x)'\''' --out ""'/o d/$(id)'"/r.json"`
	if err != nil || got != want {
		t.Errorf("quoted placeholders: got  %s, %v\nwant %s", got, err, want)
	}
	if _, err := RenderTemplate(`run ${X:-{model}}`, HarnessVars{Model: "a;b"}); err == nil || !strings.Contains(err.Error(), "placeholder {model}") {
		t.Errorf("a value inside ${...}: %v", err)
	}
}

func TestParseToolEvalBenchShapes(t *testing.T) {
	good := toolEvalReport(t, map[string]string{"A-01": "pass"}, false)
	cases := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"failed run", func(m map[string]any) {
			for k := range m {
				delete(m, k)
			}
			m["error"] = "connection_failed"
		}, "failed run"},
		{"guessed flat layout", func(m map[string]any) {
			delete(m, "metadata")
			m["schema_version"] = "1"
			m["tool_eval_bench_version"] = "1.8.0"
			m["final_score"] = 100
		}, `unknown tool-eval-bench report layout (no "metadata" object; top-level keys: config, final_score, report_path, run_id, schema_version, scores, status, tool_eval_bench_version)`},
		{"no version", func(m map[string]any) { delete(m["metadata"].(map[string]any), "tool_version") }, `no "metadata.tool_version"`},
		{"no scores", func(m map[string]any) { delete(m, "scores") }, `no "scores" object`},
		{"scores not an object", func(m map[string]any) { m["scores"] = []int{1} }, `"scores" is not an object`},
		{"no score", func(m map[string]any) { delete(m["scores"].(map[string]any), "final_score") }, `"scores.final_score"`},
		{"no categories", func(m map[string]any) { delete(m["scores"].(map[string]any), "category_scores") }, "scores.category_scores"},
		{"scenario without status", func(m map[string]any) {
			m["scores"].(map[string]any)["scenario_results"] = []any{map[string]any{"scenario_id": "A-01", "points": 2}}
		}, "scores.scenario_results[0].status"},
		{"odd status", func(m map[string]any) {
			m["scores"].(map[string]any)["scenario_results"] = []any{map[string]any{"scenario_id": "A-01", "points": 2, "status": "skipped"}}
		}, `"skipped"`},
		{"no scenarios", func(m map[string]any) { m["scores"].(map[string]any)["scenario_results"] = nil },
			`report lacks field "scores.scenario_results"`},
		{"categories not a list", func(m map[string]any) { m["scores"].(map[string]any)["category_scores"] = "all" },
			`field "scores.category_scores" is not a list of categories`},
		{"scenarios not a list", func(m map[string]any) { m["scores"].(map[string]any)["scenario_results"] = 3 },
			`field "scores.scenario_results" is not a list of scenarios`},
		{"warnings not strings", func(m map[string]any) { m["scores"].(map[string]any)["safety_warnings"] = []int{1} },
			`field "scores.safety_warnings" is not a list of strings`},
		{"throughput not a block", func(m map[string]any) { m["scores"].(map[string]any)["throughput"] = "fast" },
			`field "scores.throughput" is not a throughput block`},
		{"scenario ids not strings", func(m map[string]any) { m["config"].(map[string]any)["scenario_ids"] = 7 },
			`field "config.scenario_ids" is not a list of strings`},
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
}

// TestParseToolEvalBenchFixture reads a report in the exact layout
// tool-eval-bench 1.4.3.1 prints (testdata; values invented, keys and
// nesting as the harness writes them) and checks every field the report
// uses comes through, deployability and responsiveness included.
func TestParseToolEvalBenchFixture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "tool-eval-bench-1.4.3.1.json"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParseToolEvalBench(b)
	if err != nil {
		t.Fatalf("parse fixture: %v", err)
	}
	if q.ToolVersion != "1.4.3.1" || q.RunID != "a1b2c3d4e5f6" || q.Score != 83 || q.TotalPoints != 10 || q.MaxPoints != 12 {
		t.Errorf("headline %+v", q)
	}
	if q.Rating != "★★★★ Good" || q.Stars != 4 || q.SafetyCapped {
		t.Errorf("rating %q stars %d capped %v", q.Rating, q.Stars, q.SafetyCapped)
	}
	if q.Deployability == nil || *q.Deployability != 78 || q.Responsiveness == nil || *q.Responsiveness != 64 {
		t.Errorf("deployability %v responsiveness %v, want 78 and 64", q.Deployability, q.Responsiveness)
	}
	if q.Seed == nil || *q.Seed != 42 || q.ScenarioSelector != "all (6)" || strings.Join(q.ScenarioIDs, ",") != "TC-01,TC-02,TC-31,TC-32,TC-70,TC-71" {
		t.Errorf("seed %v selector %q ids %v", q.Seed, q.ScenarioSelector, q.ScenarioIDs)
	}
	if q.Pass != 4 || q.Partial != 2 || q.Fail != 0 || len(q.Categories) != 3 || len(q.Scenarios) != 6 {
		t.Errorf("pass %d partial %d fail %d, %d categories, %d scenarios", q.Pass, q.Partial, q.Fail, len(q.Categories), len(q.Scenarios))
	}
	if len(q.SafetyWarnings) != 0 {
		t.Errorf("safety warnings %v", q.SafetyWarnings)
	}
}

// TestToolEvalBenchTemplateRunsAsWritten runs the shipped template with a
// stand-in tool-eval-bench on PATH that checks it got exactly the flags
// 1.4.3.1 has (no --json-file), prints a warm-up line unless --no-warmup
// (as the real one does) and prints the fixture on stdout with --json:
// the report is ingested, and seed and mode reach the command.
func TestToolEvalBenchTemplateRunsAsWritten(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fixture, err := filepath.Abs(filepath.Join("testdata", "tool-eval-bench-1.4.3.1.json"))
	if err != nil {
		t.Fatal(err)
	}
	args := filepath.Join(dir, "args")
	stub := "#!/bin/sh\n" +
		"printf '%s\\n' \"$@\" > " + contract.QuoteWord(args) + "\n" +
		"json=0; warm=1\n" +
		"for a in \"$@\"; do case \"$a\" in\n" +
		"  --json) json=1;; --no-warmup) warm=0;;\n" +
		"  --json-file) echo 'tool-eval-bench: error: unrecognized arguments: --json-file' >&2; exit 2;;\n" +
		"esac; done\n" +
		"[ $warm = 1 ] && echo '  ✓ Warm-up complete (12 ms)'\n" +
		"[ $json = 1 ] && cat " + contract.QuoteWord(fixture) + "\n" +
		"exit 0\n"
	if err := os.WriteFile(filepath.Join(bin, "tool-eval-bench"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := RunHarness(context.Background(), HarnessInput{
		Template: "tool-eval-bench",
		Vars:     HarnessVars{BaseURL: "http://127.0.0.1:8000", Model: "org/m", OutputDir: filepath.Join(dir, "out"), Seed: 42, Mode: "hardmode", Parallel: 2},
		Env:      []string{"PATH=" + bin + ":" + os.Getenv("PATH")},
	})
	if err != nil {
		t.Fatalf("RunHarness with the shipped template: %v", err)
	}
	if res.Quality.ToolVersion != "1.4.3.1" || res.Quality.Deployability == nil || res.Seed != 42 || res.Mode != "hardmode" {
		t.Errorf("result %+v", res)
	}
	got, _ := os.ReadFile(args)
	for _, want := range []string{"--seed\n42\n", "--hardmode\n", "--json\n", "--no-warmup\n", "--parallel\n2\n", "--model\norg/m\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("harness argv lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(res.Command, "json-file") {
		t.Errorf("template uses --json-file, which tool-eval-bench 1.4.3.1 lacks: %s", res.Command)
	}
}

func TestModeFlags(t *testing.T) {
	for mode, want := range map[string]string{"standard": "", "": "", "hardmode": "--hardmode", "short": "--short", "x; rm -rf /": ""} {
		if got := ModeFlags(mode); got != want {
			t.Errorf("ModeFlags(%q) = %q, want %q", mode, got, want)
		}
	}
}
