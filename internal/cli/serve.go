package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/workflows"
)

func (a *App) upCmd() *cobra.Command {
	var lane, onCluster string
	var noWait, dryRun, force bool
	var overrides []string
	cmd := &cobra.Command{
		Use:   "up --lane L [--no-wait] [--dry-run] [--force]",
		Short: "serve a lane on its nodes (hooks, containers) and probe it; no staging",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, r, plan, err := a.laneOn(lane, onCluster, overrides)
			if err != nil {
				return err
			}
			if dryRun {
				return a.dryRun(ctx, cfg, r, plan, "up")
			}
			if !force {
				if err := a.refuseHeldNodes(ctx, cfg, r.Name, nodesOf(plan)); err != nil {
					return err
				}
			}
			budget, err := outageBudget(cfg, r)
			if err != nil {
				return err
			}
			return a.runServe(ctx, runSpec{ID: workflows.UpID(r.Cluster), Workflow: workflows.Serve, Lane: r.Name, Cluster: r.Cluster,
				Memo: map[string]any{"recipe_hash": plan.RecipeHash}, Input: workflows.ServeInput{Recipe: *r, Plan: *plan, NoWait: noWait, OutageBudget: contract.Duration(budget)}})
		},
	}
	cmd.Flags().StringVar(&lane, "lane", "", "lane name or alias")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the containers started")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print every node's command, env and mounts; start nothing")
	cmd.Flags().BoolVar(&force, "force", false, "start even on nodes another lane holds (both then share the GPU)")
	cmd.Flags().StringVar(&onCluster, "cluster", "", "run on this cluster (a recipe without one, e.g. every sparkrun recipe, else runs on default_cluster)")
	cmd.Flags().StringArrayVarP(&overrides, "override", "o", nil, "key=value override (repeatable)")
	return cmd
}

// refuseHeldNodes probes the lane's nodes and refuses when another lane
// serves on any of them: two engines on one GPU fail in ways that look
// like a broken lane. A cutover stops the previous lane itself; up does not.
func (a *App) refuseHeldNodes(ctx context.Context, cfg *config.Config, lane string, nodes []string) error {
	run, err := a.start(ctx, runSpec{ID: fmt.Sprintf("fleet-probe/%d", time.Now().UnixNano()), Workflow: workflows.FleetProbe,
		Input: workflows.FleetProbeInput{Nodes: nodes, Grace: contract.Duration(cfg.ProbeGrace), PickupTimeout: contract.Duration(3 * time.Second)}})
	if err != nil {
		return err
	}
	var res workflows.FleetProbeResult
	if err := run.Get(ctx, &res); err != nil && !appErrorDetails(err, &res) {
		return err
	}
	var held []string
	for _, n := range res.Nodes {
		for _, l := range n.Lanes {
			if l != lane {
				held = append(held, fmt.Sprintf("%s serves lane %s", n.Node, l))
			}
		}
	}
	if len(held) > 0 {
		return exitCode(3, fmt.Errorf("up --lane %s refused: %s; stop it first ('starter stop --lane LANE'), switch with 'starter cutover --lane %s', or pass --force", lane, strings.Join(held, ", "), lane))
	}
	return nil
}

func (a *App) probeCmd() *cobra.Command {
	var lane string
	cmd := &cobra.Command{
		Use:   "probe --lane L",
		Short: "probe a serving lane: ready, smoke prompts, decode tok/s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			_, r, plan, err := a.lane(lane, nil)
			if err != nil {
				return err
			}
			return a.runServe(ctx, runSpec{ID: "probe/" + r.Name, Workflow: workflows.Probe, Lane: r.Name, Cluster: r.Cluster,
				Input: workflows.ServeInput{Recipe: *r, Plan: *plan}})
		},
	}
	cmd.Flags().StringVar(&lane, "lane", "", "lane name or alias")
	return cmd
}

// runServe starts a Serve or Probe run, follows it and prints its result.
func (a *App) runServe(ctx context.Context, spec runSpec) error {
	run, err := a.start(ctx, spec)
	if err != nil {
		return err
	}
	var res workflows.ServeResult
	if err := a.follow(ctx, run, &res); err != nil {
		return exitCode(1, fmt.Errorf("%s", rootMessage(err)))
	}
	return a.printServe(res)
}

func (a *App) printServe(res workflows.ServeResult) error {
	if a.JSON {
		return a.printJSON(res)
	}
	fmt.Fprintf(a.Out, "lane %s", res.Lane)
	if res.BaseURL != "" {
		fmt.Fprintf(a.Out, " serving at %s", res.BaseURL)
	}
	fmt.Fprintln(a.Out)
	if res.Ready != nil {
		fmt.Fprintf(a.Out, "  ready after %.1fs (model %s)\n", res.Ready.Seconds, res.Ready.Model)
	}
	if res.Smoke != nil {
		for _, s := range res.Smoke.Answers {
			mark := "✓"
			if !s.OK {
				mark = "✗"
			}
			fmt.Fprintf(a.Out, "  %s smoke %q → %q\n", mark, s.Prompt, s.Answer)
		}
	}
	if res.Decode != nil {
		fmt.Fprintf(a.Out, "  decode %.1f tok/s, prefill %.1f tok/s, TTFT %.3fs\n", res.Decode.DecodeTPS, res.Decode.PrefillTPS, res.Decode.TTFTSeconds)
	}
	return nil
}

func (a *App) stopCmd() *cobra.Command {
	var lane, cluster string
	cmd := &cobra.Command{
		Use:   "stop --lane L | --cluster C",
		Short: "stop a lane (or every sparklane container on a cluster) and verify nothing is left running",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if (lane == "") == (cluster == "") {
				return fmt.Errorf("give exactly one of --lane or --cluster")
			}
			var in workflows.StopInput
			var spec runSpec
			if lane != "" {
				cfg, r, _, err := a.lane(lane, nil)
				if err != nil {
					return err
				}
				// A lane is stopped wherever it runs, not only on its cluster.
				for _, n := range cfg.Nodes {
					in.Nodes = append(in.Nodes, n.Name)
				}
				in.Lane = r.Name
				spec = runSpec{ID: workflows.StopID(r.Name), Lane: r.Name, Cluster: r.Cluster}
			} else {
				cfg, err := a.config()
				if err != nil {
					return err
				}
				c := cfg.Cluster(cluster)
				if c == nil {
					return fmt.Errorf("cluster %q is not in %s", cluster, cfg.File)
				}
				in.Nodes, in.All = c.Nodes, true
				spec = runSpec{ID: workflows.StopID(cluster), Cluster: cluster}
			}
			spec.Workflow, spec.Input = workflows.Stop, in
			run, err := a.start(ctx, spec)
			if err != nil {
				return err
			}
			var res workflows.StopResult
			if err := a.follow(ctx, run, &res); err != nil {
				return exitCode(1, fmt.Errorf("%s", rootMessage(err)))
			}
			if a.JSON {
				return a.printJSON(res)
			}
			for _, n := range res.Nodes {
				fmt.Fprintf(a.Out, "%s: stopped %d container(s) %v; verified none left\n", n.Node, len(n.Stopped), n.Stopped)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&lane, "lane", "", "lane name or alias")
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name: stop every sparklane container on its nodes")
	return cmd
}
