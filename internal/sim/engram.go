package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sparklane/sparklane/internal/safetensors"
	"github.com/sparklane/sparklane/internal/sparserows"
)

// EngramManifest is the sparse-copy manifest a sparse-rows stage leaves in
// the engram dir; engine-sim only needs to find it.
const EngramManifest = "engram-local.json"

// checkEngram checks this rank's engram files: packed files (header, rank,
// tp and row range = the rank's tile) or a sparse-copy tree (manifest plus
// shards whose safetensors headers parse). Returns the number of files
// checked.
func (e *engine) checkEngram() (int, error) {
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
		return e.checkPacked(packed)
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

func (e *engine) checkPacked(files []string) (int, error) {
	rank, tp := e.cfg.NodeRank, e.cfg.TP
	type hf struct {
		path string
		h    sparserows.PackedHeader
	}
	var hs []hf
	for _, p := range files {
		h, err := sparserows.ReadPackedHeader(p)
		if err != nil {
			return 0, fmt.Errorf("corrupt engram file: %w", err)
		}
		if h.Rank != rank || h.TP != tp {
			return 0, fmt.Errorf("%s: header says rank %d of tp %d, this is rank %d of tp %d: mixed-up staging, re-stage", p, h.Rank, h.TP, rank, tp)
		}
		hs = append(hs, hf{p, h})
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].h.Layer < hs[j].h.Layer })
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
			if x.h.FirstRow != first || x.h.RowCount != count {
				return 0, fmt.Errorf("%s: rows [%d,+%d) but rank %d of tp %d owns [%d,+%d) of %d rows (%s): stale or mis-tiled staging, re-stage", x.path, x.h.FirstRow, x.h.RowCount, rank, tp, first, count, total, EnvEngramRows)
			}
			continue
		}
		if !tileConsistent(x.h.FirstRow, x.h.RowCount, tp, rank) {
			return 0, fmt.Errorf("%s: rows [%d,+%d) cannot be rank %d's tile of any table split over tp %d: mis-tiled staging, re-stage", x.path, x.h.FirstRow, x.h.RowCount, rank, tp)
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

// checkSparseCopy reads the manifest and checks that every shard it names
// is present with a parsable safetensors header (the runtime reads the
// header first: rows without a header are a broken tree).
func (e *engine) checkSparseCopy(man string) (int, error) {
	b, err := os.ReadFile(man)
	if err != nil {
		return 0, fmt.Errorf("read %s: %v", man, err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, fmt.Errorf("%s is not JSON: %v: re-stage the sparse-rows block", man, err)
	}
	shards := map[string]bool{}
	collectShards(doc, shards)
	if len(shards) == 0 {
		return 0, fmt.Errorf("%s names no shards: re-stage the sparse-rows block", man)
	}
	dir := filepath.Dir(man)
	names := make([]string, 0, len(shards))
	for s := range shards {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		p := s
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, filepath.FromSlash(s))
		}
		if _, err := safetensors.ReadHeader(p); err != nil {
			return 0, fmt.Errorf("engram shard %s named by %s: %v: re-stage the sparse-rows block", p, man, err)
		}
	}
	return len(names), nil
}

// collectShards finds every string value ending in .safetensors under the
// keys shard/file/path anywhere in the manifest.
func collectShards(v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && strings.HasSuffix(s, ".safetensors") {
				switch strings.ToLower(k) {
				case "shard", "file", "path", "name", "dst":
					out[s] = true
				}
				continue
			}
			collectShards(val, out)
		}
	case []any:
		for _, val := range x {
			collectShards(val, out)
		}
	}
}
