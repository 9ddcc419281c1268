package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// MaxHeaderLen bounds the JSON header (the format's own limit is 100 MB).
const MaxHeaderLen = 100 << 20

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
	n := int64(es)
	for _, d := range t.Shape[1:] {
		n *= d
	}
	return n, nil
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
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return Parse(f, st.Size(), path)
}

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
	if hl > MaxHeaderLen || int64(hl) > size-8 {
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
		want := int64(es)
		for _, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("%s: tensor %s: negative dimension in shape %v", name, k, t.Shape)
			}
			want *= d
		}
		if t.Begin < 0 || t.End < t.Begin || t.End-t.Begin != want {
			return nil, fmt.Errorf("%s: tensor %s: data_offsets [%d,%d] do not match shape %v of %s (%d bytes)", name, k, t.Begin, t.End, t.Shape, t.DType, want)
		}
		if h.DataStart+t.End > size {
			return nil, fmt.Errorf("%s: tensor %s: data ends at byte %d but the file has %d bytes: truncated shard", name, k, h.DataStart+t.End, size)
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
	b, err := os.ReadFile(path)
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
		n := int64(es)
		for _, d := range t.Shape {
			n *= d
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
