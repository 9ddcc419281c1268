package report

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/ledger"
)

const (
	hfToken = "hf_SuperSecretValue123"
	apiKey  = "sk-abcdef0123456789"
)

func testBundle(t *testing.T, dir string, at time.Time) Bundle {
	t.Helper()
	recipe := filepath.Join(dir, "mia.toml")
	if err := os.WriteFile(recipe, []byte("name = \"mia\"\n[env]\nHF_TOKEN = \""+hfToken+"\"\nNCCL_DEBUG = \"WARN\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A real ledger file, saved and loaded the way staging does.
	lp := filepath.Join(dir, "ledger.json")
	l := ledger.New("hub-mirror")
	v1 := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	l.Entries["models--org--m/blobs/a"] = ledger.Entry{Size: 3 << 30, Sampled: "x", VerifiedAt: v1}
	l.Entries["models--org--m/blobs/b"] = ledger.Entry{Size: 1 << 20, Sampled: "y", VerifiedAt: v1.Add(time.Hour)}
	if err := l.Save(lp); err != nil {
		t.Fatal(err)
	}
	loaded, err := ledger.Load(lp, "hub-mirror")
	if err != nil {
		t.Fatal(err)
	}
	plan := contract.LanePlan{Lane: "mia", Cluster: "duo", Runtime: "sglang", Model: "org/m", RecipeHash: "abc123", APIPort: 30000, TP: 2,
		Nodes: []contract.NodePlan{{
			Node: "dgx1", Rank: 0, Head: true, Image: contract.MustImageRef("sglang:0.5"), ContainerName: "sparklane-mia-0",
			Command: "python -m sglang.launch_server --api-key " + apiKey + " --tp 2",
			Argv:    []string{"python", "-m", "sglang.launch_server", "--api-key", apiKey, "--tp", "2"},
			Env:     map[string]string{"HF_TOKEN": hfToken, "NCCL_DEBUG": "WARN", "TP_SIZE": "2"},
		}}}
	return Bundle{
		Lane: "mia", Label: "Nightly run!", CreatedAt: at, Version: "v0.3.0",
		Perf: perfOf(3000, 35, 68, 200, 260), Harness: harnessOf(82, 4),
		RecipeFile: recipe, Plan: &plan,
		Staging: []StagingSummary{SummarizeLedger("dgx1", "weights", loaded)},
		Image:   "sglang:0.5", ImageDigest: "sha256:feedface", EngineArgs: []string{"--api-key=" + apiKey, "--tp", "2"},
		Temporal: TemporalRef{Namespace: "default", WorkflowID: "bench/mia", RunID: "run-1",
			UIURL: UIURL("http://127.0.0.1:8233", "default", "bench/mia", "run-1")},
	}
}

func TestWriteBundleAndReadBack(t *testing.T) {
	src := t.TempDir()
	dir := filepath.Join(t.TempDir(), "recipes", "mia", "reports")
	at := time.Date(2026, 11, 30, 5, 15, 0, 0, time.UTC)
	paths, err := Write(dir, testBundle(t, src, at))
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if paths.JSON != filepath.Join(dir, "20261130T051500Z_nightly-run.json") || paths.MD != filepath.Join(dir, "20261130T051500Z_nightly-run.md") {
		t.Errorf("paths %+v", paths)
	}
	ev := filepath.Join(dir, "20261130T051500Z_nightly-run")
	for _, f := range []string{"recipe.toml", "plan.json", "staging.json", "engine.json", "history.svg"} {
		if _, err := os.Stat(filepath.Join(ev, f)); err != nil {
			t.Errorf("evidence file %s: %v", f, err)
		}
	}

	// No secret anywhere in what was written; masks where they were.
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), hfToken) || strings.Contains(string(b), apiKey) {
			t.Errorf("%s contains a secret", p)
		}
		if strings.Contains(filepath.Base(p), ".tmp-") {
			t.Errorf("temp file left behind: %s", p)
		}
		return nil
	})
	var plan contract.LanePlan
	b, _ := os.ReadFile(filepath.Join(ev, "plan.json"))
	if err := json.Unmarshal(b, &plan); err != nil {
		t.Fatal(err)
	}
	n := plan.Nodes[0]
	if n.Env["HF_TOKEN"] != Mask || n.Env["NCCL_DEBUG"] != "WARN" || n.Argv[4] != Mask || !strings.Contains(n.Command, "--api-key "+Mask) {
		t.Errorf("plan not masked as expected: %+v", n)
	}
	rc, _ := os.ReadFile(filepath.Join(ev, "recipe.toml"))
	if !strings.Contains(string(rc), `NCCL_DEBUG = "WARN"`) || !strings.Contains(string(rc), `HF_TOKEN = "`+Mask+`"`) {
		t.Errorf("recipe copy: %s", rc)
	}

	md, _ := os.ReadFile(paths.MD)
	s := string(md)
	order := []string{"# mia — nightly-run", "**Verdict: no baseline**", "**Score: 82/100 ★★★★ Good**", "parallel 4: faster, may time out under saturation", "## Performance", "### Token generation", "## History", "## Quality", "## Evidence"}
	last := -1
	for _, o := range order {
		i := strings.Index(s, o)
		if i < 0 {
			t.Errorf("md lacks %q", o)
			continue
		}
		if i < last {
			t.Errorf("md has %q out of order", o)
		}
		last = i
	}
	for _, want := range []string{"| 0 | 1 | 35.0 | 35.0 |", "](http://127.0.0.1:8233/namespaces/default/workflows/bench%2Fmia/run-1/history)", "sha256:feedface", "v0.3.0", "| dgx1 | weights | 2 | ", "2026-11-29 02:00 UTC", "![tg and pp over time](20261130T051500Z_nightly-run/history.svg)", "TC-03 **fail**: wrong tool"} {
		if !strings.Contains(s, want) {
			t.Errorf("md lacks %q", want)
		}
	}

	r, err := Load(dir, "20261130T051500Z_nightly-run")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if r.Lane != "mia" || r.Harness.Parallel != 4 || r.Perf.TG[0].PerRequestTokPerSec != 35 || r.Evidence.Temporal.RunID != "run-1" || r.Evidence.ImageDigest != "sha256:feedface" {
		t.Errorf("loaded report %+v", r)
	}
	if r.Evidence.Staging[0].Files != 2 || r.Evidence.Staging[0].Bytes != 3<<30+1<<20 {
		t.Errorf("staging summary %+v", r.Evidence.Staging[0])
	}
}

func TestListLoadLatestAndBaselineVerdict(t *testing.T) {
	src := t.TempDir()
	dir := t.TempDir()
	at := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
	for i, tg := range []float64{35, 36, 34} {
		b := testBundle(t, src, at.Add(time.Duration(i)*24*time.Hour))
		b.Perf = perfOf(3000, tg, 2*tg, 200, 260)
		if _, err := Write(dir, b); err != nil {
			t.Fatal(err)
		}
	}
	// Same second, same label: a second ID, not an overwrite.
	p2, err := Write(dir, testBundle(t, src, at))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p2.JSON) != "20261128T050000Z_nightly-run-2.json" {
		t.Errorf("colliding ID: %s", p2.JSON)
	}
	// A stray broken file is listed with an error, not fatal.
	os.WriteFile(filepath.Join(dir, "20261101T000000Z_broken.json"), []byte("{"), 0o644)

	metas, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(metas) != 5 {
		t.Fatalf("List: %d entries, want 5: %+v", len(metas), metas)
	}
	if metas[0].Error == "" || !strings.Contains(metas[0].Error, "broken") {
		t.Errorf("broken report not flagged: %+v", metas[0])
	}
	if metas[4].TG != 34 || metas[4].PP != 3000 || *metas[4].Score != 82 || metas[4].Parallel != 4 {
		t.Errorf("newest meta %+v", metas[4])
	}
	latest, err := Latest(dir)
	if err != nil || latest.ID != "20261130T050000Z_nightly-run" {
		t.Fatalf("Latest: %v %v", latest.ID, err)
	}
	if r, err := Load(dir, "latest"); err != nil || r.ID != latest.ID {
		t.Errorf("Load latest: %v %v", r.ID, err)
	}
	if r, err := Load(dir, "20261129"); err != nil || r.ID != "20261129T050000Z_nightly-run" {
		t.Errorf("Load by prefix: %v %v", r.ID, err)
	}
	if _, err := Load(dir, "20261128"); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("ambiguous prefix: %v", err)
	}
	if _, err := Load(dir, "1999"); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("missing report error should name the dir: %v", err)
	}

	// A run 20% slower than the latest is a regression, in md and json.
	b := testBundle(t, src, at.Add(72*time.Hour))
	b.Perf = perfOf(3000, 27, 54, 200, 260)
	b.Baseline = &latest
	paths, err := Write(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Load(dir, filepath.Base(paths.JSON))
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict == nil || r.Verdict.Overall != Regression || r.Verdict.BaselineID != latest.ID {
		t.Fatalf("verdict %+v", r.Verdict)
	}
	md, _ := os.ReadFile(paths.MD)
	if !strings.Contains(string(md), "**Verdict: REGRESSION** against `20261130T050000Z_nightly-run`") || !strings.Contains(string(md), "- worse: tg d0 c1 -20.6%") || !regexp.MustCompile(`\| tg d0 c1 \(tok/s\) \| 27\.0 \| 34\.0 \| -20\.6% \| worse \|`).Match(md) {
		t.Errorf("md verdict section:\n%s", md)
	}

	// The lane plot over the directory.
	svg, err := WritePlot(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(svg)
	if !strings.Contains(string(data), "tg, depth 0, 1 request: 27.0 tok/s") {
		t.Errorf("lane plot lacks the newest point")
	}
}

func TestLatestOnEmptyDirSaysWhatToDo(t *testing.T) {
	_, err := Latest(filepath.Join(t.TempDir(), "none"))
	if err == nil || !strings.Contains(err.Error(), "starter bench") {
		t.Errorf("want an error telling to run a bench first, got %v", err)
	}
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	src := t.TempDir()
	dir := t.TempDir()
	b := testBundle(t, src, time.Date(2026, 11, 30, 5, 15, 0, 0, time.UTC))
	b.RecipeFile = filepath.Join(src, "missing.toml")
	if _, err := Write(dir, b); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Fatalf("want an error naming the missing recipe, got %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("failed Write left %d entries, first %s", len(ents), ents[0].Name())
	}
}
