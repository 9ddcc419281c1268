// Package cli is the starter: the operator's command line. It starts
// workflows, follows them (progress queries → live bars), prints results
// (--json for scripts), and never does node work itself.
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/logging"
	"github.com/sparklane/sparklane/internal/workers"
)

// App holds what every command shares.
type App struct {
	Out, Err io.Writer
	In       io.Reader
	// ConfigPath is --config; JSON is --json.
	ConfigPath string
	JSON       bool
	LogLevel   string

	cfg *config.Config
	// viper reads the fleet config: --config bound to its "config" key,
	// SPARKLANE_* env, the file, defaults (config.NewViper).
	viper *viper.Viper
	log   *zap.Logger
	// env is the Temporal connection, opened on first use.
	env *workers.Env
	// Interrupts delivers Ctrl-C to commands that follow a workflow.
	Interrupts <-chan os.Signal
	// following is set while a command follows a run and takes Ctrl-C.
	following atomic.Bool
	// ControlExe is the program started as the background control service
	// (default: $SPARKLANE_CONTROL_EXE, else this program).
	ControlExe string
}

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func exitCode(code int, err error) error { return &exitError{code: code, err: err} }

// Execute runs the starter with args and returns the process exit code.
//
// signals carries SIGINT and SIGTERM (nil: none). While a command follows a
// run, Ctrl-C goes to it (twice cancels the run); otherwise, and for
// SIGTERM, the command's context is cancelled, and a second signal ends the
// process through HardExit: a starter is only a client, so nothing is lost.
func Execute(ctx context.Context, args []string, in io.Reader, out, errw io.Writer, signals <-chan os.Signal) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	follow := make(chan os.Signal, 4)
	a := &App{Out: out, Err: errw, In: in, Interrupts: follow}
	if signals != nil {
		go a.dispatchSignals(ctx, cancel, signals, follow)
	}
	root := a.Root()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errw)
	err := root.ExecuteContext(ctx)
	if a.env != nil {
		a.env.Close()
	}
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exitError); ok {
		if ee.err != nil {
			fmt.Fprintln(errw, "starter:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(errw, "starter:", err)
	return 1
}

// HardExit ends the process on a second signal while a command does not
// return (starter's main sets os.Exit; tests leave it nil).
var HardExit func(code int)

func (a *App) dispatchSignals(ctx context.Context, cancel context.CancelFunc, signals <-chan os.Signal, follow chan<- os.Signal) {
	cancelled := false
	done := ctx.Done()
	for {
		select {
		case s := <-signals:
			if s == os.Interrupt && a.following.Load() {
				select {
				case follow <- s:
				default:
				}
				continue
			}
			code := 130
			if s != os.Interrupt {
				code = 143
			}
			if cancelled && HardExit != nil {
				fmt.Fprintln(a.Err, "\nstarter: interrupted again: exiting")
				HardExit(code)
			}
			cancelled = true
			done = nil // from now on, wait only for a second signal
			cancel()
		case <-done:
			return
		}
	}
}

// Root builds the command tree.
func (a *App) Root() *cobra.Command {
	root := &cobra.Command{
		Use:           "starter",
		Short:         "sparklane: durable lane cutovers (stage → verify → serve → probe → bench) on a small GPU fleet",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.ConfigPath, "config", "", "fleet config (default $SPARKLANE_CONFIG or ./sparklane.toml); any key can be overridden by SPARKLANE_<KEY> (SPARKLANE_TEMPORAL_ADDRESS)")
	a.viper = config.NewViper()
	// Flag > env > file > default; Lookup cannot fail for a flag defined above.
	_ = a.viper.BindPFlag("config", root.PersistentFlags().Lookup("config"))
	root.PersistentFlags().BoolVar(&a.JSON, "json", false, "print results as JSON (for scripts)")
	root.PersistentFlags().StringVar(&a.LogLevel, "log-level", "warn", "log level of the in-process server and workers")
	root.AddCommand(a.statusCmd(), a.lanesCmd(), a.recipeCmd(), a.stageCmd(), a.verifyCmd(),
		a.upCmd(), a.stopCmd(), a.probeCmd(), a.cutoverCmd(), a.cancelCmd(), a.demoCmd(), a.scheduleCmd(),
		a.controlCmd(), a.attachCmd())
	for _, c := range a.extraCommands() {
		root.AddCommand(c)
	}
	return root
}

// extraCommands are added by other files of the package (bench, power).
var extraCommandBuilders []func(a *App) *cobra.Command

func (a *App) extraCommands() []*cobra.Command {
	var out []*cobra.Command
	for _, b := range extraCommandBuilders {
		out = append(out, b(a))
	}
	return out
}

// logger is zap on stderr at --log-level (console).
func (a *App) logger() *zap.Logger {
	if a.log == nil {
		l, err := logging.New("console", a.LogLevel)
		if err != nil {
			l = zap.NewNop()
		}
		a.log = l
	}
	return a.log
}

// config loads the fleet config once, through viper: --config (bound
// with BindPFlag in Root), $SPARKLANE_CONFIG or ./sparklane.toml, with
// SPARKLANE_* overrides. Recipes-dir warnings go to stderr.
func (a *App) config() (*config.Config, error) {
	if a.cfg != nil {
		return a.cfg, nil
	}
	v := a.viper
	if v == nil { // an App used without Root()
		v = config.NewViper()
	}
	// A path set by code (the demo's fleet) rather than typed as the flag
	// still ranks as the flag.
	if a.ConfigPath != "" && v.GetString("config") != a.ConfigPath {
		v.Set("config", a.ConfigPath)
	}
	cfg, err := config.LoadViper(v)
	if err != nil {
		return nil, err
	}
	a.cfg = cfg
	return cfg, nil
}

// recipes loads and validates every recipe against the config.
func (a *App) recipes() (*config.Config, []*config.Recipe, error) {
	cfg, err := a.config()
	if err != nil {
		return nil, nil, err
	}
	rs, warnings, err := config.LoadRecipeDir(cfg.RecipesDir, cfg.File)
	for _, w := range warnings {
		fmt.Fprintln(a.Err, "warning:", w)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := config.Validate(cfg, rs); err != nil {
		return nil, nil, err
	}
	return cfg, rs, nil
}

// lane resolves --lane and renders it with -o overrides.
func (a *App) lane(name string, overrides []string) (*config.Config, *config.Recipe, *config.LanePlan, error) {
	if name == "" {
		return nil, nil, nil, fmt.Errorf("--lane is required (see: starter lanes)")
	}
	cfg, rs, err := a.recipes()
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := config.Resolve(rs, name)
	if err != nil {
		return nil, nil, nil, err
	}
	ov, err := parseOverrides(overrides)
	if err != nil {
		return nil, nil, nil, err
	}
	plan, err := config.Render(cfg, r, ov)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, r, plan, nil
}

func parseOverrides(kv []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range kv {
		k, v, ok := strings.Cut(s, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("-o %q: expected key=value", s)
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, nil
}

// connect opens the Temporal connection: an external cluster, or the
// state_dir's control service (started in the background when none runs).
func (a *App) connect(ctx context.Context) (*workers.Env, error) {
	if a.env != nil {
		return a.env, nil
	}
	cfg, err := a.config()
	if err != nil {
		return nil, err
	}
	env, err := a.connectService(ctx, cfg)
	if err != nil {
		return nil, err
	}
	a.env = env
	return env, nil
}

func (a *App) printJSON(v any) error {
	enc := json.NewEncoder(a.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows with aligned columns (text/tabwriter).
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
