package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/simimage"
	"github.com/sparklane/sparklane/internal/staging"
	"github.com/sparklane/sparklane/workflows"
)

func (a *App) demoCmd() *cobra.Command {
	var dir, size string
	var exit bool
	var port, uiPort int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "run the whole pipeline on a simulated 4-node fleet on this machine (no config needed)",
		Long: "Creates a demo fleet of 4 local nodes under --dir, a synthetic NAS hub (safetensors shards in the\n" +
			"Hugging Face layout plus engram tables), two sim lanes (demo-4x, demo-2x), starts the embedded\n" +
			"Temporal server, its web UI and the workers in the demo's control service (in the background),\n" +
			"builds the engine-sim image, and runs\n" +
			"cutover --lane demo-4x then cutover --lane demo-2x (stage → verify → serve → probe → bench).\n" +
			"A second run reuses the staged data (verify-only). The UI stays up until Ctrl-C unless --exit.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			started := time.Now()
			if dir == "" {
				home, err := os.UserHomeDir()
				if err != nil {
					return err
				}
				dir = filepath.Join(home, ".local", "state", "sparklane", "demo")
			}
			dir, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			bytes, err := config.ParseSize(size)
			if err != nil {
				return fmt.Errorf("--size %q: %w", size, err)
			}
			say := func(format string, args ...any) {
				if !a.JSON {
					fmt.Fprintf(a.Out, format+"\n", args...)
				}
			}
			say("sparklane demo in %s", dir)
			t0 := time.Now()
			dc, err := node.DockerClient(ctx, "", nil)
			if err != nil {
				return fmt.Errorf("the demo runs engine-sim containers on this machine's Docker: %w", err)
			}
			image, err := simimage.Build(ctx, dc, simimage.Options{})
			dc.Close()
			if err != nil {
				return fmt.Errorf("build the engine-sim image: %w", err)
			}
			say("  image %s (%.1fs)", image, time.Since(t0).Seconds())
			t0 = time.Now()
			nas, err := demo.GenerateNAS(filepath.Join(dir, "nas"), bytes)
			if err != nil {
				return fmt.Errorf("generate the synthetic NAS in %s: %w", dir, err)
			}
			say("  NAS hub %s: %s model + engram tables (%.1fs)", nas.Hub, staging.HumanBytes(bytes), time.Since(t0).Seconds())
			fleet, err := demo.WriteFleet(dir, filepath.Join(dir, "state"), nas, image, port, uiPort)
			if err != nil {
				return err
			}
			a.ConfigPath, a.cfg = fleet.ConfigFile, nil
			cfg, err := a.config()
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
			say("  Temporal %s, web UI %s (control service log: %s)\n", env.Address, env.UIURL, control.LogPath(cfg.StateDir))
			var results []*workflows.CutoverResult
			for _, lane := range demo.Lanes {
				_, r, plan, err := a.lane(lane, nil)
				if err != nil {
					return err
				}
				say("== cutover --lane %s", lane)
				res, err := a.runCutover(ctx, cfg, r, plan, cutoverFlags{stage: workflows.StageAuto, bench: true, label: "demo"})
				if res != nil && !a.JSON {
					printCutover(a, res)
				}
				if err != nil {
					return err
				}
				results = append(results, res)
				say("")
			}
			if a.JSON {
				if err := a.printJSON(map[string]any{"config": fleet.ConfigFile, "ui": env.UIURL, "cutovers": results, "seconds": time.Since(started).Seconds()}); err != nil {
					return err
				}
			}
			say("demo done in %.1fs. Config: %s", time.Since(started).Seconds(), fleet.ConfigFile)
			say("  web UI: %s (filter: SparklaneLane = \"demo-2x\")", env.UIURL)
			say("  try:    go run ./starter --config %s status", fleet.ConfigFile)
			last := demo.Lanes[len(demo.Lanes)-1]
			say("  the last lane (%s) keeps serving; stop it with:", last)
			say("          go run ./starter --config %s stop --lane %s", fleet.ConfigFile, last)
			if exit {
				stopService()
				return nil
			}
			say("The UI stays up until Ctrl-C.")
			select {
			case <-a.Interrupts:
			case <-ctx.Done():
			}
			stopService()
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "where the demo fleet, NAS and state live (default ~/.local/state/sparklane/demo)")
	cmd.Flags().StringVar(&size, "size", "1G", "size of the synthetic model on the NAS")
	cmd.Flags().BoolVar(&exit, "exit", false, "exit when done instead of keeping the web UI up")
	cmd.Flags().IntVar(&port, "port", 7233, "embedded Temporal frontend port")
	cmd.Flags().IntVar(&uiPort, "ui-port", 8233, "embedded web UI port")
	return cmd
}
