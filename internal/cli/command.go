package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
)

// The one preamble of every command. A RunE is built by withConfig,
// withClient, withLane or withRun, which load what the command works on
// (the fleet config, the Temporal connection, a rendered lane, a run) in
// the order the commands always loaded it, return its error as it is (it
// names the file, key or node), and hand the rest to the command's body.
// The body prints its result through output: JSON under --json, else text.

// request is what a command was given (its arguments) and what its
// preamble loaded for it.
type request struct {
	args []string
	cfg  *config.Config
	// env is the Temporal connection (withClient).
	env *control.Conn
}

// body is a command's own work once its preamble ran.
type body func(ctx context.Context, req *request) error

// runE is a cobra RunE.
type runE func(cmd *cobra.Command, args []string) error

// withConfig loads the fleet config before b.
func (a *App) withConfig(b body) runE {
	return func(cmd *cobra.Command, args []string) error {
		cfg, err := a.config()
		if err != nil {
			return err
		}
		return b(cmd.Context(), &request{args: args, cfg: cfg})
	}
}

// withFleet is withConfig for a command that works on the fleet's nodes:
// a config without any (an empty file, or one whose [[nodes]] went
// missing) is an error naming the file, not an empty table printed from
// the default state_dir.
func (a *App) withFleet(b body) runE {
	return a.withConfig(func(ctx context.Context, req *request) error {
		if err := requireNodes(req.cfg); err != nil {
			return err
		}
		return b(ctx, req)
	})
}

// requireFleet loads the config and requires nodes in it (requireNodes),
// before recipes are read: the error names what is missing first.
func (a *App) requireFleet() error {
	cfg, err := a.config()
	if err != nil {
		return err
	}
	return requireNodes(cfg)
}

// requireNodes says cfg names no node, naming its file.
func requireNodes(cfg *config.Config) error {
	if len(cfg.Nodes) > 0 {
		return nil
	}
	return fmt.Errorf("%s has no [[nodes]] (an empty or node-less fleet config; state_dir %s): this command works on the fleet's nodes — add them (see recipes/sparklane.example.toml) or write the config with 'starter init'", cfg.File, cfg.StateDir)
}

// withClient loads the config and opens the Temporal connection (starting
// the control service when none runs) before b.
func (a *App) withClient(b body) runE {
	return a.withConfig(func(ctx context.Context, req *request) error {
		env, err := a.connect(ctx)
		if err != nil {
			return err
		}
		req.env = env
		return b(ctx, req)
	})
}

// laneFlags name a lane and where to render it: --lane, and for the
// commands that take them --cluster and -o.
type laneFlags struct {
	lane, cluster string
	overrides     []string
}

// clusterHelp is --cluster's help wherever a lane is rendered.
const clusterHelp = "run on this cluster (a recipe without one, e.g. every sparkrun recipe, else runs on default_cluster)"

// overrideHelp is -o's help.
const overrideHelp = "key=value override (repeatable)"

// bindLane defines --lane on cmd.
func (f *laneFlags) bindLane(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.lane, "lane", "", "lane name or alias")
}

// bind defines --lane, --cluster and -o (with overrideHelp) on cmd.
func (f *laneFlags) bind(cmd *cobra.Command, overrideHelp string) {
	f.bindLane(cmd)
	cmd.Flags().StringVar(&f.cluster, "cluster", "", clusterHelp)
	cmd.Flags().StringArrayVarP(&f.overrides, "override", "o", nil, overrideHelp)
}

// laneBody is the body of a command on one lane: the config, the recipe
// (carrying the cluster it was rendered on) and the lane's plan.
type laneBody func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error

// withLane resolves and renders the lane f names (laneOn, which loads the
// config) before b.
func (a *App) withLane(f *laneFlags, b laneBody) runE {
	return func(cmd *cobra.Command, _ []string) error {
		cfg, r, plan, err := a.laneOn(f.lane, f.cluster, f.overrides)
		if err != nil {
			return err
		}
		return b(cmd.Context(), cfg, r, plan)
	}
}

// runFlags name a run by --cluster or --lane (or WORKFLOW_ID, an argument).
type runFlags struct {
	cluster, lane string
}

// runBody is the body of a command on one run: the Temporal connection,
// the run's workflow ID and its latest execution.
type runBody func(ctx context.Context, env *control.Conn, id string, info *workflowpb.WorkflowExecutionInfo) error

// withRun finds the run the argument or f names and describes its latest
// execution (findRun, which connects) before b.
func (a *App) withRun(f *runFlags, b runBody) runE {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		env, id, info, err := a.findRun(ctx, args, f.cluster, f.lane)
		if err != nil {
			return err
		}
		return b(ctx, env, id, info)
	}
}

// laneRequired is the PreRunE of a command that needs --lane but reads
// it without rendering it: the same error as laneOn's, before the config
// is loaded.
func laneRequired(lane *string) runE {
	return func(*cobra.Command, []string) error {
		if *lane == "" {
			return errors.New("--lane is required (see: starter lanes)")
		}
		return nil
	}
}

// output prints a command's result: v as its one JSON document under
// --json, else text prints it for people.
func (a *App) output(v any, text func()) error {
	if a.JSON {
		return a.printJSON(v)
	}
	text()
	return nil
}

// startFollow starts spec's run and follows it into res; a failed run
// exits 1 with its innermost error.
func (a *App) startFollow(ctx context.Context, spec runSpec, res any) error {
	run, err := a.start(ctx, spec)
	if err != nil {
		return err
	}
	return runFailed(a.follow(ctx, run, res))
}

// runFailed is a followed run's error as the command's: exit 1 with the
// innermost application error's message (nil stays nil).
func runFailed(err error) error {
	if err == nil {
		return nil
	}
	return exitCode(1, errors.New(rootMessage(err)))
}
