package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fleet"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/pki"
)

// fleetOpts are the flags the fleet subcommands share.
type fleetOpts struct {
	binary     string
	wait       time.Duration
	supervisor bool
	root       string
	timeout    time.Duration
	// from are the releases given with --from (tarballs, unpacked
	// releases, directories of tarballs).
	from []string
	// built caches the worker built per GOARCH in this command.
	built map[string]string
	// releases finds the workers of a release (nil: none given and this
	// starter runs from none; resolved once by releaseSet).
	releases     *fleet.Releases
	releasesDone bool
}

func (o *fleetOpts) engine() *fleet.Engine {
	e := &fleet.Engine{}
	if o.supervisor {
		e.Manager = fleet.ManagerSupervisor
	}
	if o.root != "" {
		l := fleet.DefaultLayout()
		for _, p := range []*string{&l.LibDir, &l.ConfDir, &l.RunDir, &l.UnitDir, &l.StateDir} {
			*p = filepath.Join(o.root, *p)
		}
		e.Layout = l
	}
	return e
}

func (a *App) fleetCmd() *cobra.Command {
	o := &fleetOpts{built: map[string]string{}}
	cmd := &cobra.Command{
		Use:   "fleet install|status|upgrade|uninstall [NODE...]",
		Short: "install, inspect, upgrade and remove the node services (worker node --node NAME) on remote nodes over SSH",
		Long: "Puts this control host's worker binary on each remote node (ssh = \"user@host:port\") at\n" +
			"/usr/local/lib/sparklane/worker, writes the node's /etc/sparklane/sparklane.toml (Temporal at the node's\n" +
			"127.0.0.1:PORT, where the control service's SSH tunnel ends) and runs it as the systemd unit\n" +
			"sparklane-node.service — or, on a host without systemd, under a small sh supervisor. Nodes with an empty\n" +
			"ssh are served by the control service itself. Host keys are always checked against known_hosts.\n" +
			"The worker reads the optional /etc/sparklane/node.env (KEY=VALUE lines; never written here) at each\n" +
			"start: where secrets named by a recipe's [env_from] as env:NAME live.",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.binary, "worker-binary", "", "the worker binary to install on every node (default: the worker of the release for each node's architecture, see --from; else build ./worker of this source tree into STATE_DIR/bin)")
	pf.StringArrayVar(&o.from, "from", nil, "a release to take each node's worker from, checked against its SHA256SUMS: a sparklane-VERSION-linux-ARCH.tar.gz (its SHA256SUMS beside it), its unpacked directory, or a directory of such tarballs; repeatable, one per node architecture (default: the release this starter runs from, and the tarballs beside its directory)")
	pf.DurationVar(&o.timeout, "ssh-timeout", node.DefaultTimeout, "bound on each SSH dial")
	pf.BoolVar(&o.supervisor, "supervisor", false, "run the worker under the sh supervisor even where systemd runs (test fleets)")
	pf.StringVar(&o.root, "root", "", "prefix every install path on the node with this directory (tests against this machine)")
	_ = pf.MarkHidden("root")

	install := &cobra.Command{
		Use:   "install [NODE...]",
		Short: "install or update the node service on remote nodes and wait until each polls node.NAME (idempotent)",
		RunE:  a.withNodes(o, a.fleetInstall),
	}
	install.Flags().DurationVar(&o.wait, "wait", 60*time.Second, "how long to wait for each node's worker to poll node.NAME (0: do not wait)")
	upgrade := &cobra.Command{
		Use:   "upgrade [NODE...]",
		Short: "rolling upgrade: one node at a time, upload the new binary, restart, wait for its poller before the next",
		RunE:  a.withNodes(o, a.fleetUpgrade),
	}
	upgrade.Flags().DurationVar(&o.wait, "wait", 60*time.Second, "how long to wait for each node's worker to poll before the next node (0: do not wait)")
	status := &cobra.Command{
		Use:   "status [NODE...]",
		Short: "per node: service state, worker build vs the control's, running since, last poll seen by the server",
		RunE:  a.withNodes(o, a.fleetStatus),
	}
	uninstall := &cobra.Command{
		Use:   "uninstall [NODE...]",
		Short: "stop the node service and remove what install added (staged data is left alone)",
		RunE:  a.withNodes(o, a.fleetUninstall),
	}
	cmd.AddCommand(install, status, upgrade, uninstall, a.unitsCmd())
	return cmd
}

// nodesBody is the body of a fleet subcommand: its flags and the remote
// nodes it works on.
type nodesBody func(ctx context.Context, cfg *config.Config, o *fleetOpts, nodes []config.Node) error

// withNodes is the preamble of the fleet subcommands: the config and the
// remote nodes the arguments name (fleetNodes).
func (a *App) withNodes(o *fleetOpts, b nodesBody) runE {
	return a.withConfig(func(ctx context.Context, req *request) error {
		nodes, err := a.fleetNodes(req.cfg, req.args)
		if err != nil {
			return err
		}
		return b(ctx, req.cfg, o, nodes)
	})
}

// fleetNodes are the remote nodes named in args (all remote nodes when
// none), with a line for each local node saying why it is skipped.
func (a *App) fleetNodes(cfg *config.Config, args []string) ([]config.Node, error) {
	var out []config.Node
	if len(args) == 0 {
		for _, n := range cfg.Nodes {
			if n.SSH == "" {
				if !a.JSON {
					fmt.Fprintf(a.Out, "%s: local (empty ssh): its worker runs inside the control service; nothing to install\n", n.Name)
				}
				continue
			}
			out = append(out, n)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%s has no remote node (a [[nodes]] entry with ssh = \"user@host:port\"): nothing to do", cfg.File)
		}
		return out, nil
	}
	for _, name := range args {
		n := cfg.Node(name)
		if n == nil {
			return nil, fmt.Errorf("node %q is not in %s (nodes: %s)", name, cfg.File, strings.Join(allNodes(cfg), ", "))
		}
		if n.SSH == "" {
			return nil, fmt.Errorf("node %s has no ssh in %s: its worker runs inside the control service on this machine, not as an installed service", name, cfg.File)
		}
		out = append(out, *n)
	}
	return out, nil
}

// dialNode opens the SSH connection to n (host key checked).
func (o *fleetOpts) dialNode(ctx context.Context, cfg *config.Config, n config.Node) (*fleet.SSHHost, error) {
	t, err := node.ParseSSH(n.SSH)
	if err != nil {
		return nil, &fleet.StepError{Node: n.Name, Step: "read its ssh", Err: err, Hint: "fix nodes." + n.Name + ".ssh in " + cfg.File}
	}
	t.KnownHosts, t.Identity = n.KnownHosts, n.Identity
	return fleet.DialHost(ctx, n.Name, t, o.timeout)
}

// onNode dials n (dialNode), runs f on it and hangs up.
func (o *fleetOpts) onNode(ctx context.Context, cfg *config.Config, n config.Node, f func(h *fleet.SSHHost) error) error {
	h, err := o.dialNode(ctx, cfg, n)
	if err != nil {
		return err
	}
	defer h.Close()
	return f(h)
}

// engineLayout is where eng installs on a node (the default layout unless
// --root moved it).
func engineLayout(eng *fleet.Engine) fleet.Layout {
	if eng.Layout == (fleet.Layout{}) {
		return fleet.DefaultLayout()
	}
	return eng.Layout
}

// releaseSet is where the workers of a release are: the --from sources,
// else the unpacked release this starter runs from and the directory it
// sits in when that holds the tarballs' SHA256SUMS; nil when there is no
// release (the worker is built from the source tree).
func (o *fleetOpts) releaseSet(cfg *config.Config) *fleet.Releases {
	if o.releasesDone {
		return o.releases
	}
	o.releasesDone = true
	src := o.from
	if len(src) == 0 {
		if self := selfRelease(); self != "" {
			src = append(src, self)
			if _, err := os.Stat(filepath.Join(filepath.Dir(self), fleet.ReleaseSums)); err == nil {
				src = append(src, filepath.Dir(self))
			}
		}
	}
	if len(src) > 0 {
		o.releases = &fleet.Releases{Sources: src, Cache: filepath.Join(cfg.StateDir, "releases")}
	}
	return o.releases
}

// workerBinary is the worker to install on a node of architecture arch
// (`uname -m`): --worker-binary, the worker of the release for arch (see
// releaseSet), or ./worker of this source tree built once per
// architecture into STATE_DIR/bin.
func (a *App) workerBinary(ctx context.Context, cfg *config.Config, o *fleetOpts, arch string) (string, error) {
	if o.binary != "" {
		return o.binary, nil
	}
	goarch := fleet.GoArch(arch)
	if goarch == "" {
		return "", fmt.Errorf("the node's architecture %q is not one sparklane builds for (amd64, arm64): pass --worker-binary", arch)
	}
	if p, ok := o.built[goarch]; ok {
		return p, nil
	}
	if rs := o.releaseSet(cfg); rs != nil {
		r, err := rs.Worker(goarch)
		if err != nil {
			return "", fmt.Errorf("the node is %s (linux/%s): %w", arch, goarch, err)
		}
		if !a.JSON {
			fmt.Fprintf(a.Err, "the worker for linux/%s: release %s (commit %s) in %s, sha256 checked\n", goarch, r.Version, short(r.Commit), r.Dir)
		}
		o.built[goarch] = r.Worker()
		return r.Worker(), nil
	}
	src, err := sourceTree()
	if err != nil {
		return "", err
	}
	out := builtWorker(cfg, goarch)
	var env []string
	if goarch != runtime.GOARCH {
		env = []string{"GOOS=linux", "GOARCH=" + goarch, "CGO_ENABLED=0"}
	}
	if err := a.goBuildWorker(ctx, src, out, env, "the worker for linux/"+goarch); err != nil {
		return "", err
	}
	o.built[goarch] = out
	return out, nil
}

// pollerSource asks the Temporal server which workers poll node.NAME's
// activity queue.
func (a *App) pollerSource(ctx context.Context) (fleet.PollerSource, error) {
	env, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, name string) ([]fleet.Poller, error) {
		resp, err := env.Client.DescribeTaskQueue(ctx, contract.NodeQueue(name), enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		if err != nil {
			return nil, fmt.Errorf("describe task queue %s: %w", contract.NodeQueue(name), err)
		}
		var out []fleet.Poller
		for _, p := range resp.GetPollers() {
			fp := fleet.Poller{Identity: p.GetIdentity()}
			if p.GetLastAccessTime() != nil {
				fp.LastAccess = p.GetLastAccessTime().AsTime()
			}
			out = append(out, fp)
		}
		return out, nil
	}, nil
}

// fleetInstallReport is one node's line of install or upgrade.
type fleetInstallReport struct {
	fleet.InstallResult
	// Poller is the worker seen polling node.NAME afterwards.
	Poller string `json:"poller,omitempty"`
	// PollWait is how long it took to see it.
	PollWait time.Duration `json:"poll_wait,omitempty"`
	// Error says what failed on this node, and what to do.
	Error string `json:"error,omitempty"`
}

// fleetInstall installs the node service on nodes, going on to the next
// node after a failure and exiting 1 at the end.
func (a *App) fleetInstall(ctx context.Context, cfg *config.Config, o *fleetOpts, nodes []config.Node) error {
	return a.installNodes(ctx, cfg, o, nodes, false)
}

// fleetUpgrade upgrades the node service node by node, stopping at the
// first failure, so a bad binary takes down one node.
func (a *App) fleetUpgrade(ctx context.Context, cfg *config.Config, o *fleetOpts, nodes []config.Node) error {
	return a.installNodes(ctx, cfg, o, nodes, true)
}

// installNodes installs (or, rolling, upgrades) the node service on nodes.
func (a *App) installNodes(ctx context.Context, cfg *config.Config, o *fleetOpts, nodes []config.Node, upgrade bool) error {
	eng := o.engine()
	nodeCfg, notices, err := fleet.NodeConfig(cfg, engineLayout(eng).StateDir)
	if err != nil {
		return err
	}
	for _, n := range notices {
		fmt.Fprintln(a.Err, "notice:", n)
	}
	var pollers fleet.PollerSource
	if o.wait > 0 {
		if pollers, err = a.pollerSource(ctx); err != nil {
			return fmt.Errorf("connect to Temporal to wait for the node workers (or pass --wait 0): %w", err)
		}
	}
	var reports []fleetInstallReport
	var errs []error
	for _, n := range nodes {
		rep, err := a.fleetInstallNode(ctx, cfg, o, eng, n, nodeCfg, pollers, upgrade)
		if err != nil {
			rep.Error = err.Error()
			errs = append(errs, err)
		}
		reports = append(reports, rep)
		if !a.JSON {
			printInstall(a, rep)
		}
		if err != nil && upgrade {
			if !a.JSON {
				fmt.Fprintf(a.Out, "upgrade stopped at %s: the nodes after it were not touched\n", n.Name)
			}
			break
		}
	}
	return a.fleetEnd(reports, errs)
}

// fleetEnd ends install, upgrade and uninstall, which print their text
// node by node: the rows as the JSON document under --json, and exit 1
// with every node's error.
func (a *App) fleetEnd(rows any, errs []error) error {
	if a.JSON {
		if err := a.printJSON(rows); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return exitCode(1, errors.Join(errs...))
	}
	return nil
}

func (a *App) fleetInstallNode(ctx context.Context, cfg *config.Config, o *fleetOpts, eng *fleet.Engine, n config.Node, nodeCfg []byte, pollers fleet.PollerSource, upgrade bool) (fleetInstallReport, error) {
	rep := fleetInstallReport{InstallResult: fleet.InstallResult{Node: n.Name}}
	h, err := o.dialNode(ctx, cfg, n)
	if err != nil {
		return rep, err
	}
	defer h.Close()
	in, err := eng.Inspect(ctx, h)
	if err != nil {
		return rep, err
	}
	if upgrade && !in.Installed {
		return rep, &fleet.StepError{Node: n.Name, Step: "upgrade", Err: errors.New("the node service is not installed"), Hint: "install it first: starter fleet install " + n.Name}
	}
	bin, err := a.workerBinary(ctx, cfg, o, in.Arch)
	if err != nil {
		return rep, &fleet.StepError{Node: n.Name, Step: "find the worker binary", Err: err}
	}
	// The pollers before anything changes: a restarted worker is one not
	// among them.
	var before []fleet.Poller
	if pollers != nil {
		before, _ = pollers(ctx, n.Name)
	}
	creds, err := fleetCredentials(cfg, eng, n)
	if err != nil {
		return rep, &fleet.StepError{Node: n.Name, Step: "issue the fleet identity", Err: err, Hint: "check that " + pki.FleetDir(cfg.StateDir) + " is writable (starter control certs issues the same files)"}
	}
	res, err := eng.Install(ctx, h, fleet.Spec{Node: n.Name, Binary: bin, Config: nodeCfg, Credentials: creds})
	rep.InstallResult = res
	if err != nil {
		return rep, err
	}
	if pollers != nil {
		t0 := time.Now()
		p, err := fleet.WaitPoller(ctx, pollers, n.Name, fleet.NewPoller(before, res.Run == fleet.Running, time.Now), o.wait, 500*time.Millisecond)
		rep.PollWait = time.Since(t0)
		if err != nil {
			return rep, err
		}
		rep.Poller = p.Identity
	}
	return rep, nil
}

func printInstall(a *App, r fleetInstallReport) {
	if r.Binary == "" {
		fmt.Fprintf(a.Out, "%s: FAILED: %s\n", r.Node, r.Error)
		return
	}
	fmt.Fprintf(a.Out, "%s: binary %s (build %s), config %s, service %s (%s), %s", r.Node, r.Binary, short(r.BuildID), r.Config, r.Service, r.Manager, r.Run)
	if r.Credentials != "" {
		fmt.Fprintf(a.Out, ", fleet identity %s", r.Credentials)
	}
	if r.Poller != "" {
		fmt.Fprintf(a.Out, ", polling node.%s (%s, after %s)", r.Node, r.Poller, r.PollWait.Round(100*time.Millisecond))
	}
	fmt.Fprintf(a.Out, " in %s\n", r.Took.Round(10*time.Millisecond))
	for _, n := range r.Notices {
		fmt.Fprintf(a.Out, "  notice: %s\n", n)
	}
	if r.Error != "" {
		fmt.Fprintf(a.Out, "  FAILED: %s\n", r.Error)
	}
}

// fleetStatusRow is one node in `fleet status`.
type fleetStatusRow struct {
	fleet.NodeStatus
	// ControlBuildID is the sha256 of the worker this control host would
	// install on the node ("" when none is built: pass --worker-binary).
	ControlBuildID string `json:"control_build_id,omitempty"`
	// Mismatch: the node runs another build than the control's.
	Mismatch bool `json:"mismatch"`
	// LastPoll is the latest poll of node.NAME the server saw.
	LastPoll time.Time `json:"last_poll,omitempty"`
	// Error says why the node could not be asked.
	Error string `json:"error,omitempty"`
}

// controlBuildID is the build the control would install on arch: of
// --worker-binary, or of the worker last built into STATE_DIR/bin (status
// never builds).
func controlBuildID(cfg *config.Config, o *fleetOpts, arch string) string {
	p := o.binary
	if p == "" {
		p = builtWorker(cfg, fleet.GoArch(arch))
		if rs := o.releaseSet(cfg); rs != nil {
			r, err := rs.Worker(fleet.GoArch(arch))
			if err != nil {
				return ""
			}
			p = r.Worker()
		}
	}
	id, err := fleet.BuildID(p)
	if err != nil {
		return ""
	}
	return id
}

// fleetStatus reports each node's service, its build against the
// control's and its last poll; exit 1 when a node could not be asked.
func (a *App) fleetStatus(ctx context.Context, cfg *config.Config, o *fleetOpts, nodes []config.Node) error {
	eng := o.engine()
	pollers, perr := a.pollerSource(ctx)
	var rows []fleetStatusRow
	failed := false
	for _, n := range nodes {
		row := fleetStatusRow{NodeStatus: fleet.NodeStatus{Node: n.Name, State: "unknown"}}
		err := o.onNode(ctx, cfg, n, func(h *fleet.SSHHost) error {
			in, err := eng.Inspect(ctx, h)
			if err != nil {
				return err
			}
			row.ControlBuildID = controlBuildID(cfg, o, in.Arch)
			row.NodeStatus, err = eng.Status(ctx, h)
			return err
		})
		if err != nil {
			row.Error, failed = err.Error(), true
		}
		row.Mismatch = row.Installed && row.ControlBuildID != "" && row.BuildID != row.ControlBuildID
		if pollers != nil {
			ps, err := pollers(ctx, n.Name)
			if err != nil && row.Error == "" {
				row.Error = err.Error()
			}
			for _, p := range ps {
				if p.LastAccess.After(row.LastPoll) {
					row.LastPoll = p.LastAccess
				}
			}
		}
		rows = append(rows, row)
	}
	if a.JSON {
		if err := a.printJSON(rows); err != nil {
			return err
		}
	} else {
		out := [][]string{}
		for _, r := range rows {
			svc := r.State
			if r.Manager != "" {
				svc += " (" + r.Manager + ")"
			}
			since, poll, mm := "-", "never", ""
			if !r.Since.IsZero() {
				since = r.Since.Local().Format(time.RFC3339)
			}
			if !r.LastPoll.IsZero() {
				poll = time.Since(r.LastPoll).Round(time.Second).String() + " ago"
			} else if pollers == nil {
				poll = "unknown"
			}
			ctl := short(r.ControlBuildID)
			if ctl == "" {
				ctl = "none built"
			}
			if r.Mismatch {
				mm = "MISMATCH"
			}
			out = append(out, []string{r.Node, svc, orDash(short(r.BuildID)), ctl, since, poll, mm})
		}
		table(a.Out, []string{"NODE", "SERVICE", "BUILD", "CONTROL BUILD", "RUNNING SINCE", "LAST POLL", ""}, out)
		for _, r := range rows {
			if r.Error != "" {
				fmt.Fprintf(a.Out, "%s: %s\n", r.Node, r.Error)
			}
			if r.Mismatch {
				fmt.Fprintf(a.Out, "%s runs build %s, not the control's %s: starter fleet upgrade %s\n", r.Node, short(r.BuildID), short(r.ControlBuildID), r.Node)
			}
		}
		if perr != nil {
			fmt.Fprintf(a.Out, "last poll unknown: %v\n", perr)
		}
	}
	if failed {
		return exitCode(1, nil)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fleetUninstall removes the node service from nodes, going on after a
// failure and exiting 1 at the end.
func (a *App) fleetUninstall(ctx context.Context, cfg *config.Config, o *fleetOpts, nodes []config.Node) error {
	eng := o.engine()
	type row struct {
		fleet.UninstallResult
		Error string `json:"error,omitempty"`
	}
	var rows []row
	var errs []error
	for _, n := range nodes {
		r := row{UninstallResult: fleet.UninstallResult{Node: n.Name}}
		err := o.onNode(ctx, cfg, n, func(h *fleet.SSHHost) (err error) {
			r.UninstallResult, err = eng.Uninstall(ctx, h)
			return err
		})
		if err != nil {
			r.Error = err.Error()
			errs = append(errs, err)
		}
		rows = append(rows, r)
		if a.JSON {
			continue
		}
		switch {
		case err != nil:
			fmt.Fprintf(a.Out, "%s: FAILED: %v\n", n.Name, err)
		case len(r.Removed) == 0:
			fmt.Fprintf(a.Out, "%s: nothing installed\n", n.Name)
		default:
			stopped := ""
			if r.Stopped {
				stopped = "stopped the service; "
			}
			fmt.Fprintf(a.Out, "%s: %sremoved %s (staged data left alone)\n", n.Name, stopped, strings.Join(r.Removed, ", "))
		}
	}
	return a.fleetEnd(rows, errs)
}

// fleetCredentials are the node's fleet identity (the fleet CA's
// certificate and its relay-NODE pair, issued from the CA under the
// control's STATE_DIR/pki when absent) for Install to put under the node's
// state_dir: the staging relay and image transfers between nodes both use
// it, so every node with an address gets one, whatever `relay` says.
func fleetCredentials(cfg *config.Config, eng *fleet.Engine, n config.Node) ([]fleet.File, error) {
	if n.Address == "" {
		return nil, nil
	}
	dir := pki.FleetDir(cfg.StateDir)
	ids, err := pki.IssueFleetIdentities(dir, config.FleetHosts([]config.Node{n}))
	if err != nil {
		return nil, err
	}
	id, ok := ids[n.Name]
	if !ok {
		return nil, fmt.Errorf("no fleet identity issued for node %s", n.Name)
	}
	dst := fleet.FleetIdentityFiles(engineLayout(eng).StateDir, n.Name)
	var out []fleet.File
	for i, src := range []string{filepath.Join(dir, "ca.pem"), id.Cert, id.Key} {
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		mode := "0644"
		if i == 2 {
			mode = "0600"
		}
		out = append(out, fleet.File{Path: dst[i], Mode: mode, Data: b})
	}
	return out, nil
}
