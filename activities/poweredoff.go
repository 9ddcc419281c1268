package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/contract"
)

// poweredOffRecord is written under STATE_DIR/power when sparklane powers a
// node down and removed when it powers it up, so a nightly verify can tell
// "off on purpose" from "should be up and is not".
type poweredOffRecord struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"`
}

func (a *ControlActivities) poweredOffPath(node string) string {
	return filepath.Join(a.Config.StateDir, "power", node+".off.json")
}

// markPoweredOff records that sparklane powered node down (a node only:
// [[devices]] are not verified).
func (a *ControlActivities) markPoweredOff(node string) error {
	if a.Config.Node(node) == nil || a.Config.StateDir == "" {
		return nil
	}
	b, _ := json.Marshal(poweredOffRecord{Node: node, At: time.Now().UTC()})
	p := a.poweredOffPath(node)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("record node %s powered off in %s: %w", node, filepath.Dir(p), err)
	}
	if err := atomicfile.Write(p, b, 0o644); err != nil {
		return fmt.Errorf("record node %s powered off: %w", node, err)
	}
	return nil
}

// clearPoweredOff forgets the record once the node is up again.
func (a *ControlActivities) clearPoweredOff(node string) error {
	if a.Config.StateDir == "" {
		return nil
	}
	if err := os.Remove(a.poweredOffPath(node)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("forget node %s powered off: %w", node, err)
	}
	return nil
}

// NodeOff answers whether an unreachable node is off on purpose, for the
// nightly verify: such a node is "off, not verified", not drift and not a
// failure; a node that should be up and is not stays an error.
func (a *ControlActivities) NodeOff(ctx context.Context, in contract.NodeOffInput) (contract.NodeOffResult, error) {
	res := contract.NodeOffResult{Node: in.Node}
	if off, why := a.relayOff(ctx, in.Node); off {
		res.Off, res.Why = true, why
		return res, nil
	}
	b, err := os.ReadFile(a.poweredOffPath(in.Node))
	if err != nil {
		return res, nil
	}
	var r poweredOffRecord
	if json.Unmarshal(b, &r) == nil {
		res.Off, res.Why = true, "powered off by sparklane at "+r.At.Format(time.RFC3339)
	}
	return res, nil
}
