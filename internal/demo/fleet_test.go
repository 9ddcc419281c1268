package demo

import (
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// The demo's config loads as the fleet config it is, with the memory
// floor of staging beside a serving lane lowered for simulated nodes that
// share one machine's memory.
func TestDemoConfigLoadsWithItsFloor(t *testing.T) {
	dir := t.TempDir()
	f, err := WriteFleet(dir, filepath.Join(dir, "state"), NAS{Hub: filepath.Join(dir, "nas", "hub")}, "img", 7000, -1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(f.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if c.Staging.Floor() != 1<<30 || c.Staging.ServingRate != 0 {
		t.Fatalf("demo [staging]: %+v, want min_available 1 GiB and no rate", c.Staging)
	}
}
