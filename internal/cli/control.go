package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/pki"
)

// serviceArgs is the command line of the control service for the config
// at file: the worker program's `dev` mode.
func serviceArgs(file, level string) []string {
	return []string{"dev", "--config", file, "--log-level", level}
}

// controlExe is the program run as the control service: the worker (`worker
// dev`), which embeds the Temporal server; the starter, only its client,
// does not link the server in and starts in a fraction of the time. In
// order: a test's or packager's choice (App.ControlExe,
// $SPARKLANE_CONTROL_EXE); the worker of the release this starter runs
// from (scripts/release); inside the sparklane source tree, its ./worker
// built into STATE_DIR/bin/worker (where `fleet install` builds it too; go
// build changes nothing when it is current), so `go run ./starter` runs the
// code beside it; else the worker installed beside this program.
func (a *App) controlExe(ctx context.Context, cfg *config.Config) (string, error) {
	if a.ControlExe != "" {
		return a.ControlExe, nil
	}
	if exe := os.Getenv("SPARKLANE_CONTROL_EXE"); exe != "" {
		return exe, nil
	}
	if rel := selfRelease(); rel != "" {
		// A release's starter runs the worker it shipped with, wherever
		// it is run from.
		return filepath.Join(rel, "worker"), nil
	}
	if src, err := sourceTree(); err == nil {
		out := builtWorker(cfg, runtime.GOARCH)
		if err := a.goBuildWorker(ctx, src, out, nil, "the control service (worker dev)"); err != nil {
			return "", err
		}
		return out, nil
	}
	self, err := executable()
	if err != nil {
		return "", fmt.Errorf("find the control service's program: %w", err)
	}
	beside := filepath.Join(filepath.Dir(self), "worker")
	if st, err := os.Stat(beside); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
		return beside, nil
	}
	return "", fmt.Errorf("no control service program: install the worker beside %s as %s (go build -o %s ./worker in the sparklane source), run this inside the source tree, or set SPARKLANE_CONTROL_EXE", self, beside, beside)
}

// serviceProgram is what runs as cfg's control service: its config file's
// absolute path and its program (controlExe).
func (a *App) serviceProgram(ctx context.Context, cfg *config.Config) (file, exe string, err error) {
	if file, err = filepath.Abs(cfg.File); err != nil {
		return "", "", err
	}
	exe, err = a.controlExe(ctx, cfg)
	return file, exe, err
}

// executable is this program's path (a test sets another).
var executable = os.Executable

// connectService is the connection of every command: in embedded mode the
// state_dir's control service (started in the background when none runs),
// otherwise the external cluster. The starter itself never hosts a server
// or a worker, so killing it at any moment loses nothing.
func (a *App) connectService(ctx context.Context, cfg *config.Config) (*control.Conn, error) {
	if cfg.Temporal.Address != "" {
		return control.Dial(ctx, cfg, a.logger(), "", "")
	}
	file, err := filepath.Abs(cfg.File)
	if err != nil {
		return nil, err
	}
	owner, started, err := control.Start(ctx, control.StartOptions{
		Resolve: func() (string, error) { return a.controlExe(ctx, cfg) },
		Args:    serviceArgs(file, "info"), StateDir: cfg.StateDir,
	})
	if err != nil {
		return nil, fmt.Errorf("control service for state_dir %s: %w", cfg.StateDir, err)
	}
	if started {
		fmt.Fprintf(a.Err, "started the control service in the background (pid %d, log %s); it keeps running runs when this command ends — 'starter control stop' stops it\n", owner.PID, control.LogPath(cfg.StateDir))
	} else if owner.ConfigHash != "" && owner.ConfigHash != control.HashFile(cfg.File) {
		fmt.Fprintf(a.Err, "warning: the control service (pid %d, since %s) runs on %s as it was before it changed: it reloads it by itself once no run is under way (a file that does not load stays unapplied; its log %s says why)\n",
			owner.PID, owner.Since.Format(time.RFC3339), owner.Config, control.LogPath(cfg.StateDir))
	}
	a.service = owner
	return control.Dial(ctx, cfg, a.logger(), owner.Frontend, owner.UI)
}

// connectRunning is connect for commands that must start nothing (a dry
// run): the external cluster of temporal.address, or the state_dir's
// control service only if it already runs. When none runs it neither
// starts one nor builds its program, and why says what could not be
// checked for want of it.
func (a *App) connectRunning(ctx context.Context, cfg *config.Config) (env *control.Conn, why string, err error) {
	if a.env != nil || cfg.Temporal.Address != "" {
		env, err = a.connect(ctx)
		return env, "", err
	}
	owner, ok := control.Find(cfg.StateDir)
	if !ok || owner.Frontend == "" {
		return nil, fmt.Sprintf("no control service runs for state_dir %s, and a dry run starts none: node reachability, free space and the lanes running on the nodes were not checked (start it with 'starter control start' and run the dry run again to check them)", cfg.StateDir), nil
	}
	env, err = control.Dial(ctx, cfg, a.logger(), owner.Frontend, owner.UI)
	if err != nil {
		return nil, "", err
	}
	a.env, a.service = env, owner
	return env, "", nil
}

// serviceCheckEvery is how often a starter following a run checks that
// the control service it talks to still holds its lock: a dead service is
// noticed within seconds, not after the client's RPC deadline.
const serviceCheckEvery = time.Second

// serviceGone says the control service a.env reaches (embedded mode) no
// longer runs: its pid, how it ended when this starter started it, the
// last lines of STATE_DIR/control.log, and the command that resumes
// following run id. nil while it runs, or when there is none to watch (an
// external cluster).
func (a *App) serviceGone(id string) error {
	if a.service.PID == 0 || a.cfg == nil || a.cfg.Temporal.Address != "" {
		return nil
	}
	state := a.cfg.StateDir
	if owner, ok := control.Find(state); ok && owner.PID == a.service.PID {
		return nil
	}
	how := "how it ended is not known here (another starter or a supervisor started it)"
	if st, ok := control.ExitStatus(a.service.PID, 2*time.Second); ok {
		how = "it ended with " + st
	}
	resume := "starter attach " + id
	if a.ConfigPath != "" {
		resume = "starter --config " + a.ConfigPath + " attach " + id
	}
	return exitCode(1, fmt.Errorf("the control service (pid %d) of state_dir %s stopped while this starter followed %s: %s; its log %s ends with:\n%s\n"+
		"%s is kept in the service's store and goes on when a control service runs again: resume following it with: %s (it starts the service)",
		a.service.PID, state, id, how, control.LogPath(state), control.LogTail(state, 15), id, resume))
}

func (a *App) controlCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "control run|start|stop|status",
		Short: "the control service: embedded Temporal server + web UI, control worker, this machine's node workers",
		Long: "In embedded mode (no temporal.address) every starter command talks to the control service of the\n" +
			"config's state_dir, and starts it in the background when none runs. Runs live there, not in the\n" +
			"starter: kill a starter at any moment and 'starter attach' follows the run again.",
	}
	var wait time.Duration
	run := &cobra.Command{
		Use:   "run",
		Short: "run the control service in the foreground (what 'start' runs in the background: the worker's dev mode, which this command becomes)",
		RunE: a.withConfig(func(ctx context.Context, req *request) error {
			file, exe, err := a.serviceProgram(ctx, req.cfg)
			if err != nil {
				return err
			}
			// This process becomes the service (same pid, so a
			// supervisor's SIGTERM reaches it): it finishes its current
			// calls and stops the server on Ctrl-C or SIGTERM.
			argv := append([]string{exe}, serviceArgs(file, a.serviceLogLevel())...)
			if err := syscall.Exec(exe, argv, os.Environ()); err != nil {
				return fmt.Errorf("run the control service %s: %w", exe, err)
			}
			return nil
		}),
	}
	start := &cobra.Command{
		Use:   "start",
		Short: "start the control service in the background unless it runs",
		RunE: a.withClient(func(_ context.Context, req *request) error {
			owner, _ := control.Find(req.cfg.StateDir)
			return a.printOwner(req.cfg, owner, true, req.env.UIURL)
		}),
	}
	var gateways bool
	stop := &cobra.Command{
		Use:   "stop [--gateways]",
		Short: "stop the control service (runs under way pause and resume when it starts again); its gateways keep serving unless --gateways",
		RunE: a.withConfig(func(ctx context.Context, req *request) error {
			owner, ran, err := control.Stop(ctx, req.cfg.StateDir, wait)
			if err != nil {
				return err
			}
			var stopped []control.Owner
			if gateways {
				// After the control service: it starts a gateway that died.
				for _, g := range req.cfg.Gateways() {
					gw, ok, err := control.StopFile(ctx, control.GatewayLockPath(req.cfg.StateDir, g.Name), wait)
					if err != nil {
						return fmt.Errorf("gateway %s: %w", gatewayLabel(g.Name), err)
					}
					if ok {
						stopped = append(stopped, gw)
					}
				}
			}
			return a.output(map[string]any{"stopped": ran, "owner": owner, "gateways": stopped}, func() {
				if !ran {
					fmt.Fprintf(a.Out, "no control service runs for state_dir %s\n", req.cfg.StateDir)
				} else {
					fmt.Fprintf(a.Out, "stopped the control service (pid %d)\n", owner.PID)
				}
				for _, g := range stopped {
					fmt.Fprintf(a.Out, "stopped the gateway at %s (pid %d)\n", g.Listen, g.PID)
				}
				if !gateways && len(req.cfg.Gateways()) > 0 {
					fmt.Fprintln(a.Out, "the gateways keep serving from their tables (control stop --gateways stops them too)")
				}
			})
		}),
	}
	stop.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for a clean stop before SIGKILL")
	stop.Flags().BoolVar(&gateways, "gateways", false, "stop the config's gateways too (else they keep serving clients from their tables)")
	status := &cobra.Command{
		Use:   "status",
		Short: "is the control service running, and where",
		RunE: a.withConfig(func(_ context.Context, req *request) error {
			owner, ok := control.Find(req.cfg.StateDir)
			if err := a.printOwner(req.cfg, owner, ok, owner.UI); err != nil {
				return err
			}
			if !ok {
				return exitCode(1, nil)
			}
			return nil
		}),
	}
	cmd.AddCommand(run, start, stop, status, a.certsCmd(), a.controlInstallCmd())
	return cmd
}

// controlInstallCmd installs the control service as a systemd unit.
func (a *App) controlInstallCmd() *cobra.Command {
	var unitDir, binDir string
	cmd := &cobra.Command{
		Use:   "install [--unit-dir DIR] [--bin-dir DIR]",
		Short: "install the control service on this host as the systemd unit sparklane-control (idempotent)",
		RunE: a.withConfig(func(ctx context.Context, req *request) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			file, service, err := a.serviceProgram(ctx, req.cfg)
			if err != nil {
				return err
			}
			// Stable copies: `go run` binaries vanish when it ends. The
			// unit runs the worker (the control service's program); the
			// starter beside it finds it there.
			bin := filepath.Join(binDir, "starter")
			worker := filepath.Join(binDir, "worker")
			changed := []string{}
			for _, c := range [][2]string{{exe, bin}, {service, worker}} {
				if same, err := sameFile(c[0], c[1]); err != nil || !same {
					if err := copyExecutable(c[0], c[1]); err != nil {
						return fmt.Errorf("install %s: %w", c[1], err)
					}
					changed = append(changed, c[1])
				}
			}
			gws := req.cfg.Gateways()
			units := map[string]string{"sparklane-control.service": control.Unit(worker, file, len(gws) > 0)}
			names := []string{"sparklane-control.service"}
			for _, g := range gws {
				// Each gateway its own unit: a restart of the control
				// service leaves it serving.
				units[control.GatewayUnitName(g.Name)] = control.GatewayUnit(worker, file, g.Name)
				names = append(names, control.GatewayUnitName(g.Name))
			}
			unit := filepath.Join(unitDir, "sparklane-control.service")
			// A new program restarts every unit; a changed unit itself.
			restart := names
			if len(changed) == 0 {
				restart = nil
			}
			for _, n := range names {
				wrote, err := writeUnit(filepath.Join(unitDir, n), units[n])
				if err != nil {
					return err
				}
				if wrote {
					changed = append(changed, filepath.Join(unitDir, n))
					if !slices.Contains(restart, n) {
						restart = append(restart, n)
					}
				}
			}
			if len(changed) == 0 {
				fmt.Fprintf(a.Out, "sparklane-control: unchanged (%s, %s)\n", bin, unit)
			} else {
				fmt.Fprintf(a.Out, "sparklane-control: wrote %s\n", strings.Join(changed, ", "))
			}
			if _, err := os.Stat("/run/systemd/system"); err != nil {
				fmt.Fprintf(a.Out, "this host does not run systemd: start the service with '%s control start --config %s' (or your supervisor running '%s dev --config %s')\n", bin, file, worker, file)
				return nil
			}
			steps := [][]string{{"daemon-reload"}, append([]string{"enable", "--now"}, names...)}
			if len(restart) > 0 {
				steps = append(steps, append([]string{"restart"}, restart...))
			}
			for _, args := range steps {
				if out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput(); err != nil {
					return fmt.Errorf("systemctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
				}
			}
			fmt.Fprintf(a.Out, "%s: enabled and running (journalctl -u %s)\n", strings.Join(names, ", "), strings.Join(names, " -u "))
			return nil
		}),
	}
	cmd.Flags().StringVar(&unitDir, "unit-dir", "/etc/systemd/system", "where the unit is written")
	cmd.Flags().StringVar(&binDir, "bin-dir", "/usr/local/lib/sparklane", "where this program and the control service's (the worker, which the unit runs) are copied")
	return cmd
}

// writeUnit writes a unit file unless it already says want; it reports
// whether it wrote.
func writeUnit(path, want string) (bool, error) {
	if have, err := os.ReadFile(path); err == nil && string(have) == want {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}

func sameFile(a, b string) (bool, error) {
	x, err := os.ReadFile(a)
	if err != nil {
		return false, err
	}
	y, err := os.ReadFile(b)
	if err != nil {
		return false, err
	}
	return string(x) == string(y), nil
}

// copyExecutable writes src to dst through a temp name and a rename, so a
// running copy is never overwritten in place.
func copyExecutable(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(dst, b, 0o755)
}

// certsCmd issues the CA and certificates of the external cluster's mTLS
// profile (docker-compose.temporal.mtls.yml).
func (a *App) certsCmd() *cobra.Command {
	var dir string
	var hosts, clients []string
	cmd := &cobra.Command{
		Use:   "certs --host NAME_OR_IP... [--dir DIR] [--client NAME...]",
		Short: "issue the CA, frontend and client certificates for an external cluster's mTLS profile (kept when present)",
		RunE: a.withConfig(func(_ context.Context, req *request) error {
			cfg := req.cfg
			if dir == "" {
				dir = filepath.Join(cfg.StateDir, "pki")
			}
			ca, err := pki.LoadOrCreateCA(dir, "sparklane fleet CA")
			if err != nil {
				return err
			}
			out := map[string]pki.Files{}
			srv, err := ca.Server("frontend", append([]string{"temporal", "localhost", "127.0.0.1"}, hosts...))
			if err != nil {
				return err
			}
			out["frontend"] = srv
			names := append([]string{"control", "ui", "operator"}, clients...)
			for _, n := range cfg.Nodes {
				names = append(names, "node-"+n.Name)
			}
			for _, n := range names {
				f, err := ca.Client(n)
				if err != nil {
					return err
				}
				out[n] = f
			}
			// Staging relay identities (server and client, for the node's
			// address): relay-NAME for every node with an address.
			relayIDs, err := pki.IssueFleetIdentities(dir, config.FleetHosts(cfg.Nodes))
			if err != nil {
				return err
			}
			for n, f := range relayIDs {
				out[pki.FleetPeerPrefix+n] = f
			}
			return a.output(map[string]any{"ca": ca.File, "certs": out}, func() {
				fmt.Fprintf(a.Out, "CA %s\n", ca.File)
				for _, n := range sortedMapKeys(out) {
					fmt.Fprintf(a.Out, "  %-16s %s  %s\n", n, out[n].Cert, out[n].Key)
				}
				fmt.Fprintf(a.Out, "copy ca.pem and each node's node-NAME pair to that node; see docker-compose.temporal.mtls.yml\n")
				fmt.Fprintf(a.Out, "for the staging relay, starter fleet install puts ca.pem and the node's relay-NAME pair under STATE_DIR/pki on that node (copy them there by hand for a worker you run yourself)\n")
			})
		}),
	}
	cmd.Flags().StringVar(&dir, "dir", "", "where the CA and certificates live (default STATE_DIR/pki)")
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "a name or address the frontend answers at (repeatable; temporal, localhost and 127.0.0.1 are always in)")
	cmd.Flags().StringArrayVar(&clients, "client", nil, "an extra client identity (repeatable; control, ui, operator and node-NAME for every node are always issued)")
	return cmd
}

func (a *App) serviceLogLevel() string {
	if a.LogLevel == "" || a.LogLevel == "warn" {
		return "info"
	}
	return a.LogLevel
}

// printOwner says whether the control service of cfg's state_dir runs,
// and where (ui: its web UI, when known).
func (a *App) printOwner(cfg *config.Config, owner control.Owner, running bool, ui string) error {
	log := control.LogPath(cfg.StateDir)
	return a.output(map[string]any{"running": running, "state_dir": cfg.StateDir, "owner": owner, "log": log}, func() {
		if !running {
			fmt.Fprintf(a.Out, "no control service runs for state_dir %s (any starter command starts one)\n", cfg.StateDir)
			return
		}
		fmt.Fprintf(a.Out, "control service: pid %d since %s\n  Temporal: %s\n", owner.PID, owner.Since.Format(time.RFC3339), owner.Frontend)
		if ui != "" {
			fmt.Fprintf(a.Out, "  web UI:   %s\n", ui)
		}
		if owner.Metrics != "" {
			fmt.Fprintf(a.Out, "  metrics:  http://%s/metrics\n", owner.Metrics)
		}
		fmt.Fprintf(a.Out, "  config:   %s\n  nodes:    %v\n  log:      %s\n", owner.Config, owner.Nodes, log)
		for _, g := range cfg.Gateways() {
			fmt.Fprintf(a.Out, "  gateway %s: %s (%s)\n", gatewayLabel(g.Name), g.Listen, gatewayProcess(cfg, g.Name))
		}
	})
}

// attachCmd follows a run that another (perhaps killed) starter started.
func (a *App) attachCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:     "attach [WORKFLOW_ID] | --cluster C | --lane L",
		Aliases: []string{"follow"},
		Short:   "follow a run again (a cutover, stage, verify, serve, …) until it ends, and print its result",
		RunE: a.withRun(&f, func(ctx context.Context, env *control.Conn, id string, info *workflowpb.WorkflowExecutionInfo) error {
			run := env.Client.GetWorkflow(ctx, id, info.GetExecution().GetRunId())
			if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && !a.JSON {
				fmt.Fprintf(a.Out, "%s already ended (%s); its result:\n", id, statusName(info.GetStatus()))
			}
			switch info.GetType().GetName() {
			case "Cutover":
				var res contract.CutoverResult
				out, err := a.cutoverOutcome(&res, a.follow(ctx, run, &res))
				if out != nil && !a.JSON {
					printCutover(a, out)
				}
				return err
			case "Fetch":
				var res contract.FetchResult
				if err := runFailed(a.follow(ctx, run, &res)); err != nil {
					return err
				}
				node := config.FetchControl
				if len(res.Repos) > 0 {
					node = res.Repos[0].Node
				}
				return a.printFetchResult(node, res)
			case "Stage":
				var res contract.StageResult
				if err := runFailed(a.follow(ctx, run, &res)); err != nil {
					return err
				}
				return a.printStage(res)
			default:
				var res any
				if err := runFailed(a.follow(ctx, run, &res)); err != nil {
					return err
				}
				return a.printJSON(res)
			}
		}),
	}
	cmd.Flags().StringVar(&f.cluster, "cluster", "", "the cutover on this cluster")
	cmd.Flags().StringVar(&f.lane, "lane", "", "the cutover on this lane's cluster")
	return cmd
}

// findRun resolves the run a command names and describes its latest
// execution.
func (a *App) findRun(ctx context.Context, args []string, cluster, lane string) (*control.Conn, string, *workflowpb.WorkflowExecutionInfo, error) {
	id, err := a.runID(args, cluster, lane)
	if err != nil {
		return nil, "", nil, err
	}
	env, err := a.connect(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	d, err := env.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return nil, "", nil, exitCode(1, fmt.Errorf("no run %s: %w (list runs in the web UI or with 'temporal workflow list')", id, err))
	}
	return env, id, d.GetWorkflowExecutionInfo(), nil
}

// runID resolves a workflow ID from an argument, --cluster or --lane.
func (a *App) runID(args []string, cluster, lane string) (string, error) {
	switch {
	case len(args) == 1:
		return args[0], nil
	case cluster != "":
		return contract.CutoverID(cluster), nil
	case lane != "":
		_, r, _, err := a.lane(lane, nil)
		if err != nil {
			return "", err
		}
		return contract.CutoverID(r.Cluster), nil
	}
	return "", errors.New("name a workflow ID (e.g. stage/LANE, cutover/CLUSTER), --cluster or --lane")
}

// statusName is a workflow status as operators read it (Running, Completed…).
func statusName(s enumspb.WorkflowExecutionStatus) string {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return "Running"
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "Completed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return "Failed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "Canceled"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "Terminated"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return "ContinuedAsNew"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "TimedOut"
	}
	return s.String()
}
