package cli

import (
	"fmt"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
)

// laneFit is the memory fit of a lane about to run (cutover, its dry
// run): the estimate (nil when it cannot be made yet, note says why) and
// the refusal, nil when it fits or --force (a.fitForce) overrides it.
// fresh is node memory a fleet probe just reported; it wins over the
// record of earlier probes and is added to it.
func (a *App) laneFit(cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan, fresh map[string]int64) (*lane.FitEstimate, string, error) {
	known, err := lane.KnownNodeMemory(cfg.StateDir, fresh)
	if err != nil {
		fmt.Fprintf(a.Err, "warning: record node memory under %s: %v\n", cfg.StateDir, err)
	}
	est, note := lane.Fit(cfg, r, plan, known)
	if est == nil {
		return nil, note, nil
	}
	if ferr := est.Err(); ferr != nil {
		if a.fitForce {
			return est, "--force: running it although " + ferr.Error(), nil
		}
		return est, "", exitCode(1, ferr)
	}
	return est, "memory fit: " + strings.Join(est.Lines(), "; "), nil
}

// printFit prints an estimate's arithmetic (dry run).
func printFit(a *App, est *lane.FitEstimate, note string) {
	if est != nil {
		fmt.Fprintln(a.Out, "memory fit (weights from the safetensors headers, KV cache from the engine flags):")
		for _, l := range est.Lines() {
			fmt.Fprintf(a.Out, "  %s\n", l)
		}
	}
	if note != "" && (est == nil || strings.HasPrefix(note, "--force")) {
		fmt.Fprintf(a.Out, "notice: %s\n", note)
	}
}
