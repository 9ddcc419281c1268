package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/regset"
	"github.com/sparklane/sparklane/internal/strictdecode"
)

// Defaults applied by Load when the file leaves a key out.
const (
	DefaultNamespace  = "default"
	DefaultPort       = 7233
	DefaultUIPort     = 8233
	DefaultDocker     = "unix:///var/run/docker.sock"
	DefaultStateDir   = "~/.local/state/sparklane"
	DefaultRecipesDir = "recipes"
	DefaultFSRoot     = "/"
	// DefaultRelayPort is where node workers' relay servers listen.
	DefaultRelayPort = 7290
	// DefaultImagePort is where a node serves an image transfer to its
	// downstream node, while the transfer runs.
	DefaultImagePort = 7291
)

// DefaultMetricsAddress is where workers serve /metrics unless
// metrics_address says otherwise: loopback, the port Prometheus's
// exporter conventions leave free for custom exporters.
const DefaultMetricsAddress = "127.0.0.1:9464"

// DefaultProbeGrace is how long the fleet probe waits before its one
// re-probe when the config does not say.
const DefaultProbeGrace = 5 * time.Second

// EnvPrefix starts every environment variable that overrides a config key:
// SPARKLANE_TEMPORAL_ADDRESS sets temporal.address.
const EnvPrefix = "SPARKLANE"

// NewViper returns the viper instance the fleet config is read through:
// every key outside the arrays of tables bound to its SPARKLANE_*
// variable, "config" (the file) to $SPARKLANE_CONFIG, and the defaults.
// A CLI binds its --config flag to the "config" key (BindPFlag) and hands
// the instance to LoadViper; see the package doc for the precedence.
func NewViper() *viper.Viper {
	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	for _, k := range strictdecode.EnvKeys(reflect.TypeOf(Config{})) {
		_ = v.BindEnv(k) // only fails without a key
	}
	_ = v.BindEnv("config")
	v.SetDefault("state_dir", DefaultStateDir)
	v.SetDefault("recipes_dir", DefaultRecipesDir)
	v.SetDefault("probe_grace", DefaultProbeGrace)
	v.SetDefault("metrics_address", DefaultMetricsAddress)
	v.SetDefault("temporal.namespace", DefaultNamespace)
	v.SetDefault("temporal.port", DefaultPort)
	v.SetDefault("relay_port", DefaultRelayPort)
	v.SetDefault("image_port", DefaultImagePort)
	v.SetDefault("temporal.ui_port", DefaultUIPort)
	return v
}

// EnvVar is the environment variable that overrides key (temporal.address
// → SPARKLANE_TEMPORAL_ADDRESS).
func EnvVar(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Load reads the fleet config from path (what --config says), else
// $SPARKLANE_CONFIG, else ./sparklane.toml, with SPARKLANE_* overrides and
// defaults applied (LoadViper). Unknown keys, keys in the wrong case and
// wrong types are errors naming the file and the full key path (all of
// them at once), because a key silently swallowed into the wrong table
// once made staging read the wrong cache. Relative state_dir and
// recipes_dir are taken relative to the file's directory (also when set
// from the environment); "~" is expanded.
func Load(path string) (*Config, error) {
	v := NewViper()
	if path != "" {
		v.Set("config", path) // what a --config flag says
	}
	return LoadViper(v)
}

// LoadViper reads the fleet config through v (from NewViper, maybe with
// --config bound to its "config" key): it finds the file, checks it as
// written (limits, keys, case, types), then lets viper merge it with the
// environment and defaults and decodes the result with UnmarshalExact.
func LoadViper(v *viper.Viper) (*Config, error) {
	bad := func(err error) (*Config, error) { return nil, fault.Permanent(fault.InvalidSpec, err) }
	path := v.GetString("config")
	if path == "" {
		if _, err := os.Stat("sparklane.toml"); err != nil {
			return bad(errors.New(
				"no fleet config: --config not given, $SPARKLANE_CONFIG unset and ./sparklane.toml absent: copy recipes/sparklane.example.toml to ./sparklane.toml and edit it"))
		}
		path = "sparklane.toml"
	}
	data, err := strictdecode.ReadFile(path, "config")
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Op == "open" {
		return bad(fmt.Errorf("%w: pass --config PATH or set $SPARKLANE_CONFIG", err))
	}
	if err != nil {
		return bad(err)
	}
	tree, err := strictdecode.ParseTOML(path, data)
	if err != nil {
		return bad(err)
	}
	if _, blocks := tree["staging"].([]any); blocks {
		// A recipe's [[staging]] blocks pasted here would otherwise read
		// as a bare type error.
		return bad(fmt.Errorf("%s: staging: [[staging]] blocks (what to stage) belong in a lane recipe under recipes_dir; the fleet config's [staging] is one table of limits (serving_rate, min_available)", path))
	}
	// The file as written: key names and case, then types (strict: a
	// quoted number in the file is an error, as the operator meant a string).
	keyErrs, valueErrs := strictdecode.Decode(path, tree, &Config{})
	if errs := append(keyErrs, valueErrs...); len(errs) > 0 {
		return bad(errors.Join(errs...))
	}
	// The merged view: flag > env > file > default.
	v.SetConfigType("toml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return bad(fmt.Errorf("%s: %w: fix the TOML syntax", path, err))
	}
	cfg := &Config{}
	envOf := func(key string) string {
		if ev := EnvVar(key); os.Getenv(ev) != "" {
			return ev
		}
		return ""
	}
	if errs := strictdecode.DecodeViper(path, v, cfg, envOf); len(errs) > 0 {
		return bad(errors.Join(errs...))
	}
	cfg.File = path
	if err := applyConfigDefaults(cfg); err != nil {
		return bad(err)
	}
	return cfg, nil
}

func applyConfigDefaults(cfg *Config) error {
	dir := filepath.Dir(cfg.File)
	if cfg.Temporal.Namespace == "" {
		cfg.Temporal.Namespace = DefaultNamespace
	}
	// temporal.port and temporal.ui_port: an absent key is the default
	// (viper's); an explicit 0 stays 0, a free port picked at start.
	if cfg.ProbeGrace == 0 {
		cfg.ProbeGrace = DefaultProbeGrace
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.RecipesDir == "" {
		cfg.RecipesDir = DefaultRecipesDir
	}
	var err error
	if cfg.StateDir, err = resolvePath(dir, cfg.StateDir); err != nil {
		return fmt.Errorf("%s: state_dir: %w", cfg.File, err)
	}
	if cfg.RecipesDir, err = resolvePath(dir, cfg.RecipesDir); err != nil {
		return fmt.Errorf("%s: recipes_dir: %w", cfg.File, err)
	}
	for i := range cfg.RecipesDirs {
		if cfg.RecipesDirs[i], err = resolvePath(dir, cfg.RecipesDirs[i]); err != nil {
			return fmt.Errorf("%s: recipes_dirs[%d]: %w", cfg.File, i, err)
		}
	}
	for name, p := range cfg.Registries {
		if cfg.Registries[name], err = resolvePath(dir, p); err != nil {
			return fmt.Errorf("%s: registries.%s: %w", cfg.File, name, err)
		}
	}
	cfg.Registries, cfg.DisabledRegistries, cfg.RecipesDirs = regset.Resolve(cfg.StateDir, cfg.Registries, cfg.RecipesDirs, ValidName)
	for i := range cfg.Nodes {
		n := &cfg.Nodes[i]
		if full, ok := sshWithPort(n.SSH); ok {
			// What `starter init` wrote before it wrote the port: read
			// as ssh reads it, by every command alike.
			cfg.Notes = append(cfg.Notes, fmt.Sprintf("%s: nodes[%d].ssh: %q has no port: read as %q (ssh's port 22); write it so in the file", cfg.File, i, n.SSH, full))
			n.SSH = full
		}
		if n.Docker == "" {
			n.Docker = DefaultDocker
		}
		if n.FSRoot == "" {
			n.FSRoot = DefaultFSRoot
		}
		for _, p := range []*string{&n.KnownHosts, &n.Identity} {
			if *p != "" {
				if *p, err = expandHome(*p); err != nil {
					return fmt.Errorf("%s: nodes[%d] (%s): %w", cfg.File, i, n.Name, err)
				}
			}
		}
	}
	for i := range cfg.Devices {
		dv := &cfg.Devices[i]
		for _, p := range []*string{&dv.KnownHosts, &dv.Identity} {
			if *p != "" {
				if *p, err = expandHome(*p); err != nil {
					return fmt.Errorf("%s: devices[%d] (%s): %w", cfg.File, i, dv.Name, err)
				}
			}
		}
	}
	return nil
}

// resolvePath expands "~" and makes p absolute relative to dir.
func resolvePath(dir, p string) (string, error) {
	p, err := expandHome(p)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		abs, err := filepath.Abs(filepath.Join(dir, p))
		if err != nil {
			return "", err
		}
		p = abs
	}
	return filepath.Clean(p), nil
}

func expandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expand %s: %w: write an absolute path", p, err)
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
}

// ParseSize reads a byte size as operators write it ("100G", "1.5T",
// "512M"; binary units unless written "GB"): strictdecode.ParseSize, the
// rule [[staging]] min_free is read with, so a size given on the command
// line means what it would in a recipe.
func ParseSize(s string) (int64, error) { return strictdecode.ParseSize(s) }

// ErrNotRecipe marks a file in a recipes directory that is something else
// (a fleet config, a docker-compose file): LoadRecipeDir skips it with a
// warning; LoadRecipe on it is an error.
var ErrNotRecipe = errors.New("not a lane recipe")

// LoadRecipe reads one recipe: TOML (*.toml, sparklane's format) or a
// sparkrun v2 YAML recipe (*.yaml, *.yml), loaded unmodified. Unknown keys
// are errors naming the file and key path. Only regular files are read.
func LoadRecipe(path string) (*Recipe, error) { return LoadRecipeWith(path, nil) }

// LoadRecipeWith is LoadRecipe with the fleet's registries (name → clone),
// where a recipe's mods are also looked for (resolveMods).
func LoadRecipeWith(path string, registries map[string]string) (*Recipe, error) {
	return loadRecipe(recipeTree{}, path, registries)
}

// recipeTree is the tree a recipe file was found in, when it must be read
// from inside it: a registry clone or a recipes_dirs entry, someone
// else's text whose symlinks may point anywhere. The zero value is no
// bound (recipes_dir, a path the operator named).
type recipeTree struct {
	// Root is the tree's top; What names it in messages ("registry clone").
	Root, What string
}

// treeOf is the tree a recipes directory dir reads its files in: the
// registry clone (enabled or disabled) it lies in, else dir itself when
// it is a recipes_dirs entry (deep), else no bound.
func treeOf(cfg *Config, dir string, deep bool) recipeTree {
	for _, regs := range []map[string]string{cfg.Registries, cfg.DisabledRegistries} {
		for _, name := range slices.Sorted(maps.Keys(regs)) {
			if within(dir, regs[name]) {
				return recipeTree{Root: regs[name], What: "registry " + name + "'s clone"}
			}
		}
	}
	if deep {
		return recipeTree{Root: dir, What: "recipes_dirs entry"}
	}
	return recipeTree{}
}

// loadRecipe is LoadRecipeWith reading path from inside tree (when it has
// a root): a file that is, or lies under, a symlink leading out of the
// tree is never opened, and the error says so without a word of it.
func loadRecipe(tree recipeTree, path string, registries map[string]string) (*Recipe, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".toml" && ext != ".yaml" && ext != ".yml" {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: unknown recipe format: name it NAME.toml (sparklane) or NAME.yaml (sparkrun v2)", path))
	}
	var data []byte
	var err error
	if tree.Root == "" {
		data, err = strictdecode.ReadFile(path, "recipe")
	} else {
		data, err = strictdecode.ReadFileIn(tree.Root, path, "recipe")
	}
	var out *strictdecode.OutsideRootError
	if errors.As(err, &out) {
		what := fmt.Sprintf("is a symlink to %q", out.Target)
		if out.Link != path {
			what = fmt.Sprintf("lies under %s, a symlink to %q", out.Link, out.Target)
		}
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: %s, which links outside %s %s: a recipe there is read only from inside it (absolute links are never followed), so this one was not opened: replace the link with the recipe itself, or a relative link to a file inside", path, what, tree.What, tree.Root))
	}
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, err)
	}
	if ext == ".toml" {
		return parseTOMLRecipe(path, data, registries)
	}
	return parseSparkrun(path, data, registries)
}

func baseName(path string) string {
	b := filepath.Base(path)
	return strings.TrimSuffix(b, filepath.Ext(b))
}

func parseTOMLRecipe(path string, data []byte, registries map[string]string) (*Recipe, error) {
	tree, err := strictdecode.ParseTOML(path, data)
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, err)
	}
	// A recipe's staging is an array of tables ([[staging]]); a fleet
	// config's is one table of limits ([staging]) and marks no recipe.
	_, blocks := tree["staging"].([]any)
	if !hasAny(tree, "runtime", "command", "image") && !blocks && hasAny(tree, "nodes", "clusters", "temporal") {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: %w: it is a fleet config ([[nodes]], [[clusters]]); pass it with --config", path, ErrNotRecipe))
	}
	r := &Recipe{}
	keyErrs, valueErrs := strictdecode.Decode(path, tree, r)
	if errs := append(keyErrs, valueErrs...); len(errs) > 0 {
		return nil, fault.Permanent(fault.InvalidSpec, errors.Join(errs...))
	}
	r.File, r.Format = path, "toml"
	if r.Name == "" {
		r.Name = baseName(path)
	}
	if r.RuntimeConfig != nil {
		r.LoadWarnings = append(r.LoadWarnings, fmt.Sprintf("%s: runtime_config: recorded, not applied: its keys (%s) are read by sparkrun's runtime plugins; put flags in command or defaults", path, strings.Join(slices.Sorted(maps.Keys(r.RuntimeConfig)), ", ")))
	}
	// mods and mode mean the same as in a sparkrun recipe.
	mods, merrs := resolveMods(path, r.Mods, registries)
	if len(merrs) > 0 {
		return nil, fault.Permanent(fault.InvalidSpec, errors.Join(merrs...))
	}
	r.PreExec = append(r.PreExec, modPreExec(mods)...)
	switch r.Mode {
	case "solo":
		r.MinNodes, r.MaxNodes = 1, 1
	case "cluster":
		r.MinNodes = max(r.MinNodes, 2)
	}
	applyRecipeDefaults(r)
	return r, nil
}

func hasAny(m map[string]any, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// Recipe defaults applied at load, so every consumer (serve, probe, bench,
// dry run) sees the same values.
const (
	DefaultProbePath   = "/v1/models"
	DefaultProbeReady  = 30 * time.Minute
	DefaultHookTimeout = 2 * time.Minute
	DefaultVerify      = "sampled"
	DefaultQualityBand = 2.0
	// MaxBenchRuns bounds [bench] runs: each run is a whole pp/tg sweep,
	// so a typo (300 for 3) would hold the fleet for hours.
	MaxBenchRuns = 50
)

func applyRecipeDefaults(r *Recipe) {
	if r.Probe.Path == "" {
		r.Probe.Path = DefaultProbePath
	}
	if r.Probe.Ready == 0 {
		r.Probe.Ready = DefaultProbeReady
	}
	if r.Hooks.Timeout == 0 {
		r.Hooks.Timeout = DefaultHookTimeout
	}
	if r.Bench.QualityBand == 0 {
		r.Bench.QualityBand = DefaultQualityBand
	}
	if r.Bench.Seed == nil {
		seed := contract.DefaultBenchSeed
		r.Bench.Seed = &seed
	}
	if r.Bench.Mode == "" {
		r.Bench.Mode = "standard"
	}
	for i := range r.Staging {
		if r.Staging[i].Verify == "" {
			r.Staging[i].Verify = DefaultVerify
		}
	}
}

// IsFleetConfigFile says whether a file in a recipes directory is a fleet
// config (sparklane.toml, sparklane.example.toml) rather than a lane.
func IsFleetConfigFile(path string) bool {
	b := filepath.Base(path)
	return strings.HasPrefix(b, "sparklane") && strings.HasSuffix(b, ".toml")
}

// LoadRecipes is LoadRecipeDir without the skip list, its warnings
// dropped; callers that can show warnings use LoadRecipeDir.
func LoadRecipes(dir string) ([]*Recipe, error) {
	rs, _, err := LoadRecipeDir(dir)
	return rs, err
}

// LoadRecipeDir reads every recipe in dir (*.toml except fleet configs
// named sparklane*.toml, *.yaml, *.yml), in name order. Files in skip (the
// fleet config in use) are never read. What is not a recipe is skipped
// with a warning naming it: a FIFO, socket or device (never opened: a FIFO
// would block the open forever), a fleet config under another name, a
// YAML file without sparkrun's keys (docker-compose). Every recipe's
// errors are reported together; the recipes that did load are returned
// alongside the error so `starter lanes` can still list them.
func LoadRecipeDir(dir string, skip ...string) ([]*Recipe, []string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("read recipes_dir %s: %w: set recipes_dir in the fleet config", dir, err))
	}
	var skipInfo []fs.FileInfo
	for _, p := range skip {
		if st, err := os.Stat(p); err == nil {
			skipInfo = append(skipInfo, st)
		}
	}
	var warnings []string
	var names []string
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if ext != ".toml" && ext != ".yaml" && ext != ".yml" {
			continue
		}
		if ext == ".toml" && IsFleetConfigFile(name) {
			continue
		}
		p := filepath.Join(dir, name)
		// Stat follows a symlink to what it names, without opening it.
		st, err := os.Stat(p)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: %v: skipped", p, err))
			continue
		}
		if st.IsDir() {
			continue
		}
		if !st.Mode().IsRegular() {
			warnings = append(warnings, fmt.Sprintf("%s: not a regular file (%s): skipped", p, strictdecode.FileKind(st.Mode())))
			continue
		}
		if slices.ContainsFunc(skipInfo, func(s os.FileInfo) bool { return os.SameFile(s, st) }) {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var out []*Recipe
	var errs []error
	for _, n := range names {
		p := filepath.Join(dir, n)
		r, err := LoadRecipe(p)
		if errors.Is(err, ErrNotRecipe) {
			warnings = append(warnings, fmt.Sprintf("%v: skipped", unwrapFault(err)))
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	if len(errs) > 0 {
		return out, warnings, fault.Permanent(fault.InvalidSpec, errors.Join(errs...))
	}
	return out, warnings, nil
}

// unwrapFault is the message of err without its fault wrapper.
func unwrapFault(err error) error {
	var f *fault.Error
	if errors.As(err, &f) {
		return f.Err
	}
	return err
}
