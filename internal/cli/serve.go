package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
)

func (a *App) upCmd() *cobra.Command {
	var f laneFlags
	var noWait, dryRun, force bool
	cmd := &cobra.Command{
		Use:   "up --lane L [--no-wait] [--dry-run] [--force]",
		Short: "serve a lane on its nodes (hooks, containers) and probe it; no staging",
		RunE: a.withLane(&f, func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
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
			if err := a.upSimImage(ctx, cfg, r, plan); err != nil {
				return err
			}
			return a.runServe(ctx, runSpec{ID: contract.UpID(r.Cluster), Workflow: contract.WorkflowServe, Lane: r.Name, Cluster: r.Cluster,
				Memo: map[string]any{"recipe_hash": plan.RecipeHash}, Input: contract.ServeInput{Recipe: *r, Plan: *plan, NoWait: noWait, OutageBudget: contract.Duration(budget),
					Keep: keepPolicy(cfg, r), Grace: contract.Duration(cfg.ProbeGrace), Gateways: lane.GatewayQueues(cfg, r.Cluster)}})
		}),
	}
	f.bind(cmd, overrideHelp)
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the containers started")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print every node's command, env and mounts; start nothing")
	cmd.Flags().BoolVar(&force, "force", false, "start even on nodes another lane holds (both then share the GPU)")
	return cmd
}

// upSimImage builds a sim lane's engine-sim image on the head when no
// node has it (ensureSimImage). A serve run has no image step that moves
// an image between nodes, so on a lane of more than one node the image
// then goes to the others as `starter image build --sim` sends it: the
// stage's image step alone (stage/LANE, image only).
func (a *App) upSimImage(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
	built, err := a.ensureSimImage(ctx, cfg, plan, "")
	if err != nil || built == nil || len(plan.Nodes) < 2 {
		return err
	}
	var res contract.StageResult
	if err := a.startFollow(ctx, runSpec{ID: contract.StageID(r.Name), Workflow: contract.WorkflowStage, Lane: r.Name, Cluster: r.Cluster,
		Input: contract.StageInput{Plan: *plan, Mode: contract.StageAuto, ImageOnly: true}}, &res); err != nil {
		return fmt.Errorf("lane %s: move the engine-sim image built on %s to its other nodes: %w", r.Name, built.Node, err)
	}
	if !a.JSON {
		for _, line := range imageMoved(res.Images, res.Pulled, res.Built) {
			fmt.Fprintf(a.Out, "image %s\n", line)
		}
	}
	return nil
}

// refuseHeldNodes probes the lane's nodes and refuses when another lane
// serves on any of them: two engines on one GPU fail in ways that look
// like a broken lane. A cutover stops the previous lane itself; up does not.
func (a *App) refuseHeldNodes(ctx context.Context, cfg *config.Config, lane string, nodes []string) error {
	run, err := a.start(ctx, runSpec{ID: fmt.Sprintf("fleet-probe/%d", time.Now().UnixNano()), Workflow: contract.WorkflowFleetProbe,
		Input: contract.FleetProbeInput{Nodes: nodes, Grace: contract.Duration(cfg.ProbeGrace), PickupTimeout: contract.Duration(3 * time.Second)}})
	if err != nil {
		return err
	}
	var res contract.FleetProbeResult
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
	var f laneFlags
	cmd := &cobra.Command{
		Use:   "probe --lane L",
		Short: "probe a serving lane: ready, smoke prompts, decode tok/s",
		RunE: a.withLane(&f, func(ctx context.Context, _ *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
			return a.runServe(ctx, runSpec{ID: "probe/" + r.Name, Workflow: contract.WorkflowProbe, Lane: r.Name, Cluster: r.Cluster,
				Input: contract.ServeInput{Recipe: *r, Plan: *plan}})
		}),
	}
	f.bindLane(cmd)
	return cmd
}

// runServe starts a Serve or Probe run, follows it and prints its result.
func (a *App) runServe(ctx context.Context, spec runSpec) error {
	var res contract.ServeResult
	if err := a.startFollow(ctx, spec, &res); err != nil {
		return err
	}
	return a.output(res, func() { a.printServe(res) })
}

// printServe is a Serve or Probe run's result as text.
func (a *App) printServe(res contract.ServeResult) {
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
}

func (a *App) stopCmd() *cobra.Command {
	var lane, cluster string
	var noDrain bool
	cmd := &cobra.Command{
		Use:   "stop --lane L | --cluster C",
		Short: "stop a lane (or every sparklane container on a cluster) and verify nothing is left running",
		// Which of the two is checked before the config is loaded.
		PreRunE: func(*cobra.Command, []string) error {
			if (lane == "") == (cluster == "") {
				return fmt.Errorf("give exactly one of --lane or --cluster")
			}
			return nil
		},
		RunE: a.withFleet(func(ctx context.Context, req *request) error {
			var in contract.StopInput
			var spec runSpec
			if lane != "" {
				_, r, _, err := a.lane(lane, nil)
				if err != nil {
					return err
				}
				// A lane is stopped wherever it runs, not only on its cluster.
				in.Nodes = allNodes(req.cfg)
				in.Lane = r.Name
				spec = runSpec{ID: contract.StopID(r.Name), Lane: r.Name, Cluster: r.Cluster}
			} else {
				c := req.cfg.Cluster(cluster)
				if c == nil {
					return fmt.Errorf("cluster %q is not in %s", cluster, req.cfg.File)
				}
				in.Nodes, in.All = c.Nodes, true
				spec = runSpec{ID: contract.StopID(cluster), Cluster: cluster}
			}
			in.Gateways, in.NoDrain = gatewayQueues(req.cfg, cluster), noDrain
			spec.Workflow, spec.Input = contract.WorkflowStop, in
			var res contract.StopResult
			if err := a.startFollow(ctx, spec, &res); err != nil {
				return err
			}
			return a.output(res, func() {
				for _, d := range res.Drained {
					fmt.Fprintln(a.Out, drainLine(d))
				}
				for _, n := range res.Nodes {
					fmt.Fprintf(a.Out, "%s: stopped %d container(s) %v; verified none left\n", n.Node, len(n.Stopped), n.Stopped)
				}
			})
		}),
	}
	cmd.Flags().StringVar(&lane, "lane", "", "lane name or alias")
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name: stop every sparklane container on its nodes")
	cmd.Flags().BoolVar(&noDrain, "no-drain", false, "stop at once: the gateway does not wait for the lane's requests in flight (they are cut off)")
	return cmd
}
