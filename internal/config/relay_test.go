package config

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

func TestRelayKeysLoadAndValidate(t *testing.T) {
	dir := t.TempDir()
	cfg := loadGood(t, dir, "sparklane.toml", "relay = false\nrelay_port = 7400\n")
	if cfg.Relay == nil || *cfg.Relay || cfg.RelayPort != 7400 {
		t.Errorf("relay %v, relay_port %d", cfg.Relay, cfg.RelayPort)
	}
	bad := loadGood(t, dir, "bad.toml", "relay_port = 70000\n")
	if err := validate(bad, nil); err == nil || !strings.Contains(err.Error(), "relay_port") {
		t.Errorf("relay_port = 70000: %v, want an error naming relay_port", err)
	}
	p := conftest.WriteFile(t, dir, "lane.toml", "name = \"lane\"\ncluster = \"pair\"\nruntime = \"sim\"\nimage = \"sim\"\nmodel = \"org/m\"\ncommand = \"engine-sim\"\nrelay = false\n")
	r, err := LoadRecipe(p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Relay == nil || *r.Relay {
		t.Errorf("recipe relay = false loaded as %v", r.Relay)
	}
}

func TestImagePort(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Load(conftest.WriteFile(t, dir, "sparklane.toml", conftest.GoodConfig))
	if err != nil || cfg.ImagePort != DefaultImagePort {
		t.Fatalf("image_port default: %d, %v", cfg.ImagePort, err)
	}
	bad := loadGood(t, dir, "bad.toml", "image_port = 70000\n")
	if err := validate(bad, nil); err == nil || !strings.Contains(err.Error(), "image_port") {
		t.Fatalf("image_port = 70000: %v: want an error naming image_port", err)
	}
}

// loadGood loads head followed by conftest.GoodConfig, written to
// dir/name, failing t when it does not load.
func loadGood(t *testing.T, dir, name, head string) *Config {
	t.Helper()
	cfg, err := Load(conftest.WriteFile(t, dir, name, head+conftest.GoodConfig))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
