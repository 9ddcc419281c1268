package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/lane"
)

// cutoverFlags are the flags of `starter cutover`.
type cutoverFlags struct {
	laneFlags
	stage, label       string
	noWait, bench      bool
	noRollback, dryRun bool
	stopForeign        bool
	powerOn            bool
	makeRoom           bool
	fetch              bool
	stageAhead         string
}

func (a *App) cutoverCmd() *cobra.Command {
	var f cutoverFlags
	cmd := &cobra.Command{
		Use:   "cutover --lane L",
		Short: "switch the lane's cluster to it: stage → verify → serve → probe → bench, rolling back on failure",
		RunE: a.withLane(&f.laneFlags, func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
			if f.dryRun {
				if f.stage != contract.StageSkip {
					fp, err := a.fetchPlan(cfg, r, lane.FetchOptions{MarkedOnly: !f.fetch})
					if err != nil {
						return err
					}
					a.dryFetch = fp
				}
				return a.dryRun(ctx, cfg, r, plan, "cutover")
			}
			res, err := a.runCutover(ctx, cfg, r, plan, f)
			if res != nil && !a.JSON && !f.noWait {
				printCutover(a, res)
			}
			return err
		}),
	}
	f.bind(cmd, overrideHelp)
	cmd.Flags().StringVar(&f.stage, "stage", "auto", "auto | skip | force")
	cmd.Flags().BoolVar(&f.noWait, "no-wait", false, "start the cutover and return its workflow ID (it runs every step; follow it in the UI)")
	cmd.Flags().BoolVar(&f.bench, "bench", false, "bench the lane once it answers and write a report")
	cmd.Flags().StringVar(&f.label, "label", "", "report label for --bench")
	cmd.Flags().BoolVar(&f.noRollback, "no-rollback", false, "on failure, do not bring the previous lane back")
	cmd.Flags().StringVar(&f.stageAhead, "stage-ahead", contract.StageAheadAuto, "auto: stage and verify the lane while the previous one serves when every node has room beside it, else after stopping it (and say why); always: refuse, before stopping anything, when a node lacks room; never: stop first")
	cmd.Flags().BoolVar(&f.makeRoom, "make-room", false, "when a staging block would fail min_free, remove other lanes' least recently served blocks on that node (never a running lane's) until it fits")
	cmd.Flags().BoolVar(&f.stopForeign, "stop-foreign", false, "stop containers sparklane did not start that hold a GPU or the lane's port on the lane's nodes (else the cutover is refused, naming them)")
	cmd.Flags().BoolVar(&f.powerOn, "power-on", false, "switch on the lane's nodes whose relay is off, before staging")
	cmd.Flags().BoolVar(&f.fetch, "fetch", false, "before staging, download the lane's hub-mirror repos from the Hub into the NAS at their revision (blocks with fetch = true always are)")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "print every node's command, env, mounts and staging plan; touch nothing")
	cmd.Flags().BoolVar(&a.fitForce, "force", false, "run the lane even if the memory fit says it does not fit its nodes")
	return cmd
}

// recipeMemo is the recipe snapshot and hash recorded with each run.
func recipeMemo(r *contract.Recipe, plan *contract.LanePlan) map[string]any {
	// The full snapshot is the workflow's input (first event of its
	// history); the memo carries what the UI list shows.
	return map[string]any{"recipe_hash": plan.RecipeHash, "recipe_file": r.File, "runtime": r.Runtime, "image": r.Image, "model": r.Model}
}

func (a *App) runCutover(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan, f cutoverFlags) (*contract.CutoverResult, error) {
	switch f.stage {
	case contract.StageAuto, contract.StageSkip, contract.StageForce:
	default:
		return nil, fmt.Errorf("--stage=%s: use auto, skip or force", f.stage)
	}
	switch f.stageAhead {
	case contract.StageAheadAuto, contract.StageAheadAlways, contract.StageAheadNever:
	default:
		return nil, fmt.Errorf("--stage-ahead=%s: use auto, always or never", f.stageAhead)
	}
	budget, err := outageBudget(cfg, r)
	if err != nil {
		return nil, err
	}
	room, err := a.diskRoom(f.makeRoom)
	if err != nil {
		return nil, err
	}
	var fp *contract.FetchPlan
	if f.stage != contract.StageSkip {
		if fp, err = a.fetchPlan(cfg, r, lane.FetchOptions{MarkedOnly: !f.fetch}); err != nil {
			return nil, err
		}
	}
	if f.fetch && fp == nil {
		return nil, fmt.Errorf("--fetch: lane %s has no hub-mirror blocks to fetch, or --stage=skip (%s)", r.Name, r.File)
	}
	// Refused before anything is staged: a lane that cannot fit would
	// stop the running one and fail at load.
	_, note, err := a.laneFit(cfg, r, plan, nil)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(note, "--force") {
		fmt.Fprintln(a.Err, "warning:", note)
	}
	// A sim lane's engine-sim image on no node is built on the head; the
	// cutover's image step moves it to the other nodes.
	if _, err := a.ensureSimImage(ctx, cfg, plan, ""); err != nil {
		return nil, err
	}
	run, err := a.start(ctx, runSpec{
		ID: contract.CutoverID(r.Cluster), Workflow: contract.WorkflowCutover, Lane: r.Name, Cluster: r.Cluster,
		Memo: recipeMemo(r, plan),
		// --no-wait detaches this command; the workflow still runs every step.
		Input: contract.CutoverInput{Recipe: *r, Plan: *plan, Stage: f.stage, Bench: f.bench,
			BenchLabel: f.label, NoRollback: f.noRollback, PowerOn: f.powerOn, Grace: contract.Duration(cfg.ProbeGrace), Fleet: allNodes(cfg), OutageBudget: contract.Duration(budget), StopForeign: f.stopForeign, Room: room, Keep: keepPolicy(cfg, r), Fetch: fp, StageAhead: f.stageAhead,
			Gateways: lane.GatewayQueues(cfg, r.Cluster)},
	})
	if err != nil {
		return nil, err
	}
	if f.noWait {
		return nil, a.output(map[string]string{"workflow_id": run.GetID(), "run_id": run.GetRunID()}, func() {
			fmt.Fprintf(a.Out, "started %s (run %s)\n", run.GetID(), run.GetRunID())
			if a.env.UIURL != "" {
				fmt.Fprintf(a.Out, "follow it at %s\n", a.runURL(run.GetID(), run.GetRunID()))
			}
		})
	}
	var res contract.CutoverResult
	return a.cutoverOutcome(&res, a.follow(ctx, run, &res))
}

// cutoverOutcome turns a followed cutover's end into the result to print
// and the command's error (exit 2: failed and reported, 1: no report).
func (a *App) cutoverOutcome(res *contract.CutoverResult, err error) (*contract.CutoverResult, error) {
	if err != nil {
		if !appErrorDetails(err, res) {
			return nil, exitCode(1, fmt.Errorf("%s", rootMessage(err)))
		}
		if a.JSON {
			_ = a.printJSON(res)
		}
		return res, exitCode(2, fmt.Errorf("cutover to %s failed at step %q: %s", res.Lane, res.FailedStep, res.Error))
	}
	if a.JSON {
		return res, a.printJSON(res)
	}
	return res, nil
}

func (a *App) runURL(id, runID string) string {
	ns := "default"
	if a.cfg != nil && a.cfg.Temporal.Namespace != "" {
		ns = a.cfg.Temporal.Namespace
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s/%s/history", a.env.UIURL, ns, strings.ReplaceAll(id, "/", "%2F"), runID)
}

func printCutover(a *App, res *contract.CutoverResult) {
	fmt.Fprintln(a.Out)
	if res.OK {
		fmt.Fprintf(a.Out, "cutover to %s on %s: ok\n", res.Lane, res.Cluster)
	} else {
		fmt.Fprintf(a.Out, "cutover to %s on %s: FAILED at %s: %s\n", res.Lane, res.Cluster, res.FailedStep, res.Error)
	}
	if stopped, untouched := previousStopped(res); len(stopped) > 0 || len(untouched) > 0 {
		if len(stopped) > 0 {
			fmt.Fprintf(a.Out, "  previous lane(s) stopped: %s\n", strings.Join(stopped, ", "))
		}
		if len(untouched) > 0 {
			fmt.Fprintf(a.Out, "  previous lane(s) never stopped, still serving: %s\n", strings.Join(untouched, ", "))
		}
	}
	if !res.OK {
		if len(res.RolledBack) > 0 {
			fmt.Fprintf(a.Out, "  rolled back: %s; old lane answers again: %v\n", strings.Join(res.RolledBack, ", "), res.OldLaneAnswers)
		}
		if res.RollbackError != "" {
			fmt.Fprintf(a.Out, "  rollback problems: %s\n", res.RollbackError)
		}
	}
	for _, line := range imageMoved(res.Images, res.Pulled, res.Built) {
		fmt.Fprintf(a.Out, "  image %s\n", line)
	}
	if line := stageSummary(res.Stage); line != "" {
		fmt.Fprintf(a.Out, "  staged: %s\n", line)
	}
	if res.StageOrder != "" {
		fmt.Fprintf(a.Out, "  stage order: %s\n", res.StageOrder)
	}
	for _, d := range res.Drained {
		fmt.Fprintf(a.Out, "  %s\n", drainLine(d))
	}
	if res.SwitchSeconds > 0 || res.StageSeconds > 0 {
		fmt.Fprintf(a.Out, "  switch window %.1fs (the previous lane's stop to the new lane's probe passed); image, stage and verify %.1fs\n", res.SwitchSeconds, res.StageSeconds)
	}
	if !a.stepsShown { // the progress already listed every step
		fmt.Fprintln(a.Out, "  steps:")
		for _, s := range res.Steps {
			fmt.Fprintf(a.Out, "    %s\n", stepLine(s))
		}
	}
	if res.Serve != nil && res.Serve.Answers {
		if res.Serve.Smoke != nil {
			for _, s := range res.Serve.Smoke.Answers {
				fmt.Fprintf(a.Out, "  smoke %q → %q ok=%v\n", s.Prompt, s.Answer, s.OK)
			}
		}
		if d := res.Serve.Decode; d != nil {
			fmt.Fprintf(a.Out, "  decode probe: %.1f tok/s decode, %.1f tok/s prefill, TTFT %.3fs\n", d.DecodeTPS, d.PrefillTPS, d.TTFTSeconds)
		}
		fmt.Fprintf(a.Out, "  serving at %s\n", res.Serve.BaseURL)
	}
	if res.Bench != nil {
		fmt.Fprintf(a.Out, "  report: %s (%s)\n", res.Bench.MD, res.Bench.Summary)
	}
}

func (a *App) cancelCmd() *cobra.Command {
	var f runFlags
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "cancel [WORKFLOW_ID] | --cluster C | --lane L",
		Short: "cancel a run (a cutover's cleanup and rollback run) and wait until it has ended",
		RunE: a.withRun(&f, func(ctx context.Context, env *control.Conn, id string, info *workflowpb.WorkflowExecutionInfo) error {
			if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				fmt.Fprintf(a.Out, "%s is not running (%s): nothing to cancel\n", id, statusName(info.GetStatus()))
				return nil
			}
			runID := info.GetExecution().GetRunId()
			if err := env.Client.CancelWorkflow(ctx, id, runID); err != nil {
				return fmt.Errorf("cancel %s: %w", id, err)
			}
			fmt.Fprintf(a.Out, "cancel requested for %s (run %s); waiting for its cleanup to finish...\n", id, runID)
			wctx, stop := context.WithTimeout(ctx, wait)
			defer stop()
			_ = env.Client.GetWorkflow(wctx, id, runID).Get(wctx, nil)
			d, err := env.Client.DescribeWorkflowExecution(ctx, id, runID)
			if err != nil {
				return err
			}
			st := d.GetWorkflowExecutionInfo().GetStatus()
			if st == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				return exitCode(1, fmt.Errorf("%s is still running its cleanup after %s; follow it with 'starter attach %s'", id, wait, id))
			}
			fmt.Fprintf(a.Out, "%s: %s\n", id, statusName(st))
			return nil
		}),
	}
	cmd.Flags().StringVar(&f.cluster, "cluster", "", "cancel the cutover on this cluster")
	cmd.Flags().StringVar(&f.lane, "lane", "", "cancel the cutover on this lane's cluster")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Minute, "how long to wait for the run to close")
	return cmd
}

// outageBudget is the lane's node outage budget: the recipe's, else the
// config's (0: the workflows' default).
func outageBudget(cfg *config.Config, r *contract.Recipe) (time.Duration, error) {
	if r.NodeOutageBudget < 0 {
		return 0, fmt.Errorf("%s: node_outage_budget %s is negative: give a duration such as \"30m\"", r.File, r.NodeOutageBudget)
	}
	if cfg.NodeOutageBudget < 0 {
		return 0, fmt.Errorf("%s: node_outage_budget %s is negative: give a duration such as \"30m\"", cfg.File, cfg.NodeOutageBudget)
	}
	if r.NodeOutageBudget > 0 {
		return r.NodeOutageBudget.D(), nil
	}
	return cfg.NodeOutageBudget, nil
}

func allNodes(cfg *config.Config) []string {
	var out []string
	for _, n := range cfg.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// stageSummary says what staging copied and what it only verified, over
// every node and block ("copied 0 B, verified 8 files on 4 nodes"): a
// second run that copies nothing should say so plainly.
func stageSummary(nodes []contract.StageNodeResult) string {
	if len(nodes) == 0 {
		return ""
	}
	var copied, copiedFiles, verified, adopted, skipped int64
	for _, n := range nodes {
		for _, b := range n.Blocks {
			copied += b.Result.CopiedBytes
			copiedFiles += int64(b.Result.CopiedFiles)
			verified += int64(b.Result.VerifiedFiles)
			adopted += int64(b.Result.AdoptedFiles)
			skipped += int64(b.Result.SkippedFiles)
		}
	}
	s := fmt.Sprintf("copied %s", contract.HumanBytes(copied))
	if copiedFiles > 0 {
		s += fmt.Sprintf(" (%d files)", copiedFiles)
	}
	s += fmt.Sprintf(", verified %d files", verified)
	if adopted > 0 {
		s += fmt.Sprintf(", adopted %d", adopted)
	}
	if skipped > 0 {
		s += fmt.Sprintf(", skipped %d", skipped)
	}
	return s + fmt.Sprintf(" on %d node(s)", len(nodes))
}

// previousStopped splits the lanes that held the nodes into those the
// cutover stopped (a "stop LANE" step ran) and those it never reached:
// with stage ahead, a failure before the stop leaves them serving.
func previousStopped(res *contract.CutoverResult) (stopped, untouched []string) {
	for _, l := range res.Previous {
		ran := false
		for _, s := range res.Steps {
			if s.Name == "stop "+l {
				ran = true
				break
			}
		}
		if ran {
			stopped = append(stopped, l)
		} else {
			untouched = append(untouched, l)
		}
	}
	return stopped, untouched
}
