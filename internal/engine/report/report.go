package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/bench"
	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/secretenv"
)

// TimeFormat is the UTC timestamp that starts every report ID, so IDs sort
// by time and say when the run was.
const TimeFormat = "20060102T150405Z"

// Report is one bench run as stored in ID.json. Field names are stable:
// baselines compare against old files.
type Report struct {
	// ID is UTC-TIMESTAMP_LABEL, the file name without extension.
	ID        string    `json:"id"`
	Lane      string    `json:"lane"`
	Label     string    `json:"label"`
	CreatedAt time.Time `json:"created_at"`
	// Version is the sparklane version that ran the bench.
	Version string `json:"sparklane_version"`
	// Perf is the built-in sweep (nil when it did not run).
	Perf *bench.PerfResult `json:"perf,omitempty"`
	// Harness is the external harness run and its quality (nil when none).
	Harness *bench.HarnessResult `json:"harness,omitempty"`
	// Verdict is the comparison against the baseline (nil without one).
	Verdict *Verdict `json:"verdict,omitempty"`
	// Evidence says what ran, where its files are and how to find the run.
	Evidence Evidence `json:"evidence"`
}

// Evidence ties a report to exactly what was served.
type Evidence struct {
	// Dir is the evidence directory, relative to the report's directory.
	Dir string `json:"dir"`
	// RecipeSource is the recipe file that was served; RecipeCopy its copy
	// in Dir (relative to the report's directory).
	RecipeSource string `json:"recipe_source,omitempty"`
	RecipeCopy   string `json:"recipe_copy,omitempty"`
	// PlanFile is the rendered per-node commands and env (secrets masked).
	PlanFile   string `json:"plan_file,omitempty"`
	RecipeHash string `json:"recipe_hash,omitempty"`
	// Staging summarizes each node's staging ledgers.
	Staging []StagingSummary `json:"staging,omitempty"`
	// Image and ImageDigest are what the containers ran.
	Image       string `json:"image,omitempty"`
	ImageDigest string `json:"image_digest,omitempty"`
	// EngineArgs are the head node's engine arguments (secrets masked).
	EngineArgs []string `json:"engine_args,omitempty"`
	// Containers are the lane's running containers as Docker reported
	// them when the bench ran (image ID and digest, process args; secrets
	// masked); Image, ImageDigest and EngineArgs come from the head's.
	// InspectError says why they are missing, when they are: the recipe's
	// image and args are then what the report shows.
	Containers   []ContainerEvidence `json:"containers,omitempty"`
	InspectError string              `json:"inspect_error,omitempty"`
	// Temporal points at the workflow run that produced the report.
	Temporal TemporalRef `json:"temporal"`
	// PlotFile is the history plot embedded in the Markdown, if drawn.
	PlotFile string `json:"plot_file,omitempty"`
	// Switch is the cutover's switch, when a cutover benched the lane.
	Switch *Switch `json:"switch,omitempty"`
}

// Switch is what the clients saw of a cutover: the previous lane's stop
// to the new lane's probe passed (Seconds), beside the image, stage and
// verify time (StageSeconds) and the order they ran in ("ahead": while
// the previous lane served).
type Switch struct {
	Seconds      float64 `json:"seconds"`
	StageSeconds float64 `json:"stage_seconds"`
	Order        string  `json:"order,omitempty"`
}

// StagingSummary is one staging block's ledger on one node.
type StagingSummary struct {
	Node  string `json:"node"`
	Block string `json:"block"`
	Kind  string `json:"kind,omitempty"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
	// VerifiedAt is the newest verification in the ledger, OldestVerified
	// the oldest: a wide gap means some files were not re-checked lately.
	VerifiedAt     time.Time `json:"verified_at"`
	OldestVerified time.Time `json:"oldest_verified,omitempty"`
}

// TemporalRef identifies the Temporal run, so the UI and the report point
// at each other.
type TemporalRef struct {
	Namespace  string `json:"namespace,omitempty"`
	WorkflowID string `json:"workflow_id,omitempty"`
	RunID      string `json:"run_id,omitempty"`
	UIURL      string `json:"ui_url,omitempty"`
}

// ContainerEvidence is one running rank container as inspected.
type ContainerEvidence struct {
	Node        string   `json:"node"`
	Rank        int      `json:"rank"`
	Name        string   `json:"name"`
	Image       string   `json:"image"`
	ImageID     string   `json:"image_id"`
	ImageDigest string   `json:"image_digest,omitempty"`
	Args        []string `json:"args"`
}

// Bundle is everything Write needs for one report.
type Bundle struct {
	Lane  string
	Label string
	// CreatedAt defaults to now (UTC).
	CreatedAt time.Time
	Version   string
	Perf      *bench.PerfResult
	Harness   *bench.HarnessResult
	// Verdict is stored as given; when nil and Baseline is set, Write
	// computes it with Compare options.
	Verdict  *Verdict
	Baseline *Report
	Compare  CompareOptions
	// RecipeFile is copied into the evidence directory.
	RecipeFile string
	// Plan is the rendered lane; env values whose keys look secret are
	// masked, and those values are scrubbed from everything written.
	Plan         *contract.LanePlan
	Staging      []StagingSummary
	Image        string
	ImageDigest  string
	EngineArgs   []string
	Containers   []ContainerEvidence
	InspectError string
	Temporal     TemporalRef
	Switch       *Switch
	// History are earlier reports of the lane for the plot (nil: Write
	// lists the directory itself).
	History []Report
}

// Paths are the two files a person or a script opens.
type Paths struct {
	MD   string `json:"md"`
	JSON string `json:"json"`
}

// Report is the bundle as it will be stored (ID and evidence paths are
// filled in by Write); use it to Compare before writing.
func (b Bundle) Report() Report {
	r := Report{Lane: b.Lane, Label: labelOf(b.Label), CreatedAt: b.CreatedAt.UTC(), Version: b.Version, Perf: b.Perf, Harness: b.Harness, Verdict: b.Verdict}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now().UTC()
	}
	r.ID = r.CreatedAt.Format(TimeFormat) + "_" + r.Label
	r.Evidence = Evidence{Image: b.Image, ImageDigest: b.ImageDigest, EngineArgs: b.EngineArgs, Temporal: b.Temporal, Staging: b.Staging, RecipeSource: b.RecipeFile,
		Containers: append([]ContainerEvidence(nil), b.Containers...), InspectError: b.InspectError, Switch: b.Switch}
	if b.Plan != nil {
		r.Evidence.RecipeHash = b.Plan.RecipeHash
	}
	return r
}

var slugRE = regexp.MustCompile(`[^a-z0-9._-]+`)

func labelOf(label string) string {
	s := strings.Trim(slugRE.ReplaceAllString(strings.ToLower(label), "-"), "-.")
	if len(s) > 60 {
		s = s[:60]
	}
	if s == "" {
		s = "run"
	}
	return s
}

// UIURL builds the Temporal web UI link of a workflow run.
func UIURL(uiBase, namespace, workflowID, runID string) string {
	if uiBase == "" || workflowID == "" {
		return ""
	}
	if namespace == "" {
		namespace = "default"
	}
	u := strings.TrimRight(uiBase, "/") + "/namespaces/" + url.PathEscape(namespace) + "/workflows/" + url.PathEscape(workflowID)
	if runID != "" {
		u += "/" + url.PathEscape(runID) + "/history"
	}
	return u
}

// SummarizeLedger reduces a staging ledger to what a report shows.
func SummarizeLedger(node, block string, l *ledger.Ledger) StagingSummary {
	s := StagingSummary{Node: node, Block: block}
	if l == nil {
		return s
	}
	s.Kind = l.Kind
	for _, e := range l.Entries {
		s.Files++
		s.Bytes += e.Size
		if e.VerifiedAt.After(s.VerifiedAt) {
			s.VerifiedAt = e.VerifiedAt
		}
		if !e.VerifiedAt.IsZero() && (s.OldestVerified.IsZero() || e.VerifiedAt.Before(s.OldestVerified)) {
			s.OldestVerified = e.VerifiedAt
		}
	}
	return s
}

// Mask is what a secret value is replaced with (secretenv.Masked).
const Mask = secretenv.Masked

// MaskPlan returns a copy of plan with secret-looking env values masked
// and the secret values collected (to scrub them from other text too).
// Argv values following --api-key/--token style flags are masked as well.
// It is the one masker of plans: reports write its output and the CLI
// prints it (recipe render, dry runs), both by secretenv's rule.
func MaskPlan(plan contract.LanePlan) (contract.LanePlan, []string) {
	var secrets []string
	out := plan
	out.Nodes = make([]contract.NodePlan, len(plan.Nodes))
	for i, n := range plan.Nodes {
		env := make(map[string]string, len(n.Env))
		for k, v := range n.Env {
			if m := secretenv.MaskValue(k, v); m != v {
				secrets = append(secrets, v)
				v = m
			}
			env[k] = v
		}
		n.Env = env
		n.Argv, secrets = maskArgs(n.Argv, secrets)
		n.Mounts = append([]contract.Mount(nil), n.Mounts...)
		out.Nodes[i] = n
	}
	for i := range out.Nodes {
		out.Nodes[i].Command = scrub(out.Nodes[i].Command, secrets)
	}
	return out, secrets
}

func maskArgs(argv []string, secrets []string) ([]string, []string) {
	out := append([]string(nil), argv...)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, hasEq := strings.Cut(a, "=")
		if !secretenv.LooksSecret(name) {
			continue
		}
		switch {
		case hasEq && val != "":
			secrets = append(secrets, val)
			out[i] = name + "=" + Mask
		case !hasEq && i+1 < len(out) && !strings.HasPrefix(out[i+1], "-"):
			secrets = append(secrets, out[i+1])
			out[i+1] = Mask
			i++
		}
	}
	return out, secrets
}

// scrub replaces every secret value (4+ characters) in s with Mask.
func scrub(s string, secrets []string) string { return secretenv.Mask(s, secrets) }

// Write stores the bundle under dir as ID.json and ID.md plus the
// evidence directory ID/, creating dir if needed. Files are written to
// temp names and renamed; on failure nothing partial is left.
func Write(dir string, b Bundle) (Paths, error) {
	if b.Lane == "" {
		return Paths{}, errors.New("report: bundle has no lane")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Paths{}, fmt.Errorf("report dir %s: %w", dir, err)
	}
	r := b.Report()
	base := r.ID
	for n := 2; ; n++ {
		if !exists(filepath.Join(dir, r.ID+".json")) && !exists(filepath.Join(dir, r.ID)) {
			break
		}
		r.ID = fmt.Sprintf("%s-%d", base, n)
	}
	if r.Verdict == nil && b.Baseline != nil {
		v := CompareWith(r, *b.Baseline, b.Compare)
		r.Verdict = &v
	}

	var secrets []string
	var plan *contract.LanePlan
	if b.Plan != nil {
		p, s := MaskPlan(*b.Plan)
		plan, secrets = &p, s
	}
	r.Evidence.EngineArgs, secrets = maskArgs(r.Evidence.EngineArgs, secrets)
	for i, a := range r.Evidence.EngineArgs {
		r.Evidence.EngineArgs[i] = scrub(a, secrets)
	}
	for i := range r.Evidence.Containers {
		c := &r.Evidence.Containers[i]
		c.Args, secrets = maskArgs(c.Args, secrets)
		for j, a := range c.Args {
			c.Args[j] = scrub(a, secrets)
		}
	}

	// Evidence first, in a temp dir renamed into place.
	tmp, err := os.MkdirTemp(dir, "."+r.ID+".tmp-")
	if err != nil {
		return Paths{}, fmt.Errorf("report evidence dir in %s: %w", dir, err)
	}
	_ = os.Chmod(tmp, 0o755)
	evDir := filepath.Join(dir, r.ID)
	ok := false
	defer func() {
		os.RemoveAll(tmp)
		if !ok {
			os.RemoveAll(evDir)
		}
	}()
	r.Evidence.Dir = r.ID
	if b.RecipeFile != "" {
		data, err := os.ReadFile(b.RecipeFile)
		if err != nil {
			return Paths{}, fmt.Errorf("report: copy recipe %s: %w", b.RecipeFile, err)
		}
		name := "recipe" + filepath.Ext(b.RecipeFile)
		if err := atomicfile.Write(filepath.Join(tmp, name), []byte(scrub(string(data), secrets)), 0o644); err != nil {
			return Paths{}, err
		}
		r.Evidence.RecipeCopy = filepath.ToSlash(filepath.Join(r.ID, name))
	}
	if plan != nil {
		if err := writeJSON(filepath.Join(tmp, "plan.json"), plan, secrets); err != nil {
			return Paths{}, err
		}
		r.Evidence.PlanFile = r.ID + "/plan.json"
	}
	if len(r.Evidence.Staging) > 0 {
		if err := writeJSON(filepath.Join(tmp, "staging.json"), r.Evidence.Staging, secrets); err != nil {
			return Paths{}, err
		}
	}
	engine := map[string]any{
		"image": r.Evidence.Image, "image_digest": r.Evidence.ImageDigest, "engine_args": r.Evidence.EngineArgs,
		"sparklane_version": r.Version, "temporal": r.Evidence.Temporal,
	}
	if err := writeJSON(filepath.Join(tmp, "engine.json"), engine, secrets); err != nil {
		return Paths{}, err
	}

	history := b.History
	if history == nil {
		history = lanHistory(dir, r.Lane)
	}
	history = append(append([]Report(nil), history...), r)
	if svg, err := PlotSVG(history); err == nil {
		if err := atomicfile.Write(filepath.Join(tmp, "history.svg"), svg, 0o644); err != nil {
			return Paths{}, err
		}
		r.Evidence.PlotFile = r.ID + "/history.svg"
	}
	if err := os.Rename(tmp, evDir); err != nil {
		return Paths{}, fmt.Errorf("report: place evidence dir %s: %w", evDir, err)
	}

	paths := Paths{JSON: filepath.Join(dir, r.ID+".json"), MD: filepath.Join(dir, r.ID+".md")}
	if err := writeJSON(paths.JSON, r, secrets); err != nil {
		return Paths{}, err
	}
	if err := atomicfile.Write(paths.MD, []byte(scrub(Markdown(r), secrets)), 0o644); err != nil {
		os.Remove(paths.JSON)
		return Paths{}, err
	}
	ok = true
	return paths, nil
}

func lanHistory(dir, lane string) []Report {
	metas, _ := List(dir)
	var out []Report
	for _, m := range metas {
		if m.Error != "" || m.Lane != lane {
			continue
		}
		if r, err := Load(dir, m.ID); err == nil {
			out = append(out, r)
		}
	}
	return out
}

func writeJSON(path string, v any, secrets []string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return atomicfile.Write(path, []byte(scrub(string(b), secrets)+"\n"), 0o644)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// ReportMeta is one line of `starter report --list`.
type ReportMeta struct {
	ID        string    `json:"id"`
	Lane      string    `json:"lane"`
	Label     string    `json:"label"`
	CreatedAt time.Time `json:"created_at"`
	// Score is the harness score, nil without a harness.
	Score *float64 `json:"score,omitempty"`
	// Verdict is the overall verdict against its baseline, if any.
	Verdict string `json:"verdict,omitempty"`
	// TG and PP are the headline rates (first depth at concurrency 1, first
	// prompt length), 0 when absent.
	TG       float64 `json:"tg_tok_per_sec,omitempty"`
	PP       float64 `json:"pp_tok_per_sec,omitempty"`
	Parallel int     `json:"parallel,omitempty"`
	JSON     string  `json:"json"`
	MD       string  `json:"md"`
	// Error is set for a file that is not a readable report.
	Error string `json:"error,omitempty"`
}

var idRE = regexp.MustCompile(`^\d{8}T\d{6}Z_[a-z0-9._-]+$`)

// List returns the reports in dir, oldest first. Unreadable report files
// are listed with Error set rather than failing the whole list.
func List(dir string) ([]ReportMeta, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list reports in %s: %w", dir, err)
	}
	var out []ReportMeta
	for _, e := range ents {
		name := e.Name()
		id, isJSON := strings.CutSuffix(name, ".json")
		if !isJSON || e.IsDir() || !idRE.MatchString(id) {
			continue
		}
		m := ReportMeta{ID: id, JSON: filepath.Join(dir, name), MD: filepath.Join(dir, id+".md")}
		r, err := readReport(m.JSON)
		if err != nil {
			m.Error = err.Error()
			out = append(out, m)
			continue
		}
		m.Lane, m.Label, m.CreatedAt = r.Lane, r.Label, r.CreatedAt
		if r.Harness != nil {
			s := r.Harness.Quality.Score
			m.Score = &s
			m.Parallel = r.Harness.Parallel
		}
		if r.Verdict != nil {
			m.Verdict = r.Verdict.Overall
		}
		m.TG, m.PP = headline(r)
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func headline(r Report) (tg, pp float64) {
	if r.Perf == nil {
		return 0, 0
	}
	for _, p := range r.Perf.TG {
		if p.Concurrency == 1 && p.OK > 0 {
			tg = p.PerRequestTokPerSec
			break
		}
	}
	for _, p := range r.Perf.PP {
		if p.OK > 0 {
			pp = p.TokPerSec
			break
		}
	}
	return tg, pp
}

func readReport(path string) (Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Report{}, fmt.Errorf("read report %s: %w", path, err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("report %s is not valid JSON: %w", path, err)
	}
	if r.ID == "" || r.CreatedAt.IsZero() {
		return Report{}, fmt.Errorf("report %s lacks id or created_at: not a sparklane report", path)
	}
	return r, nil
}

// Load reads report id from dir. id may be a full ID, a file name
// (ID.json / ID.md), "latest", or a prefix matching exactly one report.
func Load(dir, id string) (Report, error) {
	if id == "latest" {
		return Latest(dir)
	}
	id = strings.TrimSuffix(strings.TrimSuffix(filepath.Base(id), ".json"), ".md")
	p := filepath.Join(dir, id+".json")
	if exists(p) {
		return readReport(p)
	}
	metas, err := List(dir)
	if err != nil {
		return Report{}, err
	}
	var hits []string
	for _, m := range metas {
		if strings.HasPrefix(m.ID, id) {
			hits = append(hits, m.ID)
		}
	}
	switch len(hits) {
	case 0:
		return Report{}, fmt.Errorf("no report %q in %s (starter report --list shows the IDs)", id, dir)
	case 1:
		return readReport(filepath.Join(dir, hits[0]+".json"))
	}
	return Report{}, fmt.Errorf("report %q in %s is ambiguous: %s", id, dir, strings.Join(hits, ", "))
}

// Latest returns the newest readable report in dir.
func Latest(dir string) (Report, error) {
	metas, err := List(dir)
	if err != nil {
		return Report{}, err
	}
	for i := len(metas) - 1; i >= 0; i-- {
		if metas[i].Error == "" {
			return readReport(metas[i].JSON)
		}
	}
	return Report{}, fmt.Errorf("no reports in %s yet (run starter bench --lane LANE first)", dir)
}

// WritePlot draws the history of the reports in dir (the lane's reports
// directory) to dir/history.svg and returns its path.
func WritePlot(dir string) (string, error) {
	metas, err := List(dir)
	if err != nil {
		return "", err
	}
	var hist []Report
	for _, m := range metas {
		if m.Error != "" {
			continue
		}
		if r, err := readReport(m.JSON); err == nil {
			hist = append(hist, r)
		}
	}
	svg, err := PlotSVG(hist)
	if err != nil {
		return "", fmt.Errorf("plot reports in %s: %w", dir, err)
	}
	p := filepath.Join(dir, "history.svg")
	if err := atomicfile.Write(p, svg, 0o644); err != nil {
		return "", err
	}
	return p, nil
}
