package config

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// The fleet config's [staging] table: sizes as operators write them, the
// floor's default when absent, "0" turning it off, and the environment
// overriding the file.
func TestStagingLimitsLoad(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Load(conftest.WriteFile(t, dir, "sparklane.toml", conftest.GoodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Staging.ServingRate != 0 || cfg.Staging.Floor() != 8<<30 {
		t.Fatalf("no [staging]: serving_rate %d, floor %d; want unbounded and 8 GiB", cfg.Staging.ServingRate, cfg.Staging.Floor())
	}
	cfg, err = Load(conftest.WriteFile(t, dir, "set.toml", conftest.GoodConfig+"\n[staging]\nserving_rate = \"400M\"\nmin_available = \"12G\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Staging.ServingRate != 400<<20 || cfg.Staging.Floor() != 12<<30 {
		t.Fatalf("[staging] 400M, 12G: serving_rate %d, floor %d", cfg.Staging.ServingRate, cfg.Staging.Floor())
	}
	if err := validate(cfg, nil); err != nil {
		t.Fatalf("valid [staging]: %v", err)
	}
	for _, off := range []string{`"0"`, `0`} {
		cfg, err = Load(conftest.WriteFile(t, dir, "off.toml", conftest.GoodConfig+"\n[staging]\nmin_available = "+off+"\n"))
		if err != nil || cfg.Staging.Floor() != 0 {
			t.Fatalf("min_available = %s: floor %v, %v; want 0 (off)", off, cfg.Staging, err)
		}
	}
	t.Setenv("SPARKLANE_STAGING_MIN_AVAILABLE", "0")
	t.Setenv("SPARKLANE_STAGING_SERVING_RATE", "1G")
	cfg, err = Load(conftest.WriteFile(t, dir, "env.toml", conftest.GoodConfig+"\n[staging]\nmin_available = \"12G\"\n"))
	if err != nil || cfg.Staging.Floor() != 0 || cfg.Staging.ServingRate != 1<<30 {
		t.Fatalf("environment over the file: %+v %v, want floor 0 and 1 GiB/s", cfg.Staging, err)
	}
}

// Every mistake in [staging] is an error naming the file and the key; and
// a recipe's [[staging]] (an array of tables) pasted into the fleet
// config is refused, not taken for the fleet's limits.
func TestStagingLimitsErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ body, want string }{
		{"[staging]\nrate = \"400M\"\n", "staging.rate"},
		{"[staging]\nServing_Rate = \"400M\"\n", "staging.serving_rate"},
		{"[staging]\nserving_rate = \"fast\"\n", "staging.serving_rate"},
		{"[staging]\nmin_available = true\n", "staging.min_available"},
		{"[staging]\nmin_available = \"-1G\"\n", "staging.min_available"},
		{"[[staging]]\nkind = \"hub-mirror\"\nsrc = \"/nas/hub\"\ndst = \"/nvme/hub\"\n", "staging: [[staging]] blocks (what to stage) belong in a lane recipe"},
	} {
		p := conftest.WriteFile(t, dir, "bad.toml", conftest.GoodConfig+"\n"+c.body)
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q: %v; want an error naming %s and %s", c.body, err, p, c.want)
		}
	}
	cfg := loadGoodTail(t, dir, "slow.toml", "\n[staging]\nserving_rate = \"1K\"\n")
	if err := validate(cfg, nil); err == nil || !strings.Contains(err.Error(), "staging.serving_rate") || !strings.Contains(err.Error(), "below 1M") {
		t.Fatalf("serving_rate = 1K: %v; want an error naming staging.serving_rate", err)
	}
}

// A recipe's [[staging]] blocks are unchanged by the fleet's [staging]:
// the two files' keys are checked against their own types.
func TestRecipeStagingBlocksStillLoad(t *testing.T) {
	dir := t.TempDir()
	p := conftest.WriteFile(t, dir, "lane.toml", "name = \"lane\"\ncluster = \"pair\"\nruntime = \"sim\"\nimage = \"sim\"\nmodel = \"org/m\"\ncommand = \"engine-sim\"\n\n[[staging]]\nkind = \"hub-mirror\"\nsrc = \"/nas/hub\"\ndst = \"/nvme/hub\"\nrepos = [\"org/m\"]\n")
	r, err := LoadRecipe(p)
	if err != nil || len(r.Staging) != 1 || r.Staging[0].Kind != "hub-mirror" {
		t.Fatalf("recipe with [[staging]]: %+v %v", r, err)
	}
	p = conftest.WriteFile(t, dir, "lane2.toml", "name = \"lane2\"\ncluster = \"pair\"\nruntime = \"sim\"\nimage = \"sim\"\nmodel = \"org/m\"\ncommand = \"engine-sim\"\n\n[staging]\nserving_rate = \"400M\"\n")
	if _, err := LoadRecipe(p); err == nil || !strings.Contains(err.Error(), "staging") {
		t.Fatalf("a fleet [staging] table in a recipe: %v; want an error naming staging", err)
	}
}

// A fleet config with a [staging] table, under a name the recipe loader
// reads, is still told apart from a recipe (whose staging is [[staging]])
// and skipped with a warning.
func TestFleetConfigWithStagingIsNoRecipe(t *testing.T) {
	dir := t.TempDir()
	conftest.WriteFile(t, dir, "ok.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\n")
	other := conftest.WriteFile(t, dir, "other-fleet.toml", conftest.HostileFleet+"\n[staging]\nmin_available = \"4G\"\n")
	rs, warnings, err := LoadRecipeDir(dir)
	if err != nil || len(rs) != 1 || rs[0].Name != "ok" {
		t.Fatalf("loaded %v, %v", rs, err)
	}
	conftest.WantLines(t, strings.Join(warnings, "\n"), other+": not a lane recipe: it is a fleet config")
}

// loadGoodTail loads conftest.GoodConfig followed by tail (tables after
// the fleet's), failing t when it does not load.
func loadGoodTail(t *testing.T, dir, name, tail string) *Config {
	t.Helper()
	cfg, err := Load(conftest.WriteFile(t, dir, name, conftest.GoodConfig+tail))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
