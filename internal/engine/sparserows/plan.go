package sparserows

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// Formats a Spec may ask for.
const (
	FormatPacked     = "packed"
	FormatSparseCopy = "sparse-copy"
)

// SourceCorrupt is the permanent fault type of a source checkpoint whose
// shards or headers are unreadable as safetensors (truncated shard, header
// length beyond the file, header not JSON, offsets that do not match the
// shape): retrying cannot help, the NAS copy must be fixed.
const SourceCorrupt = "SourceCorrupt"

// RecordSizeMismatch is the permanent fault type of a table whose row width
// does not give the record size the runtime reads (Spec.RecordBytes): a
// packed file of other records would be read as garbage rows, so nothing
// is written.
const RecordSizeMismatch = "RecordSizeMismatch"

// IndexName is the checkpoint's shard index; it is copied into sparse-copy
// trees so the runtime finds the shards the same way.
const IndexName = "model.safetensors.index.json"

// LocalManifestName is the row-range manifest of a sparse-copy tree.
const LocalManifestName = "engram-local.json"

// LedgerName is the ledger file kept in Dst.
const LedgerName = ".sparklane-ledger.json"

// LedgerKind is the kind recorded in the ledger file.
const LedgerKind = "sparse-rows"

// Copy modes for Spec.CopyMode; the benchmark measures both.
const (
	CopyAuto          = ""                // copy_file_range, falling back to pread/pwrite
	CopyFileRange     = "copy_file_range" // in-kernel copy only (fails where unsupported)
	CopyReadWrite     = "readwrite"       // pread/pwrite with large buffers
	defaultBlockBytes = 64 << 20
)

// Spec is one sparse-rows staging block of a recipe, resolved for one node
// and rank. The activity layer builds it from the recipe and the lane plan.
type Spec struct {
	// Src is the snapshot dir with *.safetensors shards and
	// model.safetensors.index.json (on the NAS, read-only).
	Src string
	// Dst is the node-local output dir; created when missing.
	Dst string
	// Format is "packed" or "sparse-copy".
	Format string
	// Tensors are name templates with {L}, e.g. "model.layers.{L}.engram.table".
	Tensors []string
	// Layers are substituted for {L}.
	Layers []int
	// Rank and TP select the rank's contiguous row range (see Tile).
	Rank, TP int
	// MinFree is the free space dst must have before anything is written.
	MinFree int64
	// Roots are the dirs staging may write (already fs_root-prefixed); Dst
	// must lie under one.
	Roots []string
	// BlockRows is the number of rows per ledger/resume block; 0 chooses
	// about 64 MiB per block.
	BlockRows int64
	// RecordBytes is the record size the runtime reads from packed files
	// (the recipe's record_bytes: 264 on mia). A table whose row width
	// gives another size is refused before anything is written, naming
	// tensor, width and expected size. 0 accepts any width.
	RecordBytes int64
	// CopyMode picks the copy path (CopyAuto, CopyFileRange, CopyReadWrite);
	// empty is right for production, the benchmark sets it to compare.
	CopyMode string
}

// PlanInfo is what a spec resolves to against the checkpoint's headers:
// for dry runs, the CLI and engine-sim checks.
type PlanInfo struct {
	Format string `json:"format"`
	Rank   int    `json:"rank"`
	TP     int    `json:"tp"`
	// Checkpoint is the stable id of the source: a truncated sha256 over the
	// index file and the raw headers of the shards involved.
	Checkpoint string      `json:"checkpoint"`
	Layers     []LayerPlan `json:"layers"`
	// Rows and Bytes are the rank's share summed over layers.
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
	// Shards are the source shards holding rows of this rank (sparse-copy
	// writes one sparse file for each).
	Shards []string `json:"shards"`

	headers map[string]*safetensors.Header // by shard file name
	src     string
}

// TableShare is one layer's table and the rank's share of its rows: what
// a plan stages and what a sparse copy's manifest records of each table.
type TableShare struct {
	Layer  int    `json:"layer"`
	Tensor string `json:"tensor"`
	DType  string `json:"dtype"`
	// RowsTotal is the table's row count over all parts.
	RowsTotal int64 `json:"rows_total"`
	// First and Count are the rank's rows (Tile).
	First int64 `json:"first"`
	Count int64 `json:"count"`
	// RecordSize is the bytes of one row (= one packed record).
	RecordSize int64 `json:"record_size"`
}

// LayerPlan is one layer's table, the rank's share of it and how it is
// staged.
type LayerPlan struct {
	TableShare
	// Bytes is Count*RecordSize.
	Bytes     int64 `json:"bytes"`
	BlockRows int64 `json:"block_rows"`
	Blocks    int64 `json:"blocks"`
	// Output is the packed file name (packed format only).
	Output string     `json:"output,omitempty"`
	Parts  []PartPlan `json:"parts"`
}

// PartPlan is one stored tensor holding consecutive rows of a table, and
// the rank's rows inside it.
type PartPlan struct {
	Shard  string `json:"shard"`
	Tensor string `json:"tensor"`
	// FirstRow and Rows place the part in the table's global row order.
	FirstRow int64 `json:"first_row"`
	Rows     int64 `json:"rows"`
	// DataOffset is the absolute file offset of the part's row 0.
	DataOffset int64 `json:"data_offset"`
	// RankFirst/RankCount are the rank's rows in this part (global row
	// numbers; RankCount 0 when the part holds none), ByteBegin/ByteEnd the
	// absolute file range they occupy.
	RankFirst int64 `json:"rank_first"`
	RankCount int64 `json:"rank_count"`
	ByteBegin int64 `json:"byte_begin"`
	ByteEnd   int64 `json:"byte_end"`
}

// checkSpec validates the fields that need no I/O.
func checkSpec(spec Spec) error {
	inv := func(format string, a ...any) error {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("sparse-rows: "+format, a...))
	}
	switch spec.Format {
	case FormatPacked, FormatSparseCopy:
	default:
		return inv("format %q: use \"packed\" or \"sparse-copy\"", spec.Format)
	}
	if spec.Src == "" || spec.Dst == "" {
		return inv("src and dst must both be set (src %q, dst %q)", spec.Src, spec.Dst)
	}
	if len(spec.Tensors) == 0 || len(spec.Layers) == 0 {
		return inv("tensors and layers must not be empty (tensors %v, layers %v)", spec.Tensors, spec.Layers)
	}
	if len(spec.Tensors) != 1 {
		return inv("tensors %v: one table per layer is supported (packed files are named per layer); give one template", spec.Tensors)
	}
	seen := map[int]bool{}
	for _, l := range spec.Layers {
		if l < 0 || seen[l] {
			return inv("layers %v: negative or repeated layer %d", spec.Layers, l)
		}
		seen[l] = true
	}
	if spec.TP < 1 || spec.Rank < 0 || spec.Rank >= spec.TP {
		return inv("rank %d of tp %d: need tp >= 1 and 0 <= rank < tp", spec.Rank, spec.TP)
	}
	if spec.RecordBytes < 0 {
		return inv("record_bytes %d is negative", spec.RecordBytes)
	}
	if spec.BlockRows < 0 {
		return inv("block_rows %d is negative", spec.BlockRows)
	}
	switch spec.CopyMode {
	case CopyAuto, CopyFileRange, CopyReadWrite:
	default:
		return inv("copy mode %q: use %q or %q", spec.CopyMode, CopyFileRange, CopyReadWrite)
	}
	if err := staging.UnderRoots(spec.Dst, spec.Roots); err != nil {
		return err
	}
	return nil
}

// TensorName substitutes layer for {L} in a template.
func TensorName(template string, layer int) string {
	return strings.ReplaceAll(template, "{L}", strconv.Itoa(layer))
}

// Plan resolves spec against the checkpoint's headers: per layer the
// tensor, the shard(s) holding it, total rows, the rank's first row and
// count, record size and bytes. It reads only headers and writes nothing.
//
// Split tables: a table is either one tensor NAME in one shard, or parts
// NAME.part0, NAME.part1, … (possibly in different shards), concatenated
// along rows in part-index order. All parts share dtype and row shape.
func Plan(spec Spec) (PlanInfo, error) {
	if err := checkSpec(spec); err != nil {
		return PlanInfo{}, err
	}
	return plan(spec)
}

func plan(spec Spec) (PlanInfo, error) {
	pi := PlanInfo{Format: spec.Format, Rank: spec.Rank, TP: spec.TP, headers: map[string]*safetensors.Header{}, src: spec.Src}
	weightMap, indexBytes, err := loadWeightMap(spec.Src, pi.headers)
	if err != nil {
		return pi, err
	}
	p := &planner{spec: spec, pi: &pi, weightMap: weightMap, indexBytes: indexBytes, indexPath: filepath.Join(spec.Src, IndexName)}
	shardSet := map[string]bool{}
	for _, layer := range spec.Layers {
		lp, err := p.layer(layer)
		if err != nil {
			return pi, err
		}
		for _, part := range lp.Parts {
			if part.RankCount > 0 {
				shardSet[part.Shard] = true
			}
		}
		pi.Rows += lp.Count
		pi.Bytes += lp.Bytes
		pi.Layers = append(pi.Layers, lp)
	}
	for s := range shardSet {
		pi.Shards = append(pi.Shards, s)
	}
	sort.Strings(pi.Shards)
	pi.Checkpoint = checkpointID(indexBytes, pi.headers)
	return pi, nil
}

// planner resolves one spec's layers against the checkpoint: the index's
// weight map (tensor → shard) and the shard headers read so far.
type planner struct {
	spec       Spec
	pi         *PlanInfo
	weightMap  map[string]string
	indexBytes []byte
	indexPath  string
}

// header is shard's header, read once; the shard must be a file inside
// the snapshot dir (tensor names who asked, for the error).
func (p *planner) header(shard, tensor string) (*safetensors.Header, error) {
	if h, ok := p.pi.headers[shard]; ok {
		return h, nil
	}
	if !filepath.IsLocal(shard) {
		// The name also becomes a dst path (sparse-copy): "../x" or
		// "/etc/x" would read and write outside src and dst.
		return nil, fault.Permanent(SourceCorrupt, fmt.Errorf("%s names shard %q for tensor %s: a shard must be a file name inside the snapshot dir: fix the index", p.indexPath, shard, tensor))
	}
	path := filepath.Join(p.spec.Src, shard)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fault.Permanent(fault.SourceMissing, fmt.Errorf("%s names shard %s for tensor %s, but %s does not exist: the snapshot is incomplete, re-download it", p.indexPath, shard, tensor, path))
	}
	h, err := safetensors.ReadHeader(path)
	if err != nil {
		return nil, fault.Permanent(SourceCorrupt, fmt.Errorf("tensor %s: %w: fix or re-download the shard", tensor, err))
	}
	p.pi.headers[shard] = h
	return h, nil
}

// tableNames are the tensors holding layer's table: NAME itself, or its
// parts NAME.part0, NAME.part1, … in part-index order.
func (p *planner) tableNames(layer int) (string, []string, error) {
	name := TensorName(p.spec.Tensors[0], layer)
	var names []string
	if _, ok := p.weightMap[name]; ok {
		names = []string{name}
	} else {
		for k := 0; ; k++ {
			pn := fmt.Sprintf("%s.part%d", name, k)
			if _, ok := p.weightMap[pn]; !ok {
				break
			}
			names = append(names, pn)
		}
	}
	if len(names) == 0 {
		where := p.indexPath
		if p.indexBytes == nil {
			where = filepath.Join(p.spec.Src, "*.safetensors")
		}
		return name, nil, fault.Permanent(fault.SourceMissing, fmt.Errorf("tensor %s (layer %d, template %q) is in no shard of %s (looked for %s and %s.part0): check tensors and layers in the recipe", name, layer, p.spec.Tensors[0], where, name, name))
	}
	return name, names, nil
}

// layer plans one layer: its table's parts, the rank's tile of rows,
// record size, blocks, output file, and each part's share of the tile.
func (p *planner) layer(layer int) (LayerPlan, error) {
	spec := p.spec
	name, names, err := p.tableNames(layer)
	if err != nil {
		return LayerPlan{}, err
	}
	lp := LayerPlan{TableShare: TableShare{Layer: layer, Tensor: name}}
	rowShape, err := p.readParts(&lp, names)
	if err != nil {
		return lp, err
	}
	first, count, err := Tile(lp.RowsTotal, spec.TP, spec.Rank)
	if err != nil {
		return lp, fault.Permanent(fault.InvalidSpec, fmt.Errorf("tensor %s in %s: %w: lower tp or check the tensor", name, lp.Parts[0].Shard, err))
	}
	if lp.RecordSize == 0 {
		return lp, fault.Permanent(fault.InvalidSpec, fmt.Errorf("tensor %s in %s: rows of 0 bytes (shape has a zero dimension)", name, lp.Parts[0].Shard))
	}
	if spec.RecordBytes > 0 && lp.RecordSize != spec.RecordBytes {
		return lp, fault.Permanent(RecordSizeMismatch, fmt.Errorf("tensor %s in %s: rows of %v %s are %d bytes, but the runtime reads %d-byte records (record_bytes): nothing was written; stage the table the runtime expects or fix record_bytes in the recipe", name, lp.Parts[0].Shard, rowShape, lp.DType, lp.RecordSize, spec.RecordBytes))
	}
	lp.First, lp.Count, lp.Bytes = first, count, count*lp.RecordSize
	lp.BlockRows = spec.BlockRows
	if lp.BlockRows == 0 {
		lp.BlockRows = max(1, defaultBlockBytes/lp.RecordSize)
	}
	lp.Blocks = (lp.Count + lp.BlockRows - 1) / lp.BlockRows
	if spec.Format == FormatPacked {
		lp.Output = PackedFileName(layer, spec.Rank, spec.TP)
	}
	for i := range lp.Parts {
		part := &lp.Parts[i]
		a, b := max(first, part.FirstRow), min(first+count, part.FirstRow+part.Rows)
		if a < b {
			part.RankFirst, part.RankCount = a, b-a
			part.ByteBegin = part.DataOffset + (a-part.FirstRow)*lp.RecordSize
			part.ByteEnd = part.ByteBegin + (b-a)*lp.RecordSize
		}
	}
	return lp, nil
}

// readParts reads each part's header entry into lp (dtype, record size,
// rows, data offset) and returns the row shape all parts must share.
func (p *planner) readParts(lp *LayerPlan, names []string) ([]int64, error) {
	var rowShape []int64
	for i, pn := range names {
		shard := p.weightMap[pn]
		h, err := p.header(shard, pn)
		if err != nil {
			return nil, err
		}
		t, ok := h.Tensors[pn]
		if !ok {
			return nil, fault.Permanent(fault.SourceMissing, fmt.Errorf("%s maps tensor %s to %s, but that shard's header has no such tensor: the index and shards disagree", p.indexPath, pn, h.Path))
		}
		rb, err := t.RowBytes()
		if err != nil {
			return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: %w: a row table needs shape [rows, ...]", h.Path, err))
		}
		if i == 0 {
			lp.DType, lp.RecordSize, rowShape = t.DType, rb, t.Shape[1:]
		} else if t.DType != lp.DType || rb != lp.RecordSize || !equalShape(t.Shape[1:], rowShape) {
			return nil, fault.Permanent(SourceCorrupt, fmt.Errorf("%s: tensor %s is %s %v, but %s is %s with rows %v: parts of one table must share dtype and row shape", h.Path, pn, t.DType, t.Shape, names[0], lp.DType, rowShape))
		}
		lp.Parts = append(lp.Parts, PartPlan{Shard: shard, Tensor: pn, FirstRow: lp.RowsTotal, Rows: t.Rows(), DataOffset: h.DataStart + t.Begin})
		lp.RowsTotal += t.Rows()
	}
	return rowShape, nil
}

// checkpointID names the checkpoint: a hash of the index plus every
// header involved, in name order.
func checkpointID(indexBytes []byte, headers map[string]*safetensors.Header) string {
	sum := sha256.New()
	sum.Write(indexBytes)
	var used []string
	for s := range headers {
		used = append(used, s)
	}
	sort.Strings(used)
	for _, s := range used {
		sum.Write([]byte(s))
		sum.Write(headers[s].Raw)
	}
	return hex.EncodeToString(sum.Sum(nil))[:24]
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// loadWeightMap reads the index; without one (a single-file checkpoint) it
// reads the headers of every *.safetensors in src instead.
func loadWeightMap(src string, headers map[string]*safetensors.Header) (map[string]string, []byte, error) {
	indexPath := filepath.Join(src, IndexName)
	b, err := os.ReadFile(indexPath)
	if err == nil {
		ix, err := safetensors.ReadIndex(indexPath)
		if err != nil {
			return nil, nil, fault.Permanent(SourceCorrupt, err)
		}
		return ix.WeightMap, b, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("read %s: %w", indexPath, err)
	}
	shards, err := filepath.Glob(filepath.Join(src, "*.safetensors"))
	if err != nil {
		return nil, nil, err
	}
	if len(shards) == 0 {
		if _, serr := os.Stat(src); serr != nil {
			return nil, nil, fault.Permanent(fault.SourceMissing, fmt.Errorf("source snapshot %s: %w: check src in the recipe and that the NAS is mounted", src, serr))
		}
		return nil, nil, fault.Permanent(fault.SourceMissing, fmt.Errorf("source snapshot %s has neither %s nor *.safetensors shards: check src in the recipe", src, IndexName))
	}
	wm := map[string]string{}
	for _, p := range shards {
		h, err := safetensors.ReadHeader(p)
		if err != nil {
			return nil, nil, fault.Permanent(SourceCorrupt, err)
		}
		name := filepath.Base(p)
		headers[name] = h
		for t := range h.Tensors {
			wm[t] = name
		}
	}
	return wm, nil, nil
}
