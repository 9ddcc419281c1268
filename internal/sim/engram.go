package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
)

// EngramManifest is the sparse-copy manifest a sparse-rows stage leaves in
// the engram dir; engine-sim only needs to find it.
const EngramManifest = "engram-local.json"

// checkEngram checks this rank's engram files: packed files (header, rank,
// tp and row range = the rank's tile) or a sparse-copy tree (manifest plus
// shards whose safetensors headers parse). Returns the number of files
// checked.
func (e *engine) checkEngram(loc tensorIndex) (int, error) {
	dir := e.cfg.EngramDir
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("engram dir %s: %v: stage the sparse-rows block or unset the engram env", dir, err)
	}
	if !fi.IsDir() {
		return 0, fmt.Errorf("engram dir %s is not a directory", dir)
	}
	rank, tp := e.cfg.NodeRank, e.cfg.TP
	pat := filepath.Join(dir, fmt.Sprintf("engram-l*-r%dof%d.bin", rank, tp))
	packed, _ := filepath.Glob(pat)
	if len(packed) > 0 {
		return e.checkPacked(packed, loc)
	}
	man := filepath.Join(dir, EngramManifest)
	if _, err := os.Stat(man); err == nil {
		return e.checkSparseCopy(man)
	}
	others, _ := filepath.Glob(filepath.Join(dir, "engram-l*-r*of*.bin"))
	if len(others) > 0 {
		return 0, fmt.Errorf("engram dir %s has packed files for other ranks (e.g. %s) but none for rank %d of tp %d (%s): staged for another world shape, re-stage", dir, filepath.Base(others[0]), rank, tp, filepath.Base(pat))
	}
	return 0, fmt.Errorf("engram dir %s holds neither packed files for rank %d of tp %d (%s) nor %s: stage the sparse-rows block first", dir, rank, tp, filepath.Base(pat), EngramManifest)
}

func (e *engine) checkPacked(files []string, loc tensorIndex) (int, error) {
	rank, tp := e.cfg.NodeRank, e.cfg.TP
	type hf struct {
		path string
		h    packedHeader
	}
	var hs []hf
	for _, p := range files {
		h, err := readPackedHeader(p)
		if err != nil {
			return 0, fmt.Errorf("corrupt engram file: %w", err)
		}
		if h.rank != rank || h.tp != tp {
			return 0, fmt.Errorf("%s: header says rank %d of tp %d, this is rank %d of tp %d: mixed-up staging, re-stage", p, h.rank, h.tp, rank, tp)
		}
		if want := fmt.Sprintf("engram-l%d-r%dof%d.bin", h.layer, h.rank, h.tp); filepath.Base(p) != want {
			return 0, fmt.Errorf("%s: header says layer %d, rank %d of tp %d, which is named %s: mixed-up staging, re-stage", p, h.layer, h.rank, h.tp, want)
		}
		if rb := e.cfg.EngramRecordBytes; rb > 0 && h.recordSize != rb {
			return 0, fmt.Errorf("%s: %d-byte records, this runtime reads %d-byte records (%s): the table was packed from rows of another width; stage the table the runtime reads (record_bytes)", p, h.recordSize, rb, EnvEngramRecordBytes)
		}
		hs = append(hs, hf{p, h})
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].h.layer < hs[j].h.layer })
	rows := e.cfg.EngramRows
	if len(rows) > 1 && len(rows) != len(hs) {
		return 0, fmt.Errorf("%s lists %d row counts but %s holds %d layers for rank %d", EnvEngramRows, len(rows), e.cfg.EngramDir, len(hs), rank)
	}
	for i, x := range hs {
		if len(rows) > 0 {
			total := rows[0]
			if len(rows) > 1 {
				total = rows[i]
			}
			first, count, err := sparserows.Tile(total, tp, rank)
			if err != nil {
				return 0, fmt.Errorf("%s: %s=%d: %v", x.path, EnvEngramRows, total, err)
			}
			if x.h.firstRow != first || x.h.rowCount != count {
				return 0, fmt.Errorf("%s: rows [%d,+%d) but rank %d of tp %d owns [%d,+%d) of %d rows (%s): stale or mis-tiled staging, re-stage", x.path, x.h.firstRow, x.h.rowCount, rank, tp, first, count, total, EnvEngramRows)
			}
		} else if !tileConsistent(x.h.firstRow, x.h.rowCount, tp, rank) {
			return 0, fmt.Errorf("%s: rows [%d,+%d) cannot be rank %d's tile of any table split over tp %d: mis-tiled staging, re-stage", x.path, x.h.firstRow, x.h.rowCount, rank, tp)
		}
		compared, err := readPackedRecords(x.path, x.h, loc)
		if err != nil {
			return 0, err
		}
		if compared > 0 {
			e.logf("rank %d engram %s: %d records of %d bytes read, %d compared with rows of %s", rank, filepath.Base(x.path), x.h.rowCount, x.h.recordSize, compared, x.h.tensor)
		} else {
			e.logf("rank %d engram %s: %d records of %d bytes read (table %s is not in the model tree: rows not compared)", rank, filepath.Base(x.path), x.h.rowCount, x.h.recordSize, x.h.tensor)
		}
	}
	return len(hs), nil
}

// tileConsistent says some row total T makes Tile(T, tp, rank) equal
// (first, count).
func tileConsistent(first, count int64, tp, rank int) bool {
	r := int64(rank)
	if count < 1 {
		return false
	}
	// r < rem: base = count-1, first = r*count.
	if first == r*count && rank < tp-1 && count >= 2 {
		return true
	}
	// r >= rem: base = count, first = r*count + rem with 0 <= rem <= r, rem < tp.
	rem := first - r*count
	return rem >= 0 && rem <= r && rem < int64(tp)
}

// checkSparseCopy reads the manifest (sparserows.LocalManifest) and checks
// it is this rank's, that each table's row range is the rank's tile, and
// that every shard it names is present with a parsable safetensors header
// holding the tensor and the byte range (the runtime reads the header
// first: rows without a header are a broken tree).
func (e *engine) checkSparseCopy(man string) (int, error) {
	b, err := os.ReadFile(man)
	if err != nil {
		return 0, fmt.Errorf("read %s: %v", man, err)
	}
	var m sparserows.LocalManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return 0, fmt.Errorf("%s is not a sparse-copy manifest: %v: re-stage the sparse-rows block", man, err)
	}
	rank, tp := e.cfg.NodeRank, e.cfg.TP
	if m.Rank != rank || m.TP != tp {
		return 0, fmt.Errorf("%s is for rank %d of tp %d, this is rank %d of tp %d: mixed-up staging, re-stage", man, m.Rank, m.TP, rank, tp)
	}
	if len(m.Tensors) == 0 {
		return 0, fmt.Errorf("%s lists no tables: re-stage the sparse-rows block", man)
	}
	rows := e.cfg.EngramRows
	if len(rows) > 1 && len(rows) != len(m.Tensors) {
		return 0, fmt.Errorf("%s lists %d row counts but %s lists %d tables", EnvEngramRows, len(rows), man, len(m.Tensors))
	}
	dir := filepath.Dir(man)
	headers := map[string]*safetensors.Header{}
	for i, t := range m.Tensors {
		total := t.RowsTotal
		if len(rows) > 0 {
			total = rows[0]
			if len(rows) > 1 {
				total = rows[i]
			}
			if t.RowsTotal != total {
				return 0, fmt.Errorf("%s: table %s has %d rows, %s says %d: staged from another checkpoint, re-stage", man, t.Tensor, t.RowsTotal, EnvEngramRows, total)
			}
		}
		first, count, err := sparserows.Tile(total, tp, rank)
		if err != nil {
			return 0, fmt.Errorf("%s: table %s: %v", man, t.Tensor, err)
		}
		if t.First != first || t.Count != count {
			return 0, fmt.Errorf("%s: table %s rows [%d,+%d) but rank %d of tp %d owns [%d,+%d) of %d: mis-tiled staging, re-stage", man, t.Tensor, t.First, t.Count, rank, tp, first, count, total)
		}
		for _, part := range t.Parts {
			p := filepath.Join(dir, filepath.FromSlash(part.Shard))
			h := headers[p]
			if h == nil {
				h, err = safetensors.ReadHeader(p)
				if err != nil {
					return 0, fmt.Errorf("engram shard %s named by %s: %v: re-stage the sparse-rows block", p, man, err)
				}
				headers[p] = h
			}
			ten, ok := h.Tensors[part.Tensor]
			if !ok {
				return 0, fmt.Errorf("engram shard %s has no tensor %s that %s names: re-stage the sparse-rows block", p, part.Tensor, man)
			}
			if part.Bytes[0] < h.DataStart+ten.Begin || part.Bytes[1] > h.DataStart+ten.End || part.Bytes[1] < part.Bytes[0] {
				return 0, fmt.Errorf("engram shard %s: bytes [%d,%d) of %s lie outside tensor %s [%d,%d): re-stage the sparse-rows block", p, part.Bytes[0], part.Bytes[1], man, part.Tensor, h.DataStart+ten.Begin, h.DataStart+ten.End)
			}
		}
	}
	return len(headers), nil
}
