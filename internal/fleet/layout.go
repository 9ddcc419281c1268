package fleet

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sparklane/sparklane/internal/control"
)

// Layout is where a node service's files go on the node. The defaults are
// the production paths; tests (whose "node" is this machine over loopback
// SSH) point every directory into a temp dir so nothing real is touched.
type Layout struct {
	// LibDir holds the worker binary and the fallback supervisor script
	// (default /usr/local/lib/sparklane).
	LibDir string `json:"lib_dir"`
	// ConfDir holds the node's sparklane.toml (default /etc/sparklane).
	ConfDir string `json:"conf_dir"`
	// RunDir holds the supervisor's pid files, stop file and log
	// (default /run/sparklane: gone at reboot, like the supervisor).
	RunDir string `json:"run_dir"`
	// UnitDir is where the systemd unit is written (default /etc/systemd/system).
	UnitDir string `json:"unit_dir"`
	// StateDir is the node config's state_dir (default /var/lib/sparklane).
	// Install never creates or removes it: staged data may live there.
	StateDir string `json:"state_dir"`
}

// DefaultLayout is the production layout on a node.
func DefaultLayout() Layout {
	return Layout{
		LibDir:   "/usr/local/lib/sparklane",
		ConfDir:  "/etc/sparklane",
		RunDir:   "/run/sparklane",
		UnitDir:  "/etc/systemd/system",
		StateDir: "/var/lib/sparklane",
	}
}

// UnitName is the systemd unit of the node service.
const UnitName = "sparklane-node.service"

// Binary is the worker binary's path on the node.
func (l Layout) Binary() string { return filepath.Join(l.LibDir, "worker") }

// Config is the node config's path on the node.
func (l Layout) Config() string { return filepath.Join(l.ConfDir, "sparklane.toml") }

// EnvFile is the node service's optional environment file (KEY=VALUE
// lines), read at every (re)start of the worker: where an operator puts
// the variables a recipe's [env_from] names as env:NAME (secrets stay on
// the node, out of workflow inputs). Install neither writes nor removes it.
func (l Layout) EnvFile() string { return filepath.Join(l.ConfDir, "node.env") }

// Supervisor is the fallback supervisor script's path (hosts without systemd).
func (l Layout) Supervisor() string { return filepath.Join(l.LibDir, "supervise") }

// Unit is the systemd unit file's path.
func (l Layout) Unit() string { return filepath.Join(l.UnitDir, UnitName) }

// PIDFile holds the supervisor's pid while it runs.
func (l Layout) PIDFile() string { return filepath.Join(l.RunDir, "node.pid") }

// WorkerPIDFile holds the pid of the worker the supervisor started last;
// its mtime is when that worker started.
func (l Layout) WorkerPIDFile() string { return filepath.Join(l.RunDir, "worker.pid") }

// StopFile, when present, tells the supervisor not to restart the worker.
func (l Layout) StopFile() string { return filepath.Join(l.RunDir, "stop") }

// LogFile is where the supervisor and its worker write (systemd hosts use
// the journal instead).
func (l Layout) LogFile() string { return filepath.Join(l.RunDir, "node.log") }

func (l Layout) check() error {
	for k, v := range map[string]string{"lib_dir": l.LibDir, "conf_dir": l.ConfDir, "run_dir": l.RunDir, "unit_dir": l.UnitDir, "state_dir": l.StateDir} {
		if !filepath.IsAbs(v) || filepath.Clean(v) == "/" {
			return fmt.Errorf("layout %s %q: must be an absolute directory other than /", k, v)
		}
	}
	return nil
}

// workerArgs is the node service's command line.
func (l Layout) workerArgs(nodeName string) string {
	return fmt.Sprintf("%s node --node %s --config %s", quote(l.Binary()), quote(nodeName), quote(l.Config()))
}

// unitFile is the systemd unit of node nodeName: restarted on failure after
// 2 s, stopped with SIGTERM so a running activity heartbeats its last chunk.
func (l Layout) unitFile(nodeName string) string {
	return control.SystemdUnit(fmt.Sprintf(`# Written by 'starter fleet install': the sparklane node service of %s
# (queue node.%s). 'starter fleet uninstall' removes it.`, nodeName, nodeName),
		fmt.Sprintf("sparklane node service (%s)", nodeName),
		"EnvironmentFile=-"+l.EnvFile(), "ExecStart="+l.workerArgs(nodeName))
}

// NodeUnitTemplate is the node service at the default layout as the
// systemd template unit sparklane-node@.service (the node's name is the
// instance: systemctl enable --now sparklane-node@NODE), the unit a
// release ships for installing by hand; `fleet install` writes the same
// unit for one node as sparklane-node.service.
func NodeUnitTemplate() string {
	return "# sparklane-node@.service: the sparklane node service of node %i, for installing by\n" +
		"# hand (the worker at /usr/local/lib/sparklane/worker, the node's config at\n" +
		"# /etc/sparklane/sparklane.toml): systemctl enable --now sparklane-node@NODE.\n" +
		WithoutHeader(DefaultLayout().unitFile("%i"))
}

// WithoutHeader is a unit file without its leading comment lines (which
// say which command wrote it).
func WithoutHeader(unit string) string {
	for strings.HasPrefix(unit, "#") {
		_, unit, _ = strings.Cut(unit, "\n")
	}
	return unit
}

// supervisorScript is the POSIX sh supervisor used where no systemd runs
// (the test fleet's hosts, minimal containers): it runs the worker,
// restarts it 2 s after it exits, records its own pid in PIDFile and the
// worker's in WorkerPIDFile, and stops (stopping the worker with SIGTERM)
// on SIGTERM, or without restarting when StopFile exists. The worker gets
// EnvFile's variables when it exists (read at each start). Output goes to
// LogFile, moved to LogFile.1 at a (re)start once it passes 10 MiB, since
// /run is memory.
func (l Layout) supervisorScript(nodeName string) string {
	return fmt.Sprintf(`#!/bin/sh
# Written by 'starter fleet install': supervises the sparklane node service
# of %s on a host without systemd. 'starter fleet uninstall' removes it.
run=%s
pidfile=%s
workerpid=%s
stopfile=%s
envfile=%s
log=%s
mkdir -p "$run"
echo $$ >"$pidfile.tmp" && mv -f "$pidfile.tmp" "$pidfile"
child=
finish() {
	if [ -n "$child" ]; then
		kill -TERM "$child" 2>/dev/null
		wait "$child"
	fi
	rm -f "$pidfile" "$workerpid"
	exit 0
}
trap finish TERM INT
while [ ! -e "$stopfile" ]; do
	if [ -f "$log" ] && [ "$(wc -c <"$log")" -gt 10485760 ]; then mv -f "$log" "$log.1"; fi
	exec >>"$log" 2>&1
	(if [ -f "$envfile" ]; then set -a; . "$envfile"; set +a; fi; exec %s) &
	child=$!
	echo "$child" >"$workerpid.tmp" && mv -f "$workerpid.tmp" "$workerpid"
	echo "$(date -u +%%FT%%TZ) supervise: worker started (pid $child)"
	wait "$child"
	code=$?
	child=
	echo "$(date -u +%%FT%%TZ) supervise: worker exited (status $code)"
	[ -e "$stopfile" ] && break
	sleep 2 &
	wait $!
done
rm -f "$pidfile" "$workerpid"
`, nodeName, quote(l.RunDir), quote(l.PIDFile()), quote(l.WorkerPIDFile()), quote(l.StopFile()), quote(l.EnvFile()), quote(l.LogFile()), l.workerArgs(nodeName))
}

// quote makes s one POSIX shell word.
func quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
