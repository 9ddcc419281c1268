package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"gopkg.in/yaml.v3"

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
)

// DefaultProbeGrace is how long the fleet probe waits before its one
// re-probe when the config does not say.
const DefaultProbeGrace = 5 * time.Second

// Load reads the fleet config. With path empty it tries $SPARKLANE_CONFIG,
// then ./sparklane.toml. Unknown keys and wrong types are errors naming the
// file and the full key path (all of them at once), because a key silently
// swallowed into the wrong table once made staging read the wrong cache.
// Relative state_dir and recipes_dir are taken relative to the file's
// directory; "~" is expanded.
func Load(path string) (*Config, error) {
	if path == "" {
		if env := os.Getenv("SPARKLANE_CONFIG"); env != "" {
			path = env
		} else if _, err := os.Stat("sparklane.toml"); err == nil {
			path = "sparklane.toml"
		} else {
			return nil, fault.Permanent(fault.InvalidSpec, errors.New(
				"no fleet config: --config not given, $SPARKLANE_CONFIG unset and ./sparklane.toml absent: copy recipes/sparklane.example.toml to ./sparklane.toml and edit it"))
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("read config %s: %w: pass --config PATH or set $SPARKLANE_CONFIG", path, err))
	}
	tree, err := parseTOML(path, data)
	if err != nil {
		return nil, err
	}
	cfg := &Config{}
	d := &decoder{file: path, rootKeys: structKeys(reflect.TypeOf(Config{}))}
	d.decode("", tree, reflect.ValueOf(cfg).Elem(), "")
	if len(d.errs) > 0 {
		return nil, fault.Permanent(fault.InvalidSpec, errors.Join(d.errs...))
	}
	cfg.File = path
	if err := applyConfigDefaults(cfg); err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, err)
	}
	return cfg, nil
}

func applyConfigDefaults(cfg *Config) error {
	dir := filepath.Dir(cfg.File)
	if cfg.Temporal.Namespace == "" {
		cfg.Temporal.Namespace = DefaultNamespace
	}
	if cfg.Temporal.Port == 0 {
		cfg.Temporal.Port = DefaultPort
	}
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

// parseTOML parses data into a generic tree; syntax errors carry
// file:line:column.
func parseTOML(file string, data []byte) (map[string]any, error) {
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

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtTpPeE]?)(i?)([bB]?)$`)

// ParseSize reads a byte size as operators write it: "100G", "55G",
// "1.5T", "512M", "100GiB", "4096". A bare unit letter and the "iB" forms
// are binary (G = 2^30, what df -h prints); "GB", "TB"... are decimal.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size: write it like \"100G\", \"1.5T\" or \"512M\"", s)
	}
	num, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	unit := strings.ToUpper(m[2])
	base := 1024.0
	if m[3] == "" && m[4] != "" && unit != "" {
		base = 1000
	}
	if m[3] != "" && unit == "" {
		return 0, fmt.Errorf("%q is not a size: \"i\" needs a unit letter (GiB)", s)
	}
	exp := strings.Index("KMGTPE", unit) + 1
	if unit == "" {
		exp = 0
	}
	v := num * math.Pow(base, float64(exp))
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if exp == 0 && num != math.Trunc(num) {
		return 0, fmt.Errorf("%q: a byte count must be whole", s)
	}
	return int64(v), nil
}

// LoadRecipe reads one recipe: TOML (*.toml, sparklane's format) or a
// sparkrun v2 YAML recipe (*.yaml, *.yml), loaded unmodified. Unknown keys
// are errors naming the file and key path.
func LoadRecipe(path string) (*Recipe, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("read recipe %s: %w", path, err))
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".toml":
		return parseTOMLRecipe(path, data)
	case ".yaml", ".yml":
		return parseSparkrun(path, data)
	default:
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: unknown recipe format: name it NAME.toml (sparklane) or NAME.yaml (sparkrun v2)", path))
	}
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
	r := &Recipe{}
	d := &decoder{file: path, rootKeys: structKeys(reflect.TypeOf(Recipe{}))}
	d.decode("", tree, reflect.ValueOf(r).Elem(), "")
	if len(d.errs) > 0 {
		return nil, fault.Permanent(fault.InvalidSpec, errors.Join(d.errs...))
	}
	r.File, r.Format = path, "toml"
	if r.Name == "" {
		r.Name = baseName(path)
	}
	applyRecipeDefaults(r)
	return r, nil
}

// Recipe defaults applied at load, so every consumer (serve, probe, bench,
// dry run) sees the same values.
const (
	DefaultProbePath   = "/v1/models"
	DefaultProbeReady  = 30 * time.Minute
	DefaultHookTimeout = 2 * time.Minute
	DefaultVerify      = "sampled"
	DefaultQualityBand = 2.0
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
	for i := range r.Staging {
		if r.Staging[i].Verify == "" {
			r.Staging[i].Verify = DefaultVerify
		}
	}
}

// sparkrunFile is the sparkrun v2 recipe shape: exactly the top-level keys
// sparkrun itself reads (so a typo is an error, not a silently ignored
// key), plus cluster, which sparklane lets a file pin.
type sparkrunFile struct {
	RecipeVersion any               `mapstructure:"recipe_version"`
	Model         string            `mapstructure:"model"`
	Runtime       string            `mapstructure:"runtime"`
	Container     string            `mapstructure:"container"`
	MinNodes      int               `mapstructure:"min_nodes"`
	MaxNodes      int               `mapstructure:"max_nodes"`
	Metadata      map[string]any    `mapstructure:"metadata"`
	Mods          []string          `mapstructure:"mods"`
	Defaults      map[string]any    `mapstructure:"defaults"`
	Env           map[string]string `mapstructure:"env"`
	Command       string            `mapstructure:"command"`
	Cluster       string            `mapstructure:"cluster"`
}

func parseSparkrun(path string, data []byte) (*Recipe, error) {
	var tree map[string]any
	if err := yaml.Unmarshal(data, &tree); err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: %w: fix the YAML syntax", path, err))
	}
	tree, _ = normalize(tree).(map[string]any)
	if tree == nil {
		tree = map[string]any{}
	}
	var f sparkrunFile
	d := &decoder{file: path}
	d.decode("", tree, reflect.ValueOf(&f).Elem(), "")
	version, _ := scalarString(f.RecipeVersion)
	if f.RecipeVersion != nil && version != "2" {
		d.errs = append(d.errs, fmt.Errorf("%s: recipe_version: %q is not supported: sparklane reads sparkrun v2 recipes (recipe_version: \"2\")", path, version))
	}
	if len(d.errs) > 0 {
		return nil, fault.Permanent(fault.InvalidSpec, errors.Join(d.errs...))
	}
	r := &Recipe{
		File: path, Format: "sparkrun", Name: baseName(path),
		Cluster: f.Cluster, Runtime: f.Runtime, Image: f.Container, Model: f.Model,
		MinNodes: f.MinNodes, MaxNodes: f.MaxNodes, RecipeVersion: version,
		Metadata: f.Metadata, Mods: f.Mods,
		Command: f.Command, Defaults: f.Defaults, Env: f.Env,
	}
	applyRecipeDefaults(r)
	return r, nil
}

// IsFleetConfigFile says whether a file in a recipes directory is a fleet
// config (sparklane.toml, sparklane.example.toml) rather than a lane.
func IsFleetConfigFile(path string) bool {
	b := filepath.Base(path)
	return strings.HasPrefix(b, "sparklane") && strings.HasSuffix(b, ".toml")
}

// LoadRecipes reads every recipe in dir (*.toml except fleet configs named
// sparklane*.toml, *.yaml, *.yml), in name order. Every file's errors are
// reported together; the recipes that did load are returned alongside the
// error so `starter lanes` can still list them.
func LoadRecipes(dir string) ([]*Recipe, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("read recipes_dir %s: %w: set recipes_dir in the fleet config", dir, err))
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".toml":
			if IsFleetConfigFile(e.Name()) {
				continue
			}
		case ".yaml", ".yml":
		default:
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var out []*Recipe
	var errs []error
	for _, n := range names {
		r, err := LoadRecipe(filepath.Join(dir, n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	if len(errs) > 0 {
		return out, fault.Permanent(fault.InvalidSpec, errors.Join(errs...))
	}
	return out, nil
}
