package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// flagViper is what starter does: --config bound to the "config" key.
func flagViper(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("starter", pflag.ContinueOnError)
	fs.String("config", "", "fleet config")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func loadWithFlags(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	v := NewViper()
	if err := v.BindPFlag("config", flagViper(t, args...).Lookup("config")); err != nil {
		t.Fatal(err)
	}
	return LoadViper(v)
}

// Level 1: the --config flag beats $SPARKLANE_CONFIG and ./sparklane.toml.
func TestPrecedenceFlagPath(t *testing.T) {
	dir := t.TempDir()
	flagFile := conftest.WriteFile(t, dir, "flag.toml", "state_dir = \"from-flag\"\n")
	envFile := conftest.WriteFile(t, dir, "env.toml", "state_dir = \"from-env\"\n")
	conftest.WriteFile(t, dir, "sparklane.toml", "state_dir = \"from-cwd\"\n")
	t.Chdir(dir)
	t.Setenv("SPARKLANE_CONFIG", envFile)

	cfg, err := loadWithFlags(t, "--config", flagFile)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.File != flagFile || cfg.StateDir != filepath.Join(dir, "from-flag") {
		t.Fatalf("--config: file %s state_dir %s", cfg.File, cfg.StateDir)
	}
	cfg, err = loadWithFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.File != envFile || cfg.StateDir != filepath.Join(dir, "from-env") {
		t.Fatalf("$SPARKLANE_CONFIG: file %s state_dir %s", cfg.File, cfg.StateDir)
	}
	t.Setenv("SPARKLANE_CONFIG", "")
	cfg, err = loadWithFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.File != "sparklane.toml" || cfg.StateDir != filepath.Join(dir, "from-cwd") {
		t.Fatalf("./sparklane.toml: file %s state_dir %s", cfg.File, cfg.StateDir)
	}
}

// Level 2: SPARKLANE_* variables beat the file, nested keys included.
func TestPrecedenceEnvOverridesFile(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "sparklane.toml", strings.Replace(conftest.GoodConfig, "ui_port = 9233", "ui_port = 9233\naddress = \"file-host:7233\"", 1))
	t.Setenv("SPARKLANE_TEMPORAL_ADDRESS", "env-host:7233")
	t.Setenv("SPARKLANE_TEMPORAL_UI_PORT", "9999")
	t.Setenv("SPARKLANE_SHARED_ROOTS", "/nas, /scratch")
	t.Setenv("SPARKLANE_PROBE_GRACE", "9s")
	t.Setenv("SPARKLANE_HF_CACHE_DIR", "/other/hub")
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Temporal.Address != "env-host:7233" || cfg.Temporal.UIPort != 9999 || cfg.ProbeGrace != 9*time.Second ||
		cfg.HFCacheDir != "/other/hub" || strings.Join(cfg.SharedRoots, "|") != "/nas|/scratch" {
		t.Fatalf("env did not override: %+v", cfg)
	}
	// Keys the env does not set still come from the file and defaults.
	if cfg.Temporal.Port != DefaultPort || len(cfg.Nodes) != 2 || cfg.StateDir != filepath.Join(dir, "state") {
		t.Fatalf("file/defaults lost: %+v", cfg)
	}

	t.Setenv("SPARKLANE_TEMPORAL_PORT", "seventy")
	_, err = Load(p)
	want := p + `: temporal.port (from $SPARKLANE_TEMPORAL_PORT): expected an integer, got string "seventy"`
	if err == nil || err.Error() != want {
		t.Fatalf("bad env value\n got: %v\nwant: %s", err, want)
	}
}

// Level 3 and 4: the file beats the defaults; what it leaves out is
// defaulted.
func TestPrecedenceFileOverDefault(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "sparklane.toml", `
probe_grace = "1m"
[temporal]
namespace = "prod"
`)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProbeGrace != time.Minute || cfg.Temporal.Namespace != "prod" {
		t.Fatalf("file values: %+v", cfg)
	}
	if cfg.Temporal.Port != DefaultPort || cfg.Temporal.UIPort != DefaultUIPort ||
		cfg.RecipesDir != filepath.Join(dir, DefaultRecipesDir) || cfg.Temporal.Address != "" {
		t.Fatalf("defaults: %+v", cfg)
	}
	empty := conftest.WriteFile(t, dir, "empty.toml", "")
	cfg, err = Load(empty)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProbeGrace != DefaultProbeGrace || cfg.Temporal.Namespace != DefaultNamespace {
		t.Fatalf("defaults of an empty file: %+v", cfg)
	}
}

// viper folds keys to lower case and mapstructure matches names without
// case: a key in another case must be an error, not silently accepted.
func TestKeyCaseTrap(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "sparklane.toml", `
State_Dir = "/x"
[temporal]
Address = "h:7233"
[[nodes]]
name = "a"
Roots = ["/nvme"]
[[clusters]]
name = "c"
nodes = ["a"]
HF_cache_dir = "/nas/hub"
`)
	_, err := Load(p)
	if err == nil {
		t.Fatal("keys in the wrong case accepted")
	}
	got := err.Error()
	for _, w := range []string{
		p + ": key State_Dir: write it state_dir",
		p + ": key temporal.Address: write it temporal.address",
		p + ": key nodes[0].Roots: write it nodes[0].roots",
		p + ": unknown key clusters[0].HF_cache_dir — did you mean the root key hf_cache_dir?",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
	if n := len(strings.Split(got, "\n")); n != 4 {
		t.Errorf("want 4 errors, got %d:\n%s", n, got)
	}

	r := conftest.WriteFile(t, dir, "lane.toml", "Runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\n[[staging]]\nKind = \"hub-mirror\"\n")
	_, err = LoadRecipe(r)
	if err == nil || !strings.Contains(err.Error(), r+": key Runtime: write it runtime") || !strings.Contains(err.Error(), r+": key staging[0].Kind: write it staging[0].kind") {
		t.Fatalf("recipe case trap: %v", err)
	}
	y := conftest.WriteFile(t, dir, "lane.yaml", "recipe_version: \"2\"\nModel: m\nruntime: vllm\ncontainer: c\ncommand: x\n")
	_, err = LoadRecipe(y)
	if err == nil || !strings.Contains(err.Error(), y+": key Model: write it model") {
		t.Fatalf("sparkrun case trap: %v", err)
	}
}
