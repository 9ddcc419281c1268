package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/logging"
)

// App holds what every command shares.
type App struct {
	Out, Err io.Writer
	// dryFetch is the fetch plan a stage --dry-run shows first (set by
	// stage for dryRun).
	dryFetch *contract.FetchPlan
	// dryBuildOn is the node a stage --dry-run with --node would build a
	// sim lane's missing engine-sim image on ("": the head).
	dryBuildOn string
	// fitForce is --force: run a lane the memory fit refuses (laneFit).
	fitForce bool
	In       io.Reader
	// ConfigPath is --config; JSON is --json.
	ConfigPath string
	JSON       bool
	LogLevel   string
	// Verbose (--verbose) echoes the starter's log on stderr and prints
	// where the starter and the control service write their logs.
	Verbose bool
	// closeLog flushes and closes the starter's log file.
	closeLog func() error

	cfg *config.Config
	// set is the recipe set, loaded and validated on first use.
	set *config.RecipeSet
	// brokenNoted: the one line about broken recipes was printed.
	brokenNoted bool
	// viper reads the fleet config: --config bound to its "config" key,
	// SPARKLANE_* env, the file, defaults (config.NewViper).
	viper *viper.Viper
	log   *zap.Logger
	// env is the Temporal connection, opened on first use.
	env *control.Conn
	// service is the control service env reaches (embedded mode): who a
	// followed run depends on (see watchService).
	service control.Owner
	// Interrupts delivers Ctrl-C to commands that follow a workflow.
	Interrupts <-chan os.Signal
	// following is set while a command follows a run and takes Ctrl-C.
	following atomic.Bool
	// ControlExe is the worker program started as the control service
	// (`worker dev`; default: $SPARKLANE_CONTROL_EXE, else the source
	// tree's ./worker built into STATE_DIR/bin, else the worker beside this
	// program: see controlExe).
	ControlExe string

	// jsonOut is the real stdout while --json is given: a.Out then collects
	// any plain text (see jsonEnvelope), so stdout carries JSON only.
	jsonOut io.Writer
	// jsonPrinted is set once printJSON wrote a document to stdout.
	jsonPrinted bool
	// text collects what commands print as plain text under --json.
	text *bytes.Buffer
	// stepsShown is set when the last followed run's steps were printed
	// as progress, so its summary does not list them a second time.
	stepsShown bool
	// askHostKeys makes `init` confirm unknown host keys on In even when
	// it is not a terminal (tests).
	askHostKeys bool
	// lanes maps a workflow ID this starter started to its lane, so the
	// Ctrl-C hint names the lane that is running.
	lanes map[string]string
	// inLines reads In line by line for interactive prompts (init).
	inLines *bufio.Reader
	// getenv reads this shell's environment (nil: os.Getenv): the
	// HF_ENDPOINT a fetch plan takes when the config sets no hf_endpoint.
	getenv func(string) string
	// now and newTicker are the clock of progress lines and waits (nil:
	// the real one); tests drive them instead of sleeping.
	now       func() time.Time
	newTicker func(d time.Duration) (<-chan time.Time, func())
}

// clock is the time now (App.now, else time.Now).
func (a *App) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// ticker ticks every d (App.newTicker, else a time.Ticker) until stop.
func (a *App) ticker(d time.Duration) (tick <-chan time.Time, stop func()) {
	if a.newTicker != nil {
		return a.newTicker(d)
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
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
	if jsonRequested(args) {
		// Scripts parse stdout: plain text printed by a command is kept
		// and folded into the one JSON document written at the end.
		a.text = &bytes.Buffer{}
		a.jsonOut, a.Out = out, a.text
	}
	if signals != nil {
		go a.dispatchSignals(ctx, cancel, signals, follow)
	}
	err := a.execute(ctx, args)
	if a.env != nil {
		a.env.Close()
	}
	if a.closeLog != nil {
		_ = a.closeLog()
	}
	code, msg := 0, ""
	if err != nil {
		code, msg = 1, err.Error()
		if ee, ok := err.(*exitError); ok {
			code, msg = ee.code, ""
			if ee.err != nil {
				msg = ee.err.Error()
			}
		}
		if msg != "" {
			fmt.Fprintln(errw, "starter:", msg)
		}
	}
	if a.jsonOut != nil {
		a.jsonEnvelope(code, msg)
	}
	return code
}

// execute builds the command tree and runs the command args name.
func (a *App) execute(ctx context.Context, args []string) error {
	root := a.Root()
	root.SetArgs(args)
	root.SetOut(a.Out)
	root.SetErr(a.Err)
	return root.ExecuteContext(ctx)
}

// jsonRequested reports whether args ask for --json (looked at before
// cobra parses, so that even a flag error is reported as JSON).
func jsonRequested(args []string) bool {
	for _, s := range args {
		if s == "--" {
			return false
		}
		if s == "--json" || s == "--json=true" || s == "--json=1" {
			return true
		}
	}
	return false
}

// jsonEnvelope ends a --json run: when the command printed no JSON
// document, stdout gets one, {"error": ...} on failure (the exit code is
// unchanged) or {"ok": true, "output": [...]} with the lines the command
// printed as text. A command that printed its document already carries
// its error inside it (status, verify); the one-line error is on stderr.
func (a *App) jsonEnvelope(code int, msg string) {
	if a.jsonPrinted {
		if a.text.Len() > 0 { // text next to a document: keep stdout JSON
			_, _ = a.Err.Write(a.text.Bytes())
		}
		return
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(a.text.String(), "\n"), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	v := map[string]any{}
	if code != 0 {
		if msg == "" {
			msg = fmt.Sprintf("exit %d", code)
		}
		v["error"] = msg
		v["exit_code"] = code
	} else {
		v["ok"] = true
	}
	if len(lines) > 0 {
		v["output"] = lines
	}
	_ = a.printJSON(v)
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
	root.PersistentFlags().BoolVarP(&a.Verbose, "verbose", "v", false, "also print the starter's log on stderr, and say where it and the control service's log are (STATE_DIR/starter.log, STATE_DIR/control.log)")
	root.AddCommand(a.statusCmd(), a.gatewayCmd(), a.lanesCmd(), a.recipeCmd(), a.registryCmd(), a.fetchCmd(), a.stageCmd(), a.verifyCmd(),
		a.upCmd(), a.stopCmd(), a.probeCmd(), a.cutoverCmd(), a.cancelCmd(), a.demoCmd(), a.scheduleCmd(),
		a.controlCmd(), a.attachCmd(), a.initCmd(),
		a.benchCmd(), a.reportCmd(), a.powerCmd(), a.logsCmd(), a.fleetCmd(), a.diskCmd(), a.keepCmd(), a.versionCmd(), a.imageCmd(), a.imagesCmd())
	return root
}

// StarterLogFile is the starter's own log under state_dir: the Temporal
// SDK client's lines and sparklane's, kept off the terminal, where only
// the command's results and one-line errors belong.
const StarterLogFile = "starter.log"

// logger is zap at --log-level into STATE_DIR/starter.log (and on stderr
// too with --verbose, which also prints where the logs are). Without a
// config (no state_dir yet) it logs to stderr at --log-level.
func (a *App) logger() *zap.Logger {
	if a.log != nil {
		return a.log
	}
	if a.cfg != nil && a.cfg.StateDir != "" {
		path := filepath.Join(a.cfg.StateDir, StarterLogFile)
		var echo []io.Writer
		if a.Verbose {
			echo = append(echo, a.Err)
			fmt.Fprintf(a.Err, "starter: logging to %s; the control service (embedded Temporal server, workers) logs to %s\n",
				path, filepath.Join(a.cfg.StateDir, control.LogFile))
		}
		l, closeFn, err := logging.NewFile(path, a.LogLevel, echo...)
		if err == nil {
			a.log, a.closeLog = l, closeFn
			return a.log
		}
		fmt.Fprintf(a.Err, "starter: %v: logging to the terminal instead\n", err)
	}
	l, err := logging.New("console", a.LogLevel)
	if err != nil {
		l = zap.NewNop()
	}
	a.log = l
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
	for _, n := range cfg.Notes {
		fmt.Fprintln(a.Err, "note:", n)
	}
	a.cfg = cfg
	return cfg, nil
}

// recipes loads and validates every recipe against the config.
func (a *App) recipes() (*config.Config, []*config.Recipe, error) {
	cfg, set, err := a.recipeSet()
	if err != nil {
		return nil, nil, err
	}
	return cfg, set.Recipes, nil
}

// recipeSet loads recipes_dir and recipes_dirs once and validates them
// (loadRecipeSet); broken recipes and skipped files are one line on
// stderr (noteBroken), listed in full by `starter lanes` and `recipe
// check`. Every other lane keeps working. Only a broken fleet config, or
// recipes clashing with each other, fail every command.
func (a *App) recipeSet() (*config.Config, *config.RecipeSet, error) {
	cfg, set, err := a.loadRecipeSet()
	if err != nil {
		return nil, nil, err
	}
	a.noteBroken(set)
	return cfg, set, nil
}

// loadRecipeSet is recipeSet without the line on stderr: for the
// commands that list broken recipes themselves, and for --lane, which
// gives the asked-for recipe's own error when it is broken.
func (a *App) loadRecipeSet() (*config.Config, *config.RecipeSet, error) {
	cfg, err := a.config()
	if err != nil {
		return nil, nil, err
	}
	if a.set != nil {
		return cfg, a.set, nil
	}
	set, err := config.LoadRecipeSet(cfg, cfg.File)
	if err != nil {
		for _, w := range set.Warnings {
			fmt.Fprintln(a.Err, "warning:", w)
		}
		return nil, nil, err
	}
	if err := lane.ValidateSet(cfg, set); err != nil {
		return nil, nil, err
	}
	a.set = set
	return cfg, set, nil
}

// noteBroken prints, once per command, how many recipes do not load and
// how many files were skipped, and where to read why: a registry clone
// with twenty unresolved mods costs one line, not a screen, on every
// command that does not use them.
func (a *App) noteBroken(set *config.RecipeSet) {
	if a.brokenNoted || len(set.Broken)+len(set.Warnings) == 0 {
		return
	}
	a.brokenNoted = true
	var parts []string
	if n := len(set.Broken); n > 0 {
		parts = append(parts, counted(n, "recipe does not load", "recipes do not load"))
	}
	if n := len(set.Warnings); n > 0 {
		parts = append(parts, counted(n, "file in the recipe directories was skipped", "files in the recipe directories were skipped"))
	}
	fmt.Fprintf(a.Err, "warning: %s: `starter lanes` lists them\n", strings.Join(parts, ", "))
}

// counted is "1 ONE" or "N MANY".
func counted(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// lane resolves --lane and renders it with -o overrides on the recipe's
// cluster (or default_cluster).
func (a *App) lane(name string, overrides []string) (*config.Config, *contract.Recipe, *contract.LanePlan, error) {
	return a.laneOn(name, "", overrides)
}

// laneOn is lane on the cluster --cluster names ("" = the recipe's, else
// default_cluster). The recipe returned carries the cluster it was
// rendered on, so workflow IDs (cutover/CLUSTER) name it.
func (a *App) laneOn(name, cluster string, overrides []string) (*config.Config, *contract.Recipe, *contract.LanePlan, error) {
	if name == "" {
		return nil, nil, nil, fmt.Errorf("--lane is required (see: starter lanes)")
	}
	if err := a.requireFleet(); err != nil {
		return nil, nil, nil, err
	}
	cfg, set, err := a.loadRecipeSet()
	if err != nil {
		return nil, nil, nil, err
	}
	if strings.HasPrefix(name, "@") {
		// @REGISTRY/NAME: the recipe is read from the registry's clone.
		if set, err = registryRecipe(cfg, name); err != nil {
			return nil, nil, nil, err
		}
		name = set.Recipes[0].Name
	} else if set.BrokenFor(name) == nil || set.Find(name) != nil {
		a.noteBroken(set) // the lane asked for is not one of them
	}
	if cluster != "" && cfg.Cluster(cluster) == nil {
		return nil, nil, nil, fmt.Errorf("--cluster %s: no such cluster in %s (see [[clusters]])", cluster, cfg.File)
	}
	ov, err := parseOverrides(overrides)
	if err != nil {
		return nil, nil, nil, err
	}
	r, plan, err := lane.Resolve(cfg, set, lane.Request{Lane: name, Cluster: cluster, Overrides: ov})
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
func (a *App) connect(ctx context.Context) (*control.Conn, error) {
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

// printJSON writes v as indented JSON to stdout, without HTML escaping
// (">>" in a command line stays ">>", not "\u003e\u003e").
func (a *App) printJSON(v any) error {
	w := a.Out
	if a.jsonOut != nil {
		w = a.jsonOut
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	a.jsonPrinted = true
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

// registryRecipe is the one-recipe set of @REGISTRY/NAME (a clone of
// `starter registry add`, or [registries] of the config), validated as
// recipes_dir's are.
func registryRecipe(cfg *config.Config, ref string) (*config.RecipeSet, error) {
	r, err := config.ResolveRecipeRef(cfg, ref)
	if err != nil {
		return nil, err
	}
	set := &config.RecipeSet{Recipes: []*config.Recipe{r}}
	if err := lane.ValidateSet(cfg, set); err != nil {
		return nil, err
	}
	if len(set.Broken) > 0 {
		return nil, fmt.Errorf("%s: recipe %s is broken: %s", ref, set.Broken[0].File, set.Broken[0].Error)
	}
	if len(set.TooLarge) > 0 {
		return nil, fmt.Errorf("%s: recipe %s %s", ref, set.TooLarge[0].File, lane.TooLargeWhy(set.TooLarge[0]))
	}
	return set, nil
}
