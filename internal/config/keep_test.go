package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// [keep] loads in the config and in a recipe; bad values and unknown keys
// are errors naming the key.
func TestKeepKeysLoadAndValidate(t *testing.T) {
	dir := t.TempDir()
	cfg := loadGood(t, dir, "sparklane.toml", "keep = { interval = \"10s\", restarts = 5, window = \"2h\" }\n")
	if cfg.Keep.Interval != 10*time.Second || cfg.Keep.Restarts != 5 || cfg.Keep.Window != 2*time.Hour || cfg.Keep.Off {
		t.Errorf("keep %+v", cfg.Keep)
	}
	bad := loadGood(t, dir, "bad.toml", "keep = { restarts = -1 }\n")
	if err := validate(bad, nil); err == nil || !strings.Contains(err.Error(), "keep.restarts") {
		t.Errorf("bad [keep]: %v, want an error naming keep.restarts", err)
	}
	// Floors: a written interval under 1s or window under 1m (0s included:
	// it is not "the default", the key left out is) is refused at load,
	// naming the key; in the config and in a recipe alike.
	for _, tc := range []struct{ keep, key string }{
		{`interval = "0s"`, "keep.interval"}, {`interval = "10ms"`, "keep.interval"},
		{`window = "0s"`, "keep.window"}, {`window = "30s"`, "keep.window"},
	} {
		p := conftest.WriteFile(t, dir, "floor.toml", "keep = { "+tc.keep+" }\n"+conftest.GoodConfig)
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), "floor") {
			t.Errorf("config keep = { %s }: %v, want a floor error naming %s", tc.keep, err, tc.key)
		}
		rp := conftest.WriteFile(t, dir, "floor-lane.toml", "name = \"lane\"\ncluster = \"pair\"\nruntime = \"sim\"\nimage = \"sim\"\nmodel = \"org/m\"\ncommand = \"engine-sim\"\n\n[keep]\n"+tc.keep+"\n")
		if _, err := LoadRecipe(rp); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(tc.key, "keep.")) || !strings.Contains(err.Error(), "floor") {
			t.Errorf("recipe [keep] %s: %v, want a floor error naming the key", tc.keep, err)
		}
	}
	p := conftest.WriteFile(t, dir, "typo.toml", "keep = { intervall = \"10s\" }\n"+conftest.GoodConfig)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "intervall") {
		t.Errorf("keep.intervall: %v, want an unknown-key error naming it", err)
	}
	p = conftest.WriteFile(t, dir, "lane.toml", "name = \"lane\"\ncluster = \"pair\"\nruntime = \"sim\"\nimage = \"sim\"\nmodel = \"org/m\"\ncommand = \"engine-sim\"\n\n[keep]\ninterval = \"1m\"\noff = true\n")
	r, err := LoadRecipe(p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Keep.Interval != time.Minute || !r.Keep.Off {
		t.Errorf("recipe [keep] loaded as %+v", r.Keep)
	}
}
