package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/go-units"
	"github.com/go-viper/mapstructure/v2"
	toml "github.com/pelletier/go-toml/v2"
	"github.com/spf13/viper"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
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
)

// DefaultMetricsAddress is where workers serve /metrics unless
// metrics_address says otherwise: loopback, the port Prometheus's
// exporter conventions leave free for custom exporters.
const DefaultMetricsAddress = "127.0.0.1:9464"

// DefaultProbeGrace is how long the fleet probe waits before its one
// re-probe when the config does not say.
const DefaultProbeGrace = 5 * time.Second

// Limits on a config or recipe file, checked before it is parsed: the TOML
// parser's work grows with the square of the key count (140,000 keys took
// 37 s), and no fleet or lane needs more than a few hundred.
const (
	MaxFileBytes = 1 << 20
	MaxFileKeys  = 4096
)

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
	for _, k := range envKeys(reflect.TypeOf(Config{}), "") {
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
	v.SetDefault("temporal.ui_port", DefaultUIPort)
	return v
}

// envKeys lists the keys of t an environment variable may set: every
// scalar and list, recursing into tables, but not into arrays of tables
// ([[nodes]]), whose entries have no name an env var could carry.
func envKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		k := fieldKey(f)
		if k == "" {
			continue
		}
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && ft != durationType:
			out = append(out, envKeys(ft, join(prefix, k))...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
		default:
			out = append(out, join(prefix, k))
		}
	}
	return out
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
	data, err := readSpecFile(path, "config")
	if err != nil {
		return nil, err
	}
	tree, err := parseTOML(path, data)
	if err != nil {
		return nil, err
	}
	// The file as written: key names and case, then types (strict: a
	// quoted number in the file is an error, as the operator meant a string).
	errs := checkKeys(path, tree, reflect.TypeOf(Config{}))
	if derr := decodeTree(tree, &Config{}); derr != nil {
		errs = append(errs, decodeErrors(path, derr, len(errs) > 0, nil)...)
	}
	if len(errs) > 0 {
		return bad(errors.Join(errs...))
	}
	// The merged view: flag > env > file > default.
	v.SetConfigType("toml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return bad(fmt.Errorf("%s: %w: fix the TOML syntax", path, err))
	}
	cfg := &Config{}
	if err := v.UnmarshalExact(cfg, func(c *mapstructure.DecoderConfig) { decoderConfig(c, true) }); err != nil {
		envOf := func(key string) string {
			if ev := EnvVar(key); os.Getenv(ev) != "" {
				return ev
			}
			return ""
		}
		return bad(errors.Join(decodeErrors(path, err, false, envOf)...))
	}
	cfg.File = path
	if err := applyConfigDefaults(cfg); err != nil {
		return bad(err)
	}
	return cfg, nil
}

// readSpecFile reads a config or recipe file without ever blocking on a
// FIFO or device (it is opened non-blocking and must be a regular file)
// and refuses one over MaxFileBytes before reading it.
func readSpecFile(path, what string) ([]byte, error) {
	bad := func(format string, args ...any) ([]byte, error) {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf(format, args...))
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if what == "config" {
			return bad("read %s %s: %w: pass --config PATH or set $SPARKLANE_CONFIG", what, path, err)
		}
		return bad("read %s %s: %w", what, path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return bad("read %s %s: %w", what, path, err)
	}
	if !st.Mode().IsRegular() {
		return bad("%s: not a regular file (%s): a %s must be a regular file", path, fileKind(st.Mode()), what)
	}
	if st.Size() > MaxFileBytes {
		return bad("%s: %d bytes, over the %d-byte (1 MiB) limit for a %s file: split it or remove what it does not need", path, st.Size(), MaxFileBytes, what)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return bad("read %s %s: %w", what, path, err)
	}
	if len(data) > MaxFileBytes {
		return bad("%s: over the %d-byte (1 MiB) limit for a %s file: split it or remove what it does not need", path, MaxFileBytes, what)
	}
	return data, nil
}

// fileKind names a non-regular file's type for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return m.Type().String()
}

func applyConfigDefaults(cfg *Config) error {
	dir := filepath.Dir(cfg.File)
	if cfg.Temporal.Namespace == "" {
		cfg.Temporal.Namespace = DefaultNamespace
	}
	// temporal.port: an absent key is DefaultPort (viper's default); an
	// explicit 0 stays 0, a free port (see Temporal.Port).
	if cfg.Temporal.UIPort == 0 {
		cfg.Temporal.UIPort = DefaultUIPort
	}
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
	for i := range cfg.Nodes {
		n := &cfg.Nodes[i]
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

// parseTOML parses data into a generic tree, keys exactly as written;
// syntax errors carry file:line:column. A file with more than MaxFileKeys
// keys is refused before the parser sees it.
func parseTOML(file string, data []byte) (map[string]any, error) {
	if n := countTOMLKeys(data, MaxFileKeys+1); n > MaxFileKeys {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: more than %d keys, the limit for a config or recipe file: split it or remove keys", file, MaxFileKeys))
	}
	var tree map[string]any
	if err := toml.Unmarshal(data, &tree); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s:%d:%d: %s: fix the TOML syntax", file, row, col, de.Error()))
		}
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: %w: fix the TOML syntax", file, err))
	}
	if tree == nil {
		tree = map[string]any{}
	}
	return tree, nil
}

// countTOMLKeys counts, up to limit, the key/value pairs ('=' outside
// strings and comments) and table headers ('[' opening a line) of a TOML
// document: an upper bound on its keys that costs one pass.
func countTOMLKeys(data []byte, limit int) int {
	n := 0
	lineStart := true
	for i := 0; i < len(data) && n < limit; i++ {
		c := data[i]
		switch {
		case c == '\n':
			lineStart = true
			continue
		case c == ' ' || c == '\t' || c == '\r':
			continue
		case c == '#':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			i--
		case c == '"' || c == '\'':
			q := string(c)
			if i+2 < len(data) && data[i+1] == c && data[i+2] == c {
				q = strings.Repeat(q, 3)
			}
			j := i + len(q)
			for j < len(data) && !bytes.HasPrefix(data[j:], []byte(q)) {
				if c == '"' && data[j] == '\\' {
					j++
				}
				j++
			}
			i = j + len(q) - 1
		case c == '=':
			n++
		case c == '[' && lineStart:
			n++
		}
		lineStart = false
	}
	return n
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtTpP]?)(i?)([bB]?)$`)

// ParseSize reads a byte size as operators write it: "100G", "55G",
// "1.5T", "512M", "100GiB", "4096". A bare unit letter and the "iB" forms
// are binary (G = 2^30, what df -h prints; go-units' RAMInBytes); "GB",
// "TB"... are decimal (go-units' FromHumanSize). The form is checked first
// so that what go-units would also accept ("1e3", "5 b") stays an error.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	m := sizeRE.FindStringSubmatch(t)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size: write it like \"100G\", \"1.5T\" or \"512M\"", s)
	}
	unit, iB, b := m[2], m[3] != "", m[4] != ""
	if iB && unit == "" {
		return 0, fmt.Errorf("%q is not a size: \"i\" needs a unit letter (GiB)", s)
	}
	if unit == "" && strings.Contains(m[1], ".") {
		return 0, fmt.Errorf("%q: a byte count must be whole", s)
	}
	num, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	parse, base := units.RAMInBytes, 1024.0
	if unit != "" && b && !iB {
		parse, base = units.FromHumanSize, 1000
	}
	if num*math.Pow(base, float64(strings.IndexAny("KMGTP", strings.ToUpper(unit))+1)) >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	n, err := parse(strings.ReplaceAll(t, " ", ""))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size: write it like \"100G\", \"1.5T\" or \"512M\"", s)
	}
	return n, nil
}

// ErrNotRecipe marks a file in a recipes directory that is something else
// (a fleet config, a docker-compose file): LoadRecipeDir skips it with a
// warning; LoadRecipe on it is an error.
var ErrNotRecipe = errors.New("not a lane recipe")

// LoadRecipe reads one recipe: TOML (*.toml, sparklane's format) or a
// sparkrun v2 YAML recipe (*.yaml, *.yml), loaded unmodified. Unknown keys
// are errors naming the file and key path. Only regular files are read.
func LoadRecipe(path string) (*Recipe, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".toml" && ext != ".yaml" && ext != ".yml" {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: unknown recipe format: name it NAME.toml (sparklane) or NAME.yaml (sparkrun v2)", path))
	}
	data, err := readSpecFile(path, "recipe")
	if err != nil {
		return nil, err
	}
	if ext == ".toml" {
		return parseTOMLRecipe(path, data)
	}
	return parseSparkrun(path, data)
}

func baseName(path string) string {
	b := filepath.Base(path)
	return strings.TrimSuffix(b, filepath.Ext(b))
}

func parseTOMLRecipe(path string, data []byte) (*Recipe, error) {
	tree, err := parseTOML(path, data)
	if err != nil {
		return nil, err
	}
	if !hasAny(tree, "runtime", "command", "image", "staging") && hasAny(tree, "nodes", "clusters", "temporal") {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: %w: it is a fleet config ([[nodes]], [[clusters]]); pass it with --config", path, ErrNotRecipe))
	}
	r := &Recipe{}
	errs := checkKeys(path, tree, reflect.TypeOf(Recipe{}))
	if derr := decodeTree(tree, r); derr != nil {
		errs = append(errs, decodeErrors(path, derr, len(errs) > 0, nil)...)
	}
	if len(errs) > 0 {
		return nil, fault.Permanent(fault.InvalidSpec, errors.Join(errs...))
	}
	r.File, r.Format = path, "toml"
	if r.Name == "" {
		r.Name = baseName(path)
	}
	if r.RuntimeConfig != nil {
		r.LoadWarnings = append(r.LoadWarnings, fmt.Sprintf("%s: runtime_config: recorded, not applied: its keys (%s) are read by sparkrun's runtime plugins; put flags in command or defaults", path, strings.Join(sortedAnyKeys(r.RuntimeConfig), ", ")))
	}
	if r.BuildArgs != nil || r.Builder != "" || r.BuilderConfig != nil {
		r.LoadWarnings = append(r.LoadWarnings, fmt.Sprintf("%s: build_args: recorded (builder %q): sparklane builds no image; %s must already be on every node", path, r.Builder, r.Image))
	}
	// mods and mode mean the same as in a sparkrun recipe.
	mods, merrs := resolveMods(path, r.Mods)
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

// countKeys counts the keys of a decoded tree, stopping at limit.
func countKeys(v any, limit int) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, e := range x {
				if n >= limit {
					return
				}
				n++
				walk(e)
			}
		case []any:
			for _, e := range x {
				if n >= limit {
					return
				}
				walk(e)
			}
		}
	}
	walk(v)
	return n
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
			warnings = append(warnings, fmt.Sprintf("%s: not a regular file (%s): skipped", p, fileKind(st.Mode())))
			continue
		}
		same := false
		for _, s := range skipInfo {
			same = same || os.SameFile(s, st)
		}
		if same {
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
