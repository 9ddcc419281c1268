package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/buildinfo"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/logging"
	"github.com/sparklane/sparklane/internal/workers"

	// The embedded Temporal server: this program hosts the control service.
	_ "github.com/sparklane/sparklane/internal/workers/embedded"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the flags every mode shares.
type options struct {
	cfgPath, logMode, level string
}

// execute runs the worker command line and returns the exit code (tests
// call it directly).
func execute(ctx context.Context, args []string, out, errw io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errw)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(errw, "worker:", err)
		return 1
	}
	return 0
}

// newRoot builds the command tree: one subcommand per mode.
func newRoot() *cobra.Command {
	var o options
	root := &cobra.Command{
		Use:   "worker control|node --node NAME|dev",
		Short: "sparklane's Temporal workers (control, one per node, or everything in one dev process)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown mode %q: use control, node or dev", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("no mode given: use control, node --node NAME or dev (worker --help)")
		},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&o.cfgPath, "config", "", "fleet config (default $SPARKLANE_CONFIG or ./sparklane.toml)")
	pf.StringVar(&o.logMode, "log", "", "log format: console or json (default console for dev, json otherwise)")
	pf.StringVar(&o.level, "log-level", "info", "log level")

	var nodeName string
	node := &cobra.Command{
		Use:   "node --node NAME",
		Short: "run a node's worker: node-local activities on queue node.NAME (run it on that node)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodeName == "" {
				return errors.New("worker node needs --node NAME (one of the config's [[nodes]])")
			}
			return run(cmd.Context(), "node", o, nodeName)
		},
	}
	node.Flags().StringVar(&nodeName, "node", "", "node name (one of the config's [[nodes]])")
	control := &cobra.Command{
		Use:   "control",
		Short: "run the control worker: workflows and control activities (queue sparklane)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), "control", o, "") },
	}
	dev := &cobra.Command{
		Use:   "dev",
		Short: "embedded Temporal server + web UI + control worker + every local node's worker, in one process",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), "dev", o, "") },
	}
	version := &cobra.Command{
		Use:   "version",
		Short: "print this worker's version, commit and Go version (those of sparklane_build_info)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "sparklane %s (commit %s, %s, %s/%s)\n", buildinfo.Version, buildinfo.BuildCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
	root.AddCommand(control, node, dev, version)
	return root
}

// run loads the config, dials one client and runs mode until ctx ends.
func run(ctx context.Context, mode string, o options, nodeName string) error {
	if o.logMode == "" {
		o.logMode = "json"
		if mode == "dev" {
			o.logMode = "console"
		}
	}
	log, err := logging.New(o.logMode, o.level)
	if err != nil {
		return err
	}
	defer log.Sync()
	cfg, err := config.Load(o.cfgPath)
	if err != nil {
		return err
	}
	if mode == "dev" {
		return workers.RunDev(ctx, cfg, log)
	}
	m, _ := workers.ServeMetrics(ctx, cfg, log)
	env, err := workers.Connect(ctx, cfg, log, workers.ConnectOptions{NoEmbedded: true, Metrics: m})
	if err != nil {
		return err
	}
	defer env.Close()
	if mode == "control" {
		return workers.RunControl(ctx, env)
	}
	return workers.RunNode(ctx, env, nodeName)
}
