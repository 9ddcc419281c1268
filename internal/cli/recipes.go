package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/report"
	"github.com/sparklane/sparklane/internal/lane"
)

func (a *App) lanesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "lanes",
		Short: "list lanes: name, aliases, cluster, runtime, staging blocks; lanes that need more nodes than the fleet has; broken recipes with their error",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, set, err := a.loadRecipeSet() // lists what does not load itself
			if err != nil {
				return err
			}
			for _, w := range set.Warnings {
				fmt.Fprintln(a.Err, "warning:", w)
			}
			for _, n := range set.Notes {
				fmt.Fprintln(a.Err, "note:", n)
			}
			var lanes []contract.Recipe // as runs carry them (lane.Wire)
			for _, r := range set.Recipes {
				lanes = append(lanes, lane.Wire(r))
			}
			out := map[string]any{"lanes": lanes, "broken": set.Broken, "too_large": set.TooLarge}
			if set.Broken == nil {
				out["broken"] = []config.BrokenRecipe{}
			}
			if set.TooLarge == nil {
				out["too_large"] = []config.TooLarge{}
			}
			return a.output(out, func() {
				rows := FormatLanes(set.Recipes)
				// A lane too large for this fleet: its row, with what it
				// needs where a lane's staging blocks go.
				for _, t := range set.TooLarge {
					row := FormatLanes([]*config.Recipe{t.Recipe})[0]
					row[len(row)-1] = lane.TooLargeWhy(t)
					rows = append(rows, row)
				}
				for _, b := range set.Broken {
					rows = append(rows, []string{"BROKEN " + b.File, "-", "-", "-", firstLine(b.Error)})
				}
				table(a.Out, []string{"LANE", "ALIASES", "CLUSTER", "RUNTIME", "STAGING"}, rows)
				// The full errors, as `recipe check` gives them: the
				// table's row has the first line only.
				for _, b := range set.Broken {
					fmt.Fprintf(a.Out, "\nBROKEN %s:\n  %s\n", b.File, strings.ReplaceAll(strings.TrimRight(b.Error, "\n"), "\n", "\n  "))
				}
			})
		},
	}
}

func (a *App) recipeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "recipe", Short: "check and render recipes"}
	check := &cobra.Command{
		Use:   "check [FILE...]",
		Short: "check recipes as lanes, stage and cutover will (without FILE: every recipe of recipes_dir and recipes_dirs); exit 1 listing every error",
		Long: "Runs every check a recipe must pass before it runs — validation against the fleet config, a\n" +
			"render on its cluster (mounts and staging dst inside the nodes' roots), pins that are not whole —\n" +
			"and lists host = true mounts as notices. With FILEs the fleet config is the usual one (--config)\n" +
			"unless one of the FILEs is a fleet config (sparklane*.toml).",
		RunE: func(_ *cobra.Command, files []string) error {
			res, err := a.checkRecipes(files)
			if err != nil {
				return err
			}
			return a.printRecipeCheck(res)
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

// recipeCheck is what `recipe check` found.
type recipeCheck struct {
	errs    []error
	notices []string
	// files is how many files were checked; fleet is the fleet
	// config they were checked against ("" for none).
	files int
	fleet string
}

// checkRecipes runs lane's one recipe check on files, or without files on
// the recipe set of the fleet config: the same checks either way, so a
// recipe fails here exactly when lanes, stage and cutover would refuse it.
func (a *App) checkRecipes(files []string) (recipeCheck, error) {
	var res recipeCheck
	if len(files) == 0 {
		cfg, err := a.config()
		if err != nil {
			return res, err
		}
		set, err := config.LoadRecipeSet(cfg, cfg.File)
		for _, w := range set.Warnings {
			fmt.Fprintln(a.Err, "warning:", w)
		}
		if err != nil {
			return res, err
		}
		res.errs, res.notices = lane.CheckSet(cfg, set)
		res.files, res.fleet = len(set.Recipes)+len(set.Broken), cfg.File
		return res, nil
	}
	var fleet *config.Config
	res.files = len(files)
	for _, f := range files {
		if config.IsFleetConfigFile(f) {
			res.fleet = f
		}
	}
	if res.fleet == "" {
		if a.noConfigAtAll() {
			res.notices = append(res.notices, "no fleet config (--config, $SPARKLANE_CONFIG, ./sparklane.toml): the recipes were checked on their own, not on a fleet's clusters and roots")
		} else {
			cfg, err := a.config()
			if err != nil {
				return res, err
			}
			fleet, res.fleet = cfg, cfg.File
		}
	}
	errs, notices := lane.CheckFiles(fleet, files)
	res.errs, res.notices = errs, append(res.notices, notices...)
	return res, nil
}

// noConfigAtAll says no fleet config is named or present: no --config,
// no $SPARKLANE_CONFIG and no ./sparklane.toml (config.LoadViper's search).
func (a *App) noConfigAtAll() bool {
	if a.ConfigPath != "" || (a.viper != nil && a.viper.GetString("config") != "") || os.Getenv("SPARKLANE_CONFIG") != "" {
		return false
	}
	_, err := os.Stat("sparklane.toml")
	return err != nil
}

// printRecipeCheck prints the notices and errors of a recipe check and
// exits 1 when there is an error.
func (a *App) printRecipeCheck(res recipeCheck) error {
	msgs := []string{}
	for _, e := range res.errs {
		msgs = append(msgs, e.Error())
	}
	err := a.output(map[string]any{"ok": len(res.errs) == 0, "errors": msgs, "notices": nonNil(res.notices), "fleet_config": res.fleet}, func() {
		for _, n := range res.notices {
			fmt.Fprintln(a.Out, "notice:", n)
		}
		for _, m := range msgs {
			fmt.Fprintln(a.Out, m)
		}
		if len(res.errs) == 0 {
			against := ""
			if res.fleet != "" {
				against = " on the fleet of " + res.fleet
			}
			fmt.Fprintf(a.Out, "%d recipe file(s) ok%s\n", res.files, against)
		}
	})
	if err != nil {
		return err
	}
	if len(res.errs) > 0 {
		return exitCode(1, nil)
	}
	return nil
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
