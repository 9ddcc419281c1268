package workers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/buildinfo"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/logging"
)

// Options are what a program that runs the worker command line gives
// every worker it starts. The worker command (worker/main.go) gives none;
// the test worker (internal/testkit/testworker) gives its fault points.
type Options struct {
	// Seams are the activities' fault points (nil in production).
	Seams *activities.Seams
	// Gateways is how `worker dev` runs the config's gateways:
	// GatewaysSupervise ("" too) starts each as its own process (`worker
	// gateway`) and again when it dies; GatewaysUnits leaves them to their
	// systemd units (control install).
	Gateways string
}

// `worker dev --gateways` values.
const (
	GatewaysSupervise = "supervise"
	GatewaysUnits     = "units"
)

// cliFlags are the flags every mode shares.
type cliFlags struct {
	cfgPath, logMode, level string
}

// Execute runs the worker command line (control, node --node NAME, dev,
// version) with args and returns its exit code; errors are printed to
// errw as one line prefixed "worker:". Shutdown follows ctx.
func Execute(ctx context.Context, args []string, out, errw io.Writer, o Options) int {
	root := newRoot(o)
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errw)
	if err := root.ExecuteContext(ctx); err != nil {
		if errors.Is(err, ErrReload) {
			return reexec(errw)
		}
		fmt.Fprintln(errw, "worker:", err)
		return 1
	}
	return 0
}

// newRoot builds the command tree: one subcommand per mode.
func newRoot(opts Options) *cobra.Command {
	var f cliFlags
	root := &cobra.Command{
		Use:   "worker control|node --node NAME|dev|gateway [--name NAME]",
		Short: "sparklane's Temporal workers (control, one per node, or everything in one dev process)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown mode %q: use control, node, dev or gateway", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("no mode given: use control, node --node NAME, dev or gateway (worker --help)")
		},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&f.cfgPath, "config", "", "fleet config (default $SPARKLANE_CONFIG or ./sparklane.toml)")
	pf.StringVar(&f.logMode, "log", "", "log format: console or json (default console for dev, json otherwise)")
	pf.StringVar(&f.level, "log-level", "info", "log level")

	var nodeName string
	node := &cobra.Command{
		Use:   "node --node NAME",
		Short: "run a node's worker: node-local activities on queue node.NAME (run it on that node)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodeName == "" {
				return errors.New("worker node needs --node NAME (one of the config's [[nodes]])")
			}
			return runMode(cmd.Context(), "node", f, nodeName, opts)
		},
	}
	node.Flags().StringVar(&nodeName, "node", "", "node name (one of the config's [[nodes]])")
	control := &cobra.Command{
		Use:   "control",
		Short: "run the control worker: workflows and control activities (queue sparklane)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runMode(cmd.Context(), "control", f, "", opts) },
	}
	dev := &cobra.Command{
		Use:   "dev",
		Short: "embedded Temporal server + web UI + control worker + every local node's worker, in one process (and the gateways, each its own)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Gateways != GatewaysSupervise && opts.Gateways != GatewaysUnits {
				return fmt.Errorf("--gateways %q: use supervise (start each gateway as its own process, and again when it dies) or units (systemd runs them)", opts.Gateways)
			}
			return runMode(cmd.Context(), "dev", f, "", opts)
		},
	}
	if opts.Gateways == "" {
		opts.Gateways = GatewaysSupervise
	}
	dev.Flags().StringVar(&opts.Gateways, "gateways", opts.Gateways, "how the config's gateways run: supervise (each its own process, started again when it dies) or units (their systemd units)")
	var gatewayName string
	gw := &cobra.Command{
		Use:   "gateway [--name NAME]",
		Short: "run a gateway: the lanes' one client-facing address ([gateway], or --name one of [[gateways]]) and its activities on queue gateway[.NAME]",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMode(cmd.Context(), "gateway", f, gatewayName, opts)
		},
	}
	gw.Flags().StringVar(&gatewayName, "name", "", "the gateway's name (one of [[gateways]]; none for [gateway])")
	version := &cobra.Command{
		Use:   "version",
		Short: "print this worker's version, commit and Go version (those of sparklane_build_info)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "sparklane %s (commit %s, %s, %s/%s)\n", buildinfo.Version, buildinfo.BuildCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
	root.AddCommand(control, node, dev, gw, version)
	return root
}

// runMode loads the config, dials one client and runs mode until ctx ends.
func runMode(ctx context.Context, mode string, f cliFlags, nodeName string, opts Options) error {
	if f.logMode == "" {
		f.logMode = "json"
		if mode == "dev" {
			f.logMode = "console"
		}
	}
	log, err := logging.New(f.logMode, f.level)
	if err != nil {
		return err
	}
	defer log.Sync()
	cfg, err := config.Load(f.cfgPath)
	if err != nil {
		return err
	}
	switch mode {
	case "dev":
		return RunDev(ctx, cfg, log, opts)
	case "gateway":
		return RunGateway(ctx, cfg, log, nodeName)
	}
	m, _ := ServeMetrics(ctx, cfg, log)
	env, err := Connect(ctx, cfg, log, ConnectOptions{NoEmbedded: true, Metrics: m, Seams: opts.Seams})
	if err != nil {
		return err
	}
	defer env.Close()
	if mode == "control" {
		return RunControl(ctx, env)
	}
	return RunNode(ctx, env, nodeName)
}

// reexec replaces this process with the same program and arguments (the
// control service reloading its config: same pid, so systemd and the
// starters' lock see one service). It returns only when the exec fails.
func reexec(errw io.Writer) int {
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, os.Environ())
	}
	fmt.Fprintln(errw, "worker: reload: start again:", err)
	return 1
}
