package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/fault"
)

// RowsMismatch is the permanent fault type of a rows_env variable that
// does not agree with what is staged on the node: the manifest is another
// rank's or world's, the rank's rows are not its tile of the table, or
// the recipe's rows differ from the staged table. The runtime would refuse
// to start (or read the wrong rows); re-stage or fix the recipe.
const RowsMismatch = "RowsMismatch"

// RowsEnv computes the value of a sparse-rows block's rows_env on this
// node (dir is the block's staged dst, fs_root applied): the table's total
// rows per layer, comma-separated in layer order, read from the staged
// manifest (sparse-copy) or the recipe's rows (packed). It cross-checks it
// as the runtime does: every layer's staged rows must be exactly the
// rank's tile (sparserows.Tile) of that total, and the recipe's rows, when
// given, must be the staged total of every layer.
func RowsEnv(node, dir string, rf contract.RowsFrom) (string, error) {
	bad := func(format string, a ...any) error {
		return fault.Permanent(RowsMismatch, fmt.Errorf("node %s: %s for %s: %s", node, rf.Env, dir, fmt.Sprintf(format, a...)))
	}
	missing := func(p string, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return fault.Permanent(fault.SourceMissing, fmt.Errorf("node %s: %s: %s is not staged (%v): stage the lane first", node, rf.Env, p, err))
		}
		return fmt.Errorf("node %s: %s: read %s: %w", node, rf.Env, p, err)
	}
	check := func(layer int, tensor string, total, first, count int64) error {
		f, c, err := sparserows.Tile(total, rf.TP, rf.Rank)
		if err != nil {
			return bad("layer %d (%s): %v", layer, tensor, err)
		}
		if first != f || count != c {
			return bad("layer %d (%s): staged rows [%d,+%d), but rank %d of tp %d owns [%d,+%d) of %d rows: staged for another world shape or table, re-stage", layer, tensor, first, count, rf.Rank, rf.TP, f, c, total)
		}
		return nil
	}
	var totals []string
	switch rf.Format {
	case sparserows.FormatSparseCopy:
		p := filepath.Join(dir, sparserows.LocalManifestName)
		m, err := sparserows.ReadLocalManifest(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", missing(p, err)
			}
			return "", bad("%v", err)
		}
		if m.Rank != rf.Rank || m.TP != rf.TP {
			return "", bad("%s is rank %d of tp %d, this node is rank %d of tp %d: re-stage", p, m.Rank, m.TP, rf.Rank, rf.TP)
		}
		if len(m.Tensors) != len(rf.Layers) {
			return "", bad("%s lists %d tables, the recipe stages layers %v: re-stage", p, len(m.Tensors), rf.Layers)
		}
		for i, t := range m.Tensors {
			if t.Layer != rf.Layers[i] {
				return "", bad("%s lists layer %d where the recipe stages layer %d: re-stage", p, t.Layer, rf.Layers[i])
			}
			if rf.Rows > 0 && t.RowsTotal != rf.Rows {
				return "", bad("layer %d (%s) has %d rows staged, the recipe's rows says %d: fix rows (or drop it: the staged totals are used)", t.Layer, t.Tensor, t.RowsTotal, rf.Rows)
			}
			if err := check(t.Layer, t.Tensor, t.RowsTotal, t.First, t.Count); err != nil {
				return "", err
			}
			totals = append(totals, strconv.FormatInt(t.RowsTotal, 10))
		}
	case sparserows.FormatPacked:
		if rf.Rows <= 0 {
			return "", fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: %s: a packed block's files hold only the rank's rows: give the table's total as rows in the recipe", node, rf.Env))
		}
		for _, l := range rf.Layers {
			p := filepath.Join(dir, sparserows.PackedFileName(l, rf.Rank, rf.TP))
			h, err := sparserows.ReadPackedHeader(p)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return "", missing(p, err)
				}
				return "", bad("%v: re-stage", err)
			}
			if err := check(l, h.Tensor, rf.Rows, h.FirstRow, h.RowCount); err != nil {
				return "", err
			}
			totals = append(totals, strconv.FormatInt(rf.Rows, 10))
		}
	default:
		return "", fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: %s: unknown sparse-rows format %q", node, rf.Env, rf.Format))
	}
	return strings.Join(totals, ","), nil
}
