package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"
	"syscall"
)

// Limits on what a Hub snapshot makes this package read, checked before
// anything is read or allocated: a header or an index is a file someone
// else wrote, and a length field or a file size must not decide how much
// memory a check takes.
const (
	// MaxHeaderLen bounds the JSON header (the format's own limit is 100 MB).
	MaxHeaderLen = 100 << 20
	// MaxIndexLen bounds model.safetensors.index.json: the largest Hub
	// models' indexes (a trillion parameters, ~10^5 tensors) are ~10 MiB.
	MaxIndexLen = 64 << 20
)

// Tensor is one tensor entry of a header.
type Tensor struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	// Begin and End are byte offsets relative to the data start.
	Begin int64 `json:"begin"`
	End   int64 `json:"end"`
}

// RowBytes is the size of one row (the product of all but the first
// dimension times the dtype size); an error when the shape has no row dim.
func (t Tensor) RowBytes() (int64, error) {
	if len(t.Shape) < 1 {
		return 0, fmt.Errorf("tensor %s has shape %v: no row dimension", t.Name, t.Shape)
	}
	es, err := DTypeSize(t.DType)
	if err != nil {
		return 0, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	n, err := shapeBytes(es, t.Shape[1:])
	if err != nil {
		return 0, fmt.Errorf("tensor %s: row of shape %v: %w", t.Name, t.Shape, err)
	}
	return n, nil
}

// shapeBytes is elemSize × the product of dims, checked: a dimension is
// never negative and the size never passes 2^63-1 bytes (a shape like
// [2^62, 4] would otherwise wrap to 0 and match empty data_offsets). A
// zero dimension makes it 0 whatever the others are.
func shapeBytes(elemSize int, dims []int64) (int64, error) {
	for _, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", dims)
		}
		if d == 0 {
			return 0, nil
		}
	}
	n := uint64(elemSize)
	for _, d := range dims {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v of %d-byte elements passes 2^63-1 bytes: not a real tensor", dims, elemSize)
		}
		n = lo
	}
	return int64(n), nil
}

// Rows is the first dimension.
func (t Tensor) Rows() int64 {
	if len(t.Shape) == 0 {
		return 0
	}
	return t.Shape[0]
}

// Header is a parsed safetensors file header.
type Header struct {
	Path      string            `json:"path"`
	HeaderLen int64             `json:"header_len"`
	DataStart int64             `json:"data_start"`
	FileSize  int64             `json:"file_size"`
	Tensors   map[string]Tensor `json:"tensors"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	// Raw is the header bytes as stored (8-byte length + JSON), so a copy can
	// carry the header byte for byte.
	Raw []byte `json:"-"`
}

// Names returns the tensor names sorted.
func (h *Header) Names() []string {
	out := make([]string, 0, len(h.Tensors))
	for n := range h.Tensors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// DTypeSize returns the byte width of a safetensors dtype.
func DTypeSize(dt string) (int, error) {
	switch dt {
	case "BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0":
		return 1, nil
	case "U16", "I16", "F16", "BF16":
		return 2, nil
	case "U32", "I32", "F32":
		return 4, nil
	case "U64", "I64", "F64":
		return 8, nil
	}
	return 0, fmt.Errorf("unknown dtype %q", dt)
}

// ReadHeader parses the header of the safetensors file at path and checks
// every tensor's offsets against the file size and its shape.
func ReadHeader(path string) (*Header, error) {
	f, st, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, st.Size(), path)
}

// openRegular opens path for reading without ever blocking on a FIFO or
// a device (non-blocking open) and refuses anything but a regular file
// (links are followed: a Hub snapshot's files are links into blobs/).
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a regular file (%s)", path, st.Mode().Type())
	}
	return f, st, nil
}

// ReadBounded reads the regular file at path whole when it holds at most
// limit bytes, and refuses a larger one — naming the file and the limit —
// before reading any of it (and stops at limit+1 bytes should the file
// grow meanwhile). It is how the JSON files of a Hub snapshot (the index
// here, config.json in memfit) are read: their size is someone else's
// choice, the memory a check takes is not.
func ReadBounded(path string, limit int64) ([]byte, error) {
	f, st, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	over := func(size string) error {
		return fmt.Errorf("%s: %s, over the %d-byte (%s) limit for this file: refused unread; a real one is far smaller, so the snapshot is damaged or not a model's", path, size, limit, mib(limit))
	}
	if st.Size() > limit {
		return nil, over(fmt.Sprintf("%d bytes", st.Size()))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, over("grew while read")
	}
	return b, nil
}

// mib names a byte limit in MiB for messages.
func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

// Parse reads a header from r, a file of size bytes named name (for errors).
func Parse(r io.ReaderAt, size int64, name string) (*Header, error) {
	var lb [8]byte
	if size < 8 {
		return nil, fmt.Errorf("%s: truncated safetensors file (%d bytes, need at least 8 for the header length)", name, size)
	}
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, fmt.Errorf("%s: read header length: %w", name, err)
	}
	hl := binary.LittleEndian.Uint64(lb[:])
	if hl > MaxHeaderLen {
		return nil, fmt.Errorf("%s: header length %d is over the %d-byte (%s) limit of a safetensors header: not read; the file is damaged or not a safetensors file", name, hl, MaxHeaderLen, mib(MaxHeaderLen))
	}
	if int64(hl) > size-8 {
		return nil, fmt.Errorf("%s: header length %d reaches beyond the file (%d bytes): truncated or not a safetensors file", name, hl, size)
	}
	raw := make([]byte, 8+hl)
	if _, err := r.ReadAt(raw, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: read header: %w", name, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:], &doc); err != nil {
		return nil, fmt.Errorf("%s: header is not JSON: %v", name, err)
	}
	h := &Header{Path: name, HeaderLen: int64(hl), DataStart: 8 + int64(hl), FileSize: size, Tensors: map[string]Tensor{}, Raw: raw}
	for k, v := range doc {
		if k == "__metadata__" {
			if err := json.Unmarshal(v, &h.Metadata); err != nil {
				return nil, fmt.Errorf("%s: __metadata__ is not a string map: %v", name, err)
			}
			continue
		}
		var e struct {
			DType   string  `json:"dtype"`
			Shape   []int64 `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, fmt.Errorf("%s: tensor %s: bad entry: %v", name, k, err)
		}
		if len(e.Offsets) != 2 {
			return nil, fmt.Errorf("%s: tensor %s: data_offsets must have 2 values, has %d", name, k, len(e.Offsets))
		}
		t := Tensor{Name: k, DType: e.DType, Shape: e.Shape, Begin: e.Offsets[0], End: e.Offsets[1]}
		es, err := DTypeSize(t.DType)
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %w", name, k, err)
		}
		want, err := shapeBytes(es, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %s: %w", name, k, t.DType, err)
		}
		if t.Begin < 0 || t.End < t.Begin || t.End-t.Begin != want {
			return nil, fmt.Errorf("%s: tensor %s: data_offsets [%d,%d] do not match shape %v of %s (%d bytes)", name, k, t.Begin, t.End, t.Shape, t.DType, want)
		}
		if t.End > size-h.DataStart { // never DataStart+End: it could wrap
			return nil, fmt.Errorf("%s: tensor %s: data ends at byte %d but the file has %d bytes: truncated shard", name, k, uint64(h.DataStart)+uint64(t.End), size)
		}
		h.Tensors[k] = t
	}
	return h, nil
}

// Index is model.safetensors.index.json.
type Index struct {
	Metadata  map[string]any    `json:"metadata,omitempty"`
	WeightMap map[string]string `json:"weight_map"`
}

// ReadIndex reads an index file.
func ReadIndex(path string) (*Index, error) {
	b, err := ReadBounded(path, MaxIndexLen)
	if err != nil {
		return nil, err
	}
	var ix Index
	if err := json.Unmarshal(b, &ix); err != nil {
		return nil, fmt.Errorf("%s: not a safetensors index (JSON): %v", path, err)
	}
	if ix.WeightMap == nil {
		return nil, fmt.Errorf("%s: index has no weight_map", path)
	}
	return &ix, nil
}

// Shards returns the distinct shard file names of the index, sorted.
func (ix *Index) Shards() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ix.WeightMap {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// Encode builds a safetensors header (length + JSON) for tensors laid out in
// the given order, assigning contiguous offsets. Used by tests, the demo's
// synthetic NAS and engine-sim fixtures.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, []Tensor, error) {
	doc := map[string]any{}
	if metadata != nil {
		doc["__metadata__"] = metadata
	}
	var off int64
	out := make([]Tensor, len(tensors))
	for i, t := range tensors {
		es, err := DTypeSize(t.DType)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		n, err := shapeBytes(es, t.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if off > math.MaxInt64-n {
			return nil, nil, fmt.Errorf("tensor %s: data passes 2^63-1 bytes", t.Name)
		}
		t.Begin, t.End = off, off+n
		off += n
		out[i] = t
		doc[t.Name] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int64{t.Begin, t.End}}
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, err
	}
	// Pad with spaces to 8-byte alignment, as writers commonly do.
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	b := make([]byte, 8, 8+len(js))
	binary.LittleEndian.PutUint64(b, uint64(len(js)))
	return append(b, js...), out, nil
}
