package contract

import (
	"fmt"

	"github.com/docker/go-units"
)

// binaryUnits are the IEC units HumanBytes prints.
var binaryUnits = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// HumanBytes prints n in binary units (1.5 GiB), through docker/go-units
// (the one byte formatter of the project: CLI, reports, engine-sim).
func HumanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return units.CustomSize("%.1f %s", float64(n), 1024, binaryUnits)
}
