package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/bench"
	"github.com/sparklane/sparklane/internal/engine/probe"
	"github.com/sparklane/sparklane/internal/engine/report"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/lane"
)

// Bench runs the built-in perf sweep (and the recipe's external harness, if
// it names one) against the serving lane, then writes the report bundle and
// its verdict against the baseline. Progress lines are heartbeated.
//
// A retried attempt never writes a second bundle: the attempt's run key
// (workflow ID, run ID and activity ID) names a record of the report it
// wrote, checked before anything runs. Attempts are single-flight: a lock
// under the lane's reports dir, its lease renewed by the heartbeat timer,
// keeps a new attempt waiting while an older one still runs; the older one
// stops at its next heartbeat once the server has given up on it (the SDK
// cancels its context).
func (a *ControlActivities) Bench(ctx context.Context, in contract.BenchInput) (contract.BenchResult, error) {
	dir, err := lane.ReportsDir(a.Config, in.Plan.Lane)
	if err != nil {
		return contract.BenchResult{}, classify(err)
	}
	key := benchRunKey(ctx, in)
	runs := filepath.Join(dir, ".bench-runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		return contract.BenchResult{}, classify(fmt.Errorf("bench run records in %s: %w", runs, err))
	}
	hb := newBenchBeat(ctx, filepath.Join(runs, key+".lock"))
	defer hb.stop()
	if err := hb.acquire(ctx); err != nil {
		return contract.BenchResult{}, err
	}
	defer hb.release()
	if res, ok := doneBench(filepath.Join(runs, key+".json")); ok {
		return res, nil
	}
	// An attempt lost between writing its bundle and recording it: the
	// latest bundle names this run.
	res, ok := bundleOfRun(dir, in)
	if !ok {
		if res, err = a.bench(ctx, in, dir, hb.progress); err != nil {
			return res, err
		}
		if err := a.Seams.benchWritten(ctx); err != nil {
			return contract.BenchResult{}, err
		}
	}
	if err := writeJSONAtomic(filepath.Join(runs, key+".json"), res); err != nil {
		return res, classify(err)
	}
	return res, nil
}

// bench is one attempt's sweep and bundle.
func (a *ControlActivities) bench(ctx context.Context, in contract.BenchInput, dir string, progress func(string)) (contract.BenchResult, error) {
	// The engine's API key ([probe] api_key_env), read here and sent as a
	// bearer token; it is in no input, result or report.
	ctx, err := apiKeyContext(ctx, in.Recipe.Probe.APIKeyEnv)
	if err != nil {
		return contract.BenchResult{}, classify(err)
	}
	apiKey := ""
	if in.Recipe.Probe.APIKeyEnv != "" {
		apiKey = os.Getenv(in.Recipe.Probe.APIKeyEnv)
	}
	model := in.Model
	if model == "" {
		m, err := probe.ModelName(ctx, in.BaseURL)
		if err != nil {
			return contract.BenchResult{}, classify(fmt.Errorf("lane %s: ask %s for its model: %w", in.Plan.Lane, in.BaseURL, err))
		}
		model = m
	}
	b := in.Recipe.Bench
	seed, mode := benchSeedMode(in)
	perf, err := bench.Perf(ctx, bench.PerfInput{
		BaseURL: in.BaseURL, Model: model, PromptLengths: b.PromptLengths, Depths: b.Depths,
		Concurrency: b.Concurrency, GenTokens: b.GenTokens, Runs: b.Runs, Seed: seed, OnProgress: progress,
		APIKey: apiKey,
	})
	if err != nil {
		return contract.BenchResult{}, classify(fmt.Errorf("lane %s perf bench: %w", in.Plan.Lane, err))
	}
	bundle := report.Bundle{
		Lane: in.Plan.Lane, Label: in.Label, Version: a.Version, Perf: &perf,
		RecipeFile: in.Recipe.File, Plan: &in.Plan, Image: firstImage(in), EngineArgs: headArgs(in),
		Temporal: report.TemporalRef{Namespace: a.Config.Temporal.Namespace, WorkflowID: in.WorkflowID, RunID: in.RunID,
			UIURL: report.UIURL(a.UIURL, a.Config.Temporal.Namespace, in.WorkflowID, in.RunID)},
		Compare: report.CompareOptions{QualityBand: b.QualityBand},
	}
	a.inspectContainers(ctx, in, &bundle)
	if in.SwitchSeconds > 0 || in.StageSeconds > 0 {
		bundle.Switch = &report.Switch{Seconds: in.SwitchSeconds, StageSeconds: in.StageSeconds, Order: in.StageOrder}
	}
	for _, s := range in.Staging {
		bundle.Staging = append(bundle.Staging, report.StagingSummary{Node: s.Node, Block: s.Block, Kind: s.Kind,
			Files: s.Result.TotalFiles, Bytes: s.Result.TotalBytes, VerifiedAt: time.Now().UTC()})
	}
	if b.Harness != "" {
		parallel := in.Parallel
		if parallel <= 0 {
			parallel = 1
		}
		h, err := bench.RunHarness(ctx, bench.HarnessInput{
			Template: b.Harness, Format: b.HarnessFormat, OnLine: progress,
			Vars: bench.HarnessVars{BaseURL: in.BaseURL, Model: model, Seed: seed, Mode: mode, Parallel: parallel, Tokenizer: in.Tokenizer,
				OutputDir: filepath.Join(dir, ".harness", time.Now().UTC().Format(report.TimeFormat))},
		})
		if err != nil {
			return contract.BenchResult{}, classify(fmt.Errorf("lane %s harness: %w", in.Plan.Lane, err))
		}
		bundle.Harness = &h
	}
	switch in.Baseline {
	case "":
	case "latest":
		if base, err := report.Latest(dir); err == nil {
			bundle.Baseline = &base
		}
	default:
		base, err := report.Load(dir, in.Baseline)
		if err != nil {
			return contract.BenchResult{}, classify(fault.Permanent(fault.InvalidSpec, fmt.Errorf("baseline %s: %w", in.Baseline, err)))
		}
		bundle.Baseline = &base
	}
	paths, err := report.Write(dir, bundle)
	if err != nil {
		return contract.BenchResult{}, classify(err)
	}
	rep, err := report.Load(dir, strings.TrimSuffix(filepath.Base(paths.JSON), ".json"))
	if err != nil {
		return contract.BenchResult{}, classify(err)
	}
	res := contract.BenchResult{ReportID: rep.ID, MD: paths.MD, JSON: paths.JSON}
	if rep.Verdict != nil {
		res.Verdict = rep.Verdict.Overall
		res.Warnings = rep.Verdict.Warnings
	}
	res.Summary = summarize(perf, bundle.Harness, res.Verdict)
	if len(perf.TG) > 0 {
		a.Metrics.Benched(in.Plan.Lane, perf.TG[0].AggregateTokPerSec)
	}
	return res, nil
}

// benchSeedMode is the seed and scenario pool of a bench: the run's own
// (starter bench --seed/--mode), else the recipe's [bench], else 42 and
// standard. Never the clock: two benches of a lane must send the same
// requests to be compared.
func benchSeedMode(in contract.BenchInput) (int64, string) {
	seed := contract.DefaultBenchSeed
	switch {
	case in.Seed != nil:
		seed = *in.Seed
	case in.Recipe.Bench.Seed != nil:
		seed = *in.Recipe.Bench.Seed
	}
	mode := in.Mode
	if mode == "" {
		mode = in.Recipe.Bench.Mode
	}
	if mode == "" {
		mode = "standard"
	}
	return seed, mode
}

// inspectContainers records what the lane's containers really run (image
// ID and digest, process args) as Docker reports them on each node; the
// head's become the report's Image, ImageDigest and EngineArgs. A node
// that cannot be inspected leaves the recipe's values, and the report
// says why.
func (a *ControlActivities) inspectContainers(ctx context.Context, in contract.BenchInput, b *report.Bundle) {
	var errs []string
	for _, n := range in.Plan.Nodes {
		d, done, err := a.nodeDocker(ctx, n.Node)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		facts, err := serve.LaneFacts(ctx, d, in.Plan.Lane, n.Node)
		done()
		if err != nil {
			errs = append(errs, err.Error())
		}
		if len(facts) == 0 && err == nil {
			errs = append(errs, fmt.Sprintf("node %s: no running container of lane %s", n.Node, in.Plan.Lane))
		}
		for _, f := range facts {
			b.Containers = append(b.Containers, report.ContainerEvidence{Node: f.Node, Rank: f.Rank, Name: f.Name, Image: f.Image,
				ImageID: f.ImageID, ImageDigest: f.ImageDigest, Args: f.Args})
			if n.Head && f.Rank == n.Rank {
				b.Image, b.EngineArgs = f.Image, f.Args
				b.ImageDigest = f.ImageDigest
				if b.ImageDigest == "" {
					b.ImageDigest = f.ImageID
				}
			}
		}
	}
	b.InspectError = strings.Join(errs, "; ")
}

func firstImage(in contract.BenchInput) string {
	if len(in.Plan.Nodes) > 0 {
		return in.Plan.Nodes[0].Image.String()
	}
	return in.Recipe.Image
}

func headArgs(in contract.BenchInput) []string {
	if len(in.Plan.Nodes) > 0 {
		return in.Plan.Nodes[0].Argv
	}
	return nil
}

func summarize(p bench.PerfResult, h *bench.HarnessResult, verdict string) string {
	var parts []string
	if len(p.TG) > 0 {
		parts = append(parts, fmt.Sprintf("tg %.1f tok/s", p.TG[0].AggregateTokPerSec))
	}
	if len(p.PP) > 0 {
		parts = append(parts, fmt.Sprintf("pp %.0f tok/s", p.PP[0].TokPerSec))
	}
	if h != nil {
		parts = append(parts, fmt.Sprintf("score %.1f", h.Quality.Score))
	}
	if verdict != "" {
		parts = append(parts, "verdict "+verdict)
	}
	return strings.Join(parts, ", ")
}
