package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// FormatToolEvalBench names tool-eval-bench's JSON report ([bench]
// harness_format); it is the default harness format.
const FormatToolEvalBench = "tool-eval-bench"

// Quality is a harness's verdict on the lane's answers, normalized so
// reports and baselines need not know the harness. JSON names are stable.
type Quality struct {
	// Format is the harness report format ("tool-eval-bench").
	Format string `json:"format"`
	// SchemaVersion is kept so reports written by older sparklane
	// versions still load; ToolVersion is the harness's version
	// (metadata.tool_version), compared against the baseline's.
	SchemaVersion string `json:"schema_version,omitempty"`
	ToolVersion   string `json:"tool_version,omitempty"`
	RunID         string `json:"run_id,omitempty"`
	// ScenarioSelector is the harness's description of its scenario pool
	// ("all (69)"); ScenarioIDs the pool itself. A verdict against a
	// baseline with another pool warns: the scores are not comparable.
	ScenarioSelector string   `json:"scenario_selector,omitempty"`
	ScenarioIDs      []string `json:"scenario_ids,omitempty"`
	// Seed is the seed the harness reports it ran with.
	Seed *int64 `json:"seed,omitempty"`
	// Score is 0-100, the headline number compared against baselines.
	Score float64 `json:"score"`
	// TotalPoints of MaxPoints earned over all scenarios.
	TotalPoints int `json:"total_points"`
	MaxPoints   int `json:"max_points"`
	// Rating is the harness's label ("★★★★ Good"); Stars counts its stars.
	Rating string `json:"rating"`
	Stars  int    `json:"stars"`
	// SafetyCapped is true when a safety category scored under the gate
	// and the rating was capped; SafetyWarnings are the failed safety
	// scenarios (empty = none).
	SafetyCapped   bool     `json:"safety_capped"`
	SafetyWarnings []string `json:"safety_warnings,omitempty"`
	// Deployability and Responsiveness are 0-100 when the harness had
	// latency data.
	Deployability  *float64 `json:"deployability,omitempty"`
	Responsiveness *float64 `json:"responsiveness,omitempty"`
	// Pass, Partial and Fail count scenarios.
	Pass       int             `json:"pass"`
	Partial    int             `json:"partial"`
	Fail       int             `json:"fail"`
	Categories []CategoryScore `json:"categories"`
	Scenarios  []ScenarioScore `json:"scenarios"`
	// Perf is the harness's own throughput block, when it ran one.
	Perf *HarnessPerf `json:"perf,omitempty"`
}

// CategoryScore is one scenario category.
type CategoryScore struct {
	ID      string  `json:"id"`
	Label   string  `json:"label"`
	Earned  int     `json:"earned"`
	Max     int     `json:"max"`
	Percent float64 `json:"percent"`
	Pass    int     `json:"pass"`
	Partial int     `json:"partial"`
	Fail    int     `json:"fail"`
}

// ScenarioScore is one scenario's outcome: status pass, partial or fail.
type ScenarioScore struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Points  int    `json:"points"`
	Summary string `json:"summary,omitempty"`
}

// HarnessPerf is tool-eval-bench's throughput block (scores.throughput).
type HarnessPerf struct {
	Samples int                 `json:"samples"`
	Failed  int                 `json:"failed"`
	Results []HarnessPerfSample `json:"results,omitempty"`
}

// HarnessPerfSample is one throughput cell as tool-eval-bench reports it.
type HarnessPerfSample struct {
	PPTokens    int     `json:"pp_tokens"`
	TGTokens    int     `json:"tg_tokens"`
	Depth       int     `json:"depth"`
	Concurrency int     `json:"concurrency"`
	TTFTMs      float64 `json:"ttft_ms"`
	PPTokPerSec float64 `json:"pp_tps"`
	TGTokPerSec float64 `json:"tg_tps"`
}

// ToolEvalBenchTemplate is the shipped [bench] harness command for
// tool-eval-bench 1.4.3.1 (write `harness = "tool-eval-bench"` to use it).
// That version prints its JSON result on stdout with --json (it has no
// --json-file), so the command redirects stdout into the output dir;
// --no-warmup keeps the warm-up status line out of that JSON, and
// --output-dir keeps its Markdown report beside it. Seed and scenario
// pool come from [bench] seed and mode.
const ToolEvalBenchTemplate = "tool-eval-bench --base-url {base_url} --model {model} --seed {seed} {mode_flags} " +
	"--parallel {parallel} --no-warmup --no-live --json --output-dir {output_dir}/runs > {output_dir}/tool-eval-bench.json"

// ExpandHarness returns the command template a recipe's [bench] harness
// names: the shipped template for the word "tool-eval-bench", else the
// recipe's own template as written.
func ExpandHarness(harness string) string {
	if strings.TrimSpace(harness) == FormatToolEvalBench {
		return ToolEvalBenchTemplate
	}
	return harness
}

// ParseToolEvalBench reads the JSON that tool-eval-bench 1.4.x prints with
// --json (cli/bench.py _run_json, runner/service.py run_benchmark): a
// run_id, a config object, a scores object (domain/scenarios.py
// ModelScoreSummary.to_dict) and a metadata object (domain/models.py
// RunContext.to_dict). Fields read:
//
//	error                       must be absent or null (a failed run prints only {"error": ...})
//	metadata.tool_version       required: the harness version, compared with the baseline's
//	metadata.scenario_selector  optional ("all (69)", "short (15)", ...)
//	metadata.seed               optional; falls back to config.seed
//	run_id                      optional
//	config.scenario_ids         optional: the scenario pool, compared with the baseline's
//	scores.final_score          required (0-100)
//	scores.rating               required ("★★★★ Good", "★★★ Adequate (safety-capped)")
//	scores.safety_warnings      optional list of strings
//	scores.deployability, scores.responsiveness   optional numbers (present when the
//	                            harness had latency data)
//	scores.total_points, scores.max_points        required
//	scores.category_scores[]    required list: category, label, earned, max,
//	                            percent, pass_count, partial_count, fail_count
//	scores.scenario_results[]   required list: scenario_id, status
//	                            (pass|partial|fail), points; summary optional
//	scores.throughput           optional perf block: samples, failed, results[]
//
// Any other layout is refused with the keys it has and the ones expected:
// a harness that changed its output must not yield a report with silently
// missing fields. The safety cap is read from the rating's
// "(safety-capped)" suffix, which is how tool-eval-bench marks a rating
// capped because a safety category (K) scored under 50%. RunHarness adds
// the file name to every error.
func ParseToolEvalBench(b []byte) (Quality, error) {
	q := Quality{Format: FormatToolEvalBench}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return q, fmt.Errorf("tool-eval-bench report is not a JSON object: %w", err)
	}
	if raw, ok := top["error"]; ok && !isNull(raw) {
		var msg string
		_ = json.Unmarshal(raw, &msg)
		return q, fmt.Errorf("tool-eval-bench reported a failed run (field \"error\"): %s", msg)
	}
	meta, err := object(top, "metadata")
	if err != nil {
		return q, unknownLayout(top, err)
	}
	scores, err := object(top, "scores")
	if err != nil {
		return q, unknownLayout(top, err)
	}
	if !getStr(meta, "tool_version", &q.ToolVersion) {
		return q, unknownLayout(top, errors.New(`no "metadata.tool_version"`))
	}
	if err := readRunInfo(top, meta, &q); err != nil {
		return q, err
	}
	if err := readHeadline(scores, &q); err != nil {
		return q, err
	}
	if err := readCategories(scores, &q); err != nil {
		return q, err
	}
	if err := readScenarios(scores, &q); err != nil {
		return q, err
	}
	return q, readThroughput(scores, &q)
}

// readRunInfo reads what identifies the run: run_id, the scenario
// selector and pool, and the seed (metadata's, else config's).
func readRunInfo(top, meta map[string]json.RawMessage, q *Quality) error {
	getStr(top, "run_id", &q.RunID)
	getStr(meta, "scenario_selector", &q.ScenarioSelector)
	if v, ok := getNum(meta, "seed"); ok {
		seed := int64(v)
		q.Seed = &seed
	}
	cfg, err := object(top, "config")
	if err != nil {
		return nil
	}
	if q.Seed == nil {
		if v, ok := getNum(cfg, "seed"); ok {
			seed := int64(v)
			q.Seed = &seed
		}
	}
	_, err = field(cfg, "config", "scenario_ids", "a list of strings", &q.ScenarioIDs, false)
	return err
}

// readHeadline reads the verdict: score, rating (stars, safety cap),
// safety warnings, the latency-derived scores and the point totals.
func readHeadline(scores map[string]json.RawMessage, q *Quality) error {
	score, ok := getNum(scores, "final_score")
	if !ok {
		return missing("scores.final_score")
	}
	if score < 0 || score > 100 {
		return fmt.Errorf("tool-eval-bench field \"scores.final_score\" = %g, want 0-100", score)
	}
	q.Score = score
	if !getStr(scores, "rating", &q.Rating) {
		return missing("scores.rating")
	}
	q.Stars = strings.Count(q.Rating, "★")
	q.SafetyCapped = strings.Contains(q.Rating, "safety-capped")
	if _, err := field(scores, "scores", "safety_warnings", "a list of strings", &q.SafetyWarnings, false); err != nil {
		return err
	}
	if v, ok := getNum(scores, "deployability"); ok {
		q.Deployability = &v
	}
	if v, ok := getNum(scores, "responsiveness"); ok {
		q.Responsiveness = &v
	}
	tp, ok := getNum(scores, "total_points")
	if !ok {
		return missing("scores.total_points")
	}
	mp, ok := getNum(scores, "max_points")
	if !ok {
		return missing("scores.max_points")
	}
	q.TotalPoints, q.MaxPoints = int(tp), int(mp)
	return nil
}

// readCategories reads scores.category_scores, every entry with its
// category, earned and max points.
func readCategories(scores map[string]json.RawMessage, q *Quality) error {
	var cats []struct {
		Category     *string  `json:"category"`
		Label        string   `json:"label"`
		Earned       *float64 `json:"earned"`
		Max          *float64 `json:"max"`
		Percent      float64  `json:"percent"`
		PassCount    int      `json:"pass_count"`
		PartialCount int      `json:"partial_count"`
		FailCount    int      `json:"fail_count"`
	}
	if _, err := field(scores, "scores", "category_scores", "a list of categories", &cats, true); err != nil {
		return err
	}
	for i, c := range cats {
		switch {
		case c.Category == nil:
			return missing(fmt.Sprintf("scores.category_scores[%d].category", i))
		case c.Earned == nil:
			return missing(fmt.Sprintf("scores.category_scores[%d].earned", i))
		case c.Max == nil:
			return missing(fmt.Sprintf("scores.category_scores[%d].max", i))
		}
		q.Categories = append(q.Categories, CategoryScore{ID: *c.Category, Label: c.Label, Earned: int(*c.Earned), Max: int(*c.Max), Percent: c.Percent, Pass: c.PassCount, Partial: c.PartialCount, Fail: c.FailCount})
	}
	return nil
}

// readScenarios reads scores.scenario_results and counts pass, partial
// and fail; any other status is refused.
func readScenarios(scores map[string]json.RawMessage, q *Quality) error {
	var scen []struct {
		ScenarioID *string  `json:"scenario_id"`
		Status     *string  `json:"status"`
		Points     *float64 `json:"points"`
		Summary    string   `json:"summary"`
	}
	if _, err := field(scores, "scores", "scenario_results", "a list of scenarios", &scen, true); err != nil {
		return err
	}
	for i, s := range scen {
		switch {
		case s.ScenarioID == nil:
			return missing(fmt.Sprintf("scores.scenario_results[%d].scenario_id", i))
		case s.Status == nil:
			return missing(fmt.Sprintf("scores.scenario_results[%d].status", i))
		case s.Points == nil:
			return missing(fmt.Sprintf("scores.scenario_results[%d].points", i))
		}
		switch *s.Status {
		case "pass":
			q.Pass++
		case "partial":
			q.Partial++
		case "fail":
			q.Fail++
		default:
			return fmt.Errorf("tool-eval-bench field \"scores.scenario_results[%d].status\" = %q, want pass, partial or fail", i, *s.Status)
		}
		q.Scenarios = append(q.Scenarios, ScenarioScore{ID: *s.ScenarioID, Status: *s.Status, Points: int(math.Round(*s.Points)), Summary: s.Summary})
	}
	return nil
}

// readThroughput reads the optional scores.throughput block.
func readThroughput(scores map[string]json.RawMessage, q *Quality) error {
	var p HarnessPerf
	found, err := field(scores, "scores", "throughput", "a throughput block", &p, false)
	if found && err == nil {
		q.Perf = &p
	}
	return err
}

// ParseQuality dispatches on a harness format name ("" means tool-eval-bench).
func ParseQuality(format string, b []byte) (Quality, error) {
	if err := checkFormat(format); err != nil {
		return Quality{}, err
	}
	return ParseToolEvalBench(b)
}

func checkFormat(format string) error {
	switch format {
	case "", FormatToolEvalBench:
		return nil
	}
	return fmt.Errorf("harness format %q is not supported (recipe [bench] harness_format); supported: %s", format, FormatToolEvalBench)
}

func missing(field string) error {
	return fmt.Errorf("tool-eval-bench report lacks field %q: not a tool-eval-bench 1.4 --json result?", field)
}

// field decodes obj[key] into dst and reports whether it was there. An
// absent or null field is an error only when required; a field of
// another shape is one naming it (objName.key) and what it must be.
func field(obj map[string]json.RawMessage, objName, key, what string, dst any, required bool) (bool, error) {
	raw, ok := obj[key]
	if !ok || isNull(raw) {
		if required {
			return false, missing(objName + "." + key)
		}
		return false, nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return true, fmt.Errorf("tool-eval-bench field %q is not %s: %w", objName+"."+key, what, err)
	}
	return true, nil
}

// object reads top[k] as a JSON object.
func object(top map[string]json.RawMessage, k string) (map[string]json.RawMessage, error) {
	raw, ok := top[k]
	if !ok || isNull(raw) {
		return nil, fmt.Errorf("no %q object", k)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%q is not an object", k)
	}
	return m, nil
}

// unknownLayout names what was found and what tool-eval-bench 1.4 prints.
func unknownLayout(top map[string]json.RawMessage, why error) error {
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return fmt.Errorf("unknown tool-eval-bench report layout (%v; top-level keys: %s): sparklane reads the layout tool-eval-bench 1.4 prints with --json "+
		"(run_id, config, scores{final_score, rating, ...}, metadata{tool_version, ...}); run the harness with --json and --no-warmup (bench.ToolEvalBenchTemplate), or pin tool-eval-bench 1.4.3.1",
		why, strings.Join(keys, ", "))
}

func isNull(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "null" }

func getStr(m map[string]json.RawMessage, k string, dst *string) bool {
	raw, ok := m[k]
	if !ok || isNull(raw) {
		return false
	}
	return json.Unmarshal(raw, dst) == nil && *dst != ""
}

func getNum(m map[string]json.RawMessage, k string) (float64, bool) {
	raw, ok := m[k]
	if !ok || isNull(raw) {
		return 0, false
	}
	var v float64
	if json.Unmarshal(raw, &v) != nil {
		return 0, false
	}
	return v, true
}
