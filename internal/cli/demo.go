package cli

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/simimage"
)

// demoOptions are the demo command's flags.
type demoOptions struct {
	dir, size    string
	exit, clean  bool
	port, uiPort int
}

func (a *App) demoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "run the whole pipeline on a simulated 4-node fleet on this machine (no config needed)",
		Long: "Creates a demo fleet of 4 local nodes under --dir, a synthetic NAS hub (safetensors shards in the\n" +
			"Hugging Face layout plus engram tables), two sim lanes (demo-4x, demo-2x), starts the embedded\n" +
			"Temporal server, its web UI and the workers in the demo's control service (in the background),\n" +
			"builds the engine-sim image, and runs\n" +
			"cutover --lane demo-4x then cutover --lane demo-2x (stage → verify → serve → probe → bench).\n" +
			"A second run reuses the staged data (verify-only). The UI stays up until Ctrl-C unless --exit.",
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runDemo(cmd.Context(), o) },
	}
	cmd.Flags().StringVar(&o.dir, "dir", "", "where the demo fleet, NAS and state live (default ~/.local/state/sparklane/demo)")
	cmd.Flags().StringVar(&o.size, "size", "1G", "size of the synthetic model on the NAS")
	cmd.Flags().BoolVar(&o.exit, "exit", false, "exit when done instead of keeping the web UI up")
	cmd.Flags().BoolVar(&o.clean, "clean", false, "stop the demo's lanes and control service and remove what the demo created (--dir), saying how much it freed")
	cmd.Flags().IntVar(&o.port, "port", 7233, "embedded Temporal frontend port")
	cmd.Flags().IntVar(&o.uiPort, "ui-port", 8233, "embedded web UI port")
	return cmd
}

// runDemo is `starter demo`: the engine-sim image and a synthetic NAS,
// a demo fleet's config, its control service, a cutover to each demo
// lane, and then the web UI kept up until Ctrl-C (unless --exit).
func (a *App) runDemo(ctx context.Context, o demoOptions) error {
	started := time.Now()
	dir, err := demoDir(o.dir)
	if err != nil {
		return err
	}
	if o.clean {
		return a.demoClean(ctx, dir)
	}
	bytes, err := config.ParseSize(o.size)
	if err != nil {
		return fmt.Errorf("--size %q: %w", o.size, err)
	}
	a.demoSay("sparklane demo in %s", dir)
	image, nas, err := a.demoData(ctx, dir, bytes)
	if err != nil {
		return err
	}
	fleet, err := demo.WriteFleet(dir, filepath.Join(dir, "state"), nas, image, o.port, o.uiPort)
	if err != nil {
		return err
	}
	cfg, err := a.useConfig(fleet.ConfigFile)
	if err != nil {
		return err
	}
	_, wasRunning := control.Find(cfg.StateDir)
	env, err := a.connect(ctx)
	if err != nil {
		return err
	}
	// The demo's runs live in its control service, like any
	// starter's; the demo stops the service when it ends only if
	// it started it.
	stopService := func() {
		if wasRunning {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, _, err := control.Stop(sctx, cfg.StateDir, 30*time.Second); err != nil {
			fmt.Fprintln(a.Err, "stop the demo's control service:", err)
		}
	}
	a.demoSay("  Temporal %s, web UI %s (control service log: %s)\n", env.Address, env.UIURL, control.LogPath(cfg.StateDir))
	results, err := a.demoCutovers(ctx, cfg)
	if err != nil {
		return err
	}
	if a.JSON {
		if err := a.printJSON(map[string]any{"config": fleet.ConfigFile, "ui": env.UIURL, "cutovers": results, "seconds": time.Since(started).Seconds()}); err != nil {
			return err
		}
	}
	a.demoSay("demo done in %.1fs. Config: %s", time.Since(started).Seconds(), fleet.ConfigFile)
	a.demoSay("  web UI: %s (filter: SparklaneLane = \"demo-2x\")", env.UIURL)
	a.demoSay("  try:    go run ./starter --config %s status", fleet.ConfigFile)
	last := demo.Lanes[len(demo.Lanes)-1]
	a.demoSay("  the last lane (%s) keeps serving; stop it with:", last)
	a.demoSay("          go run ./starter --config %s stop --lane %s", fleet.ConfigFile, last)
	if o.exit {
		stopService()
		return nil
	}
	a.demoSay("The UI stays up until Ctrl-C.")
	return a.demoWait(ctx, last, fleet.ConfigFile, !wasRunning, stopService)
}

// demoSay prints one line of the demo's progress (none with --json).
func (a *App) demoSay(format string, args ...any) {
	if !a.JSON {
		fmt.Fprintf(a.Out, format+"\n", args...)
	}
}

// demoDir is the demo's directory as an absolute path: --dir, or
// ~/.local/state/sparklane/demo.
func demoDir(dir string) (string, error) {
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".local", "state", "sparklane", "demo")
	}
	return filepath.Abs(dir)
}

// demoData builds the engine-sim image on this machine's Docker and
// generates the synthetic NAS (a bytes-sized model and engram tables).
func (a *App) demoData(ctx context.Context, dir string, bytes int64) (string, demo.NAS, error) {
	t0 := time.Now()
	dc, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		return "", demo.NAS{}, fmt.Errorf("the demo runs engine-sim containers on this machine's Docker: %w", err)
	}
	image, err := simimage.Build(ctx, dc, simimage.Options{})
	dc.Close()
	if err != nil {
		return "", demo.NAS{}, fmt.Errorf("build the engine-sim image: %w", err)
	}
	a.demoSay("  image %s (%.1fs)", image, time.Since(t0).Seconds())
	t0 = time.Now()
	nas, err := demo.GenerateNAS(filepath.Join(dir, "nas"), bytes)
	if err != nil {
		return "", demo.NAS{}, fmt.Errorf("generate the synthetic NAS in %s: %w", dir, err)
	}
	a.demoSay("  NAS hub %s: %s model + engram tables (%.1fs)", nas.Hub, contract.HumanBytes(bytes), time.Since(t0).Seconds())
	return image, nas, nil
}

// demoCutovers runs a cutover to each demo lane in turn, with its bench.
func (a *App) demoCutovers(ctx context.Context, cfg *config.Config) ([]*contract.CutoverResult, error) {
	var results []*contract.CutoverResult
	for _, lane := range demo.Lanes {
		_, r, plan, err := a.lane(lane, nil)
		if err != nil {
			return nil, err
		}
		a.demoSay("== cutover --lane %s", lane)
		res, err := a.runCutover(ctx, cfg, r, plan, cutoverFlags{stage: contract.StageAuto, bench: true, label: "demo"})
		if res != nil && !a.JSON {
			printCutover(a, res)
		}
		if err != nil {
			return nil, err
		}
		results = append(results, res)
		a.demoSay("")
	}
	return results, nil
}

// demoWait keeps the demo's web UI up until Ctrl-C (or SIGTERM) and then
// ends the demo: stop stops its control service when the demo started it
// (ownService). Ctrl-C is how a demo is meant to end, so it is taken here
// (not by cancelling the command) and ends it with exit 0, saying that
// the last lane keeps serving — its containers run on their own — and how
// to stop it.
func (a *App) demoWait(ctx context.Context, last, cfgFile string, ownService bool, stop func()) error {
	a.following.Store(true) // Ctrl-C comes to a.Interrupts
	select {
	case <-a.Interrupts:
	case <-ctx.Done():
	}
	a.following.Store(false)
	service := "the demo's control service (and its web UI) keeps running: starter --config " + cfgFile + " control stop stops it"
	if ownService {
		service = "stopping the demo's control service and its web UI"
	}
	fmt.Fprintf(a.Err, "\ndemo ended: lane %s keeps serving (its containers run on); stop it with:\n  go run ./starter --config %s stop --lane %s\n%s\n", last, cfgFile, last, service)
	stop()
	return nil
}

// useConfig points the starter at the config file path (the demo's
// fleet) and loads it.
func (a *App) useConfig(path string) (*config.Config, error) {
	a.ConfigPath, a.cfg = path, nil
	return a.config()
}

// demoCleanJSON is `starter demo --clean --json`.
type demoCleanJSON struct {
	Dir            string   `json:"dir"`
	Stopped        []string `json:"stopped_containers"`
	ServiceStopped bool     `json:"control_service_stopped"`
	FreedBytes     int64    `json:"freed_bytes"`
}

// demoClean undoes `starter demo`: the demo's lanes are stopped on its
// nodes (through its control service, like `stop --lane`),
// the service is stopped, and dir — NAS, staged copies, state, config — is
// removed. It refuses a dir that holds no demo config, so a mistyped --dir
// never deletes someone's files.
func (a *App) demoClean(ctx context.Context, dir string) error {
	cfgFile := filepath.Join(dir, "sparklane.toml")
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return a.output(demoCleanJSON{Dir: dir, Stopped: []string{}}, func() {
			fmt.Fprintf(a.Out, "nothing to clean: %s does not exist\n", dir)
		})
	}
	b, err := os.ReadFile(cfgFile)
	if err != nil || !strings.HasPrefix(string(b), demo.ConfigHeader) {
		return fmt.Errorf("%s is not a demo dir (no %s written by `starter demo`): nothing removed; give the demo's --dir", dir, cfgFile)
	}
	cfg, err := a.useConfig(cfgFile)
	if err != nil {
		return fmt.Errorf("demo config %s: %w (remove %s by hand)", cfgFile, err, dir)
	}
	out := demoCleanJSON{Dir: dir, Stopped: []string{}}
	nodes := allNodes(cfg)
	if _, err := a.connect(ctx); err != nil {
		return fmt.Errorf("start the demo's control service to stop its lanes: %w", err)
	}
	// Only the demo's own lanes are stopped, wherever they run on its nodes.
	for _, lane := range demo.Lanes {
		run, err := a.start(ctx, runSpec{ID: contract.StopID(lane), Workflow: contract.WorkflowStop, Lane: lane,
			Input: contract.StopInput{Nodes: nodes, Lane: lane}})
		if err != nil {
			return err
		}
		var res contract.StopResult
		if err := run.Get(ctx, &res); err != nil {
			return exitCode(1, fmt.Errorf("stop the demo's lane %s: %s; nothing removed", lane, rootMessage(err)))
		}
		for _, n := range res.Nodes {
			out.Stopped = append(out.Stopped, n.Stopped...)
		}
	}
	a.env.Close()
	a.env = nil
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, found, err := control.Stop(sctx, cfg.StateDir, 30*time.Second)
	if err != nil {
		return fmt.Errorf("stop the demo's control service: %w; nothing removed", err)
	}
	out.ServiceStopped = found
	size := dirSize(dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	out.FreedBytes = size
	return a.output(out, func() {
		fmt.Fprintf(a.Out, "stopped %d demo container(s)%s; removed %s: %s freed\n", len(out.Stopped),
			map[bool]string{true: " and the demo's control service", false: ""}[found], dir, contract.HumanBytes(size))
	})
}

// dirSize is the bytes allocated to the regular files under dir (hard
// links counted once): what removing it frees.
func dirSize(dir string) int64 {
	var total int64
	seen := map[[2]uint64]bool{}
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			k := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
			total += st.Blocks * 512
			return nil
		}
		total += info.Size()
		return nil
	})
	return total
}
