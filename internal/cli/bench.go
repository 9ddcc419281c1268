package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/report"
	"github.com/sparklane/sparklane/internal/lane"
)

func (a *App) benchCmd() *cobra.Command {
	var f laneFlags
	var label, tokenizer, baseline, mode string
	var parallel int
	var seed int64
	var failOnRegression bool
	cmd := &cobra.Command{
		Use:   "bench --lane L [--label X] [--seed N] [--mode standard|hardmode|short] [--parallel N] [--tokenizer PATH] [--baseline latest|ID]",
		Short: "bench a serving lane (perf sweep + the recipe's harness) and write a report with a verdict",
	}
	cmd.RunE = a.withLane(&f, func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
		in := contract.BenchInput{Recipe: *r, Plan: *plan, BaseURL: lane.BaseURL(cfg, *plan), Label: label,
			Parallel: parallel, Tokenizer: tokenizer, Baseline: baseline, Mode: mode}
		if cmd.Flags().Changed("seed") {
			in.Seed = &seed
		}
		if mode != "" && !slices.Contains(contract.BenchModes, mode) {
			return exitCode(2, fmt.Errorf("--mode %q: use one of %s", mode, strings.Join(contract.BenchModes, ", ")))
		}
		var res contract.BenchResult
		if err := a.startFollow(ctx, runSpec{ID: contract.BenchID(r.Name), Workflow: contract.WorkflowBench, Input: in, Lane: r.Name, Cluster: r.Cluster}, &res); err != nil {
			return err
		}
		err := a.output(res, func() {
			fmt.Fprintf(a.Out, "report %s\n  %s\n  %s\n", res.ReportID, res.MD, res.Summary)
			for _, w := range res.Warnings {
				fmt.Fprintf(a.Out, "  warning: %s\n", w)
			}
		})
		if err != nil {
			return err
		}
		if failOnRegression && res.Verdict == "regression" {
			return exitCode(4, fmt.Errorf("verdict: regression against the baseline (see %s)", res.MD))
		}
		return nil
	})
	f.bindLane(cmd)
	cmd.Flags().StringVar(&label, "label", "bench", "label in the report's name")
	cmd.Flags().IntVar(&parallel, "parallel", 1, "harness scenarios in flight (faster; may time out under saturation — marked in the report)")
	cmd.Flags().Int64Var(&seed, "seed", contract.DefaultBenchSeed, "prompt and harness seed (default: the recipe's [bench] seed, else 42)")
	cmd.Flags().StringVar(&mode, "mode", "", "harness scenario pool: standard, hardmode or short (default: the recipe's [bench] mode)")
	cmd.Flags().StringVar(&tokenizer, "tokenizer", "", "tokenizer path passed to the harness as {tokenizer}")
	cmd.Flags().StringVar(&baseline, "baseline", "latest", "compare against latest, a report ID, or '' for none")
	cmd.Flags().BoolVar(&failOnRegression, "fail-on-regression", false, "exit 4 when the verdict is regression")
	return cmd
}

func (a *App) reportCmd() *cobra.Command {
	var f laneFlags
	var show string
	var list, plot bool
	cmd := &cobra.Command{
		Use:   "report --lane L [--list | --show ID | --plot]",
		Short: "list, show or plot a lane's bench reports",
		RunE: a.withLane(&f, func(_ context.Context, cfg *config.Config, r *contract.Recipe, _ *contract.LanePlan) error {
			dir, err := lane.ReportsDir(cfg, r.Name)
			if err != nil {
				return err
			}
			switch {
			case show != "":
				rep, err := report.Load(dir, show)
				if err != nil {
					return err
				}
				if a.JSON {
					return a.printJSON(rep)
				}
				b, err := os.ReadFile(filepath.Join(dir, rep.ID+".md"))
				if err != nil {
					return err
				}
				_, err = a.Out.Write(b)
				return err
			case plot:
				path, err := report.WritePlot(dir)
				if err != nil {
					return err
				}
				return a.output(map[string]string{"svg": path}, func() { fmt.Fprintf(a.Out, "plot: %s\n", path) })
			default:
				metas, err := report.List(dir)
				if err != nil {
					return err
				}
				return a.output(metas, func() {
					var rows [][]string
					for _, m := range metas {
						score := "-"
						if m.Score != nil {
							score = fmt.Sprintf("%.1f", *m.Score)
						}
						rows = append(rows, []string{m.ID, fmt.Sprintf("%.1f", m.TG), fmt.Sprintf("%.0f", m.PP), score, dash(m.Verdict)})
					}
					table(a.Out, []string{"REPORT", "TG TOK/S", "PP TOK/S", "SCORE", "VERDICT"}, rows)
				})
			}
		}),
	}
	f.bindLane(cmd)
	cmd.Flags().BoolVar(&list, "list", false, "list reports (default)")
	cmd.Flags().StringVar(&show, "show", "", "print one report's markdown")
	cmd.Flags().BoolVar(&plot, "plot", false, "write an SVG of tg/pp (and score) over the lane's history")
	return cmd
}
