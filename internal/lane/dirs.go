package lane

import (
	"fmt"
	"path/filepath"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/fault"
)

// LaneDir is the one place a per-lane path is derived: base/LANE, refused
// unless lane is a valid name (so "../x" or "a/b" never leave base).
func LaneDir(base, lane string) (string, error) {
	if err := config.ValidName(lane); err != nil {
		return "", fault.Permanent(fault.InvalidSpec, fmt.Errorf("lane %q: %w", lane, err))
	}
	return filepath.Join(base, lane), nil
}

// ReportsDir is where a lane's bench reports live: RECIPES_DIR/LANE/reports.
func ReportsDir(cfg *config.Config, lane string) (string, error) {
	d, err := LaneDir(cfg.RecipesDir, lane)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "reports"), nil
}
