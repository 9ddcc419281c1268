package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/report"
)

func (a *App) lanesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "lanes",
		Short: "list lanes: name, aliases, cluster, runtime, staging blocks; broken recipes with their error",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, set, err := a.recipeSet()
			if err != nil {
				return err
			}
			var lanes []contract.Recipe // as runs carry them (lane.Wire)
			for _, r := range set.Recipes {
				lanes = append(lanes, lane.Wire(r))
			}
			out := map[string]any{"lanes": lanes, "broken": set.Broken}
			if set.Broken == nil {
				out["broken"] = []config.BrokenRecipe{}
			}
			return a.output(out, func() {
				rows := config.FormatLanes(set.Recipes)
				for _, b := range set.Broken {
					rows = append(rows, []string{"BROKEN " + b.File, "-", "-", "-", firstLine(b.Error)})
				}
				table(a.Out, []string{"LANE", "ALIASES", "CLUSTER", "RUNTIME", "STAGING"}, rows)
			})
		},
	}
}

func (a *App) recipeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "recipe", Short: "check and render recipes"}
	check := &cobra.Command{
		Use:   "check [FILE...]",
		Short: "check recipe files (without FILE: every recipe of recipes_dir and recipes_dirs); exit 1 listing every error",
		RunE: func(cmd *cobra.Command, files []string) error {
			var errs []error
			var notices []string
			if len(files) == 0 {
				_, set, err := a.recipeSet()
				if err != nil {
					return err
				}
				for _, b := range set.Broken {
					errs = append(errs, fmt.Errorf("broken: %s", b.Error))
				}
				for _, r := range set.Recipes {
					files = append(files, r.File)
				}
			} else {
				errs, notices = lane.Check(files)
			}
			msgs := []string{}
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			err := a.output(map[string]any{"ok": len(errs) == 0, "errors": msgs, "notices": nonNil(notices)}, func() {
				for _, n := range notices {
					fmt.Fprintln(a.Out, "notice:", n)
				}
				for _, e := range errs {
					fmt.Fprintln(a.Out, e)
				}
				if len(errs) == 0 {
					fmt.Fprintf(a.Out, "%d recipe file(s) ok\n", len(files))
				}
			})
			if err != nil {
				return err
			}
			if len(errs) > 0 {
				return exitCode(1, nil)
			}
			return nil
		},
	}
	var f laneFlags
	render := &cobra.Command{
		Use:   "render --lane L [--cluster C]",
		Short: "print each node's rendered command, env and mounts",
		RunE: a.withLane(&f, func(_ context.Context, _ *config.Config, _ *contract.Recipe, plan *contract.LanePlan) error {
			return a.output(plan, func() { printPlan(a, plan) })
		}),
	}
	f.bind(render, "key=value override of a recipe default (repeatable)")
	cmd.AddCommand(check, render)
	return cmd
}

// printPlan prints a rendered lane per node.
func printPlan(a *App, unmasked *contract.LanePlan) {
	masked, _ := report.MaskPlan(*unmasked) // the reports' masker
	plan := &masked
	fmt.Fprintf(a.Out, "lane %s on cluster %s (%s, tp %d, recipe %s)\n", plan.Lane, plan.Cluster, plan.Runtime, plan.TP, short(plan.RecipeHash))
	for _, w := range plan.Warnings {
		fmt.Fprintf(a.Out, "warning: %s\n", w)
	}
	for _, n := range plan.Nodes {
		head := ""
		if n.Head {
			head = " (head)"
		}
		fmt.Fprintf(a.Out, "\n[%s] rank %d%s  container %s  image %s\n", n.Node, n.Rank, head, n.ContainerName, n.Image)
		fmt.Fprintf(a.Out, "  command: %s\n", n.Command)
		fmt.Fprintln(a.Out, "  env:")
		printEnv(a, n.Env, n.EnvFrom)
		if len(n.Mounts) > 0 {
			fmt.Fprintln(a.Out, "  mounts:")
			for _, m := range n.Mounts {
				fmt.Fprintf(a.Out, "    %s -> %s (%s)\n", m.Src, m.Dst, mountMode(m.ReadOnly))
			}
		}
		printDocker(a, n.Container.DockerArgs(), n.Container.DetectRDMA, n.PreExec)
	}
}

// mountMode is a bind's mode as docker writes it.
func mountMode(readOnly bool) string {
	if readOnly {
		return "ro"
	}
	return "rw"
}

// printEnv prints a rank's environment: its values, then the secret
// variables by where the node worker reads them (never their values).
func printEnv(a *App, env, envFrom map[string]string) {
	for _, k := range sortedMapKeys(env) {
		fmt.Fprintf(a.Out, "    %s=%s\n", k, env[k])
	}
	for _, k := range sortedMapKeys(envFrom) {
		fmt.Fprintf(a.Out, "    %s from %s (read on the node)\n", k, envFrom[k])
	}
}

// printDocker prints a rank's container shape as docker run flags, and
// what runs in the container before its command.
func printDocker(a *App, args []string, detect bool, pre []contract.PreExec) {
	more := ""
	if detect {
		more = "  (+ RDMA devices and NCCL/UCX interfaces the node worker detects)"
	}
	fmt.Fprintf(a.Out, "  docker: %s%s\n", contract.JoinArgs(args), more)
	for _, p := range pre {
		if p.Copy != "" {
			fmt.Fprintf(a.Out, "  pre_exec: copy %s -> %s\n", p.Copy, p.Dest)
		} else {
			fmt.Fprintf(a.Out, "  pre_exec: %s\n", p.Run)
		}
	}
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
