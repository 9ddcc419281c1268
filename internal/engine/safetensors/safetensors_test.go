package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// writeFile encodes tensors, appends zero-filled data and writes it.
func writeFile(t *testing.T, tensors []Tensor) (string, []Tensor, []byte) {
	t.Helper()
	hdr, laid, err := Encode(tensors, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	var data int64
	for _, x := range laid {
		data = max(data, x.End)
	}
	b := append(append([]byte(nil), hdr...), bytes.Repeat([]byte{7}, int(data))...)
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, laid, b
}

func TestEncodeParseRoundTrip(t *testing.T) {
	in := []Tensor{{Name: "a", DType: "BF16", Shape: []int64{10, 3}}, {Name: "b", DType: "U8", Shape: []int64{5, 7}}, {Name: "c", DType: "F64", Shape: []int64{4}}}
	p, laid, b := writeFile(t, in)
	h, err := ReadHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	if h.DataStart%8 != 0 || h.DataStart != 8+int64(binary.LittleEndian.Uint64(b)) || h.FileSize != int64(len(b)) || !bytes.Equal(h.Raw, b[:h.DataStart]) {
		t.Fatalf("header %+v inconsistent with the file", h)
	}
	if h.Metadata["format"] != "pt" || strings.Join(h.Names(), ",") != "a,b,c" {
		t.Fatalf("metadata %v names %v", h.Metadata, h.Names())
	}
	for _, want := range laid {
		got := h.Tensors[want.Name]
		if got.Begin != want.Begin || got.End != want.End || got.DType != want.DType || got.Rows() != want.Shape[0] {
			t.Fatalf("tensor %s: got %+v, encoded %+v", want.Name, got, want)
		}
	}
	for name, rb := range map[string]int64{"a": 6, "b": 7, "c": 8} {
		if got, err := h.Tensors[name].RowBytes(); err != nil || got != rb {
			t.Fatalf("%s: row bytes %d %v, want %d", name, got, err, rb)
		}
	}
	if _, err := (Tensor{Name: "s", DType: "F32"}).RowBytes(); err == nil || !strings.Contains(err.Error(), "no row dimension") {
		t.Fatalf("scalar row bytes: %v", err)
	}
}

// damaged writes a valid file, applies damage, and returns ReadHeader's error.
func damaged(t *testing.T, damage func(b []byte) []byte) (string, error) {
	t.Helper()
	p, _, b := writeFile(t, []Tensor{{Name: "tbl", DType: "F32", Shape: []int64{16, 4}}})
	if err := os.WriteFile(p, damage(append([]byte(nil), b...)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadHeader(p)
	if err == nil {
		t.Fatal("damaged file parsed without error")
	}
	if !strings.Contains(err.Error(), p) {
		t.Fatalf("error does not name the file %s: %v", p, err)
	}
	return p, err
}

func TestBadFiles(t *testing.T) {
	cases := []struct {
		name   string
		damage func(b []byte) []byte
		want   string
	}{
		{"shorter than the length field", func(b []byte) []byte { return b[:5] }, "truncated safetensors file"},
		{"truncated data", func(b []byte) []byte { return b[:len(b)-10] }, "truncated shard"},
		{"header length beyond file", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b, uint64(len(b)))
			return b
		}, "reaches beyond the file"},
		{"header length beyond limit", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b, MaxHeaderLen+1)
			return b
		}, "header length 104857601 is over the 104857600-byte (100 MiB) limit of a safetensors header"},
		{"header not JSON", func(b []byte) []byte { b[8] = '['; b[9] = '!'; return b }, "not JSON"},
		{"offsets do not match shape", func(b []byte) []byte { return bytes.Replace(b, []byte("[16,4]"), []byte("[16,5]"), 1) }, "do not match shape"},
		{"offsets of wrong arity", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"data_offsets":[0,`), []byte(`"data_offsets":[  `), 1)
		}, "data_offsets must have 2 values"},
		{"unknown dtype", func(b []byte) []byte { return bytes.Replace(b, []byte(`"F32"`), []byte(`"Q99"`), 1) }, "unknown dtype"},
		{"negative dimension", func(b []byte) []byte { return bytes.Replace(b, []byte("[16,4]"), []byte("[-16,4]"), 1) }, "negative dimension"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := damaged(t, c.damage)
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
}

func TestReadIndex(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model.safetensors.index.json")
	os.WriteFile(p, []byte(`{"metadata":{"total_size":1},"weight_map":{"a":"s2","b":"s1","c":"s2"}}`), 0o644)
	ix, err := ReadIndex(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ix.Shards(), ","); got != "s1,s2" {
		t.Fatalf("shards %s", got)
	}
	os.WriteFile(p, []byte(`{"metadata":{}}`), 0o644)
	if _, err := ReadIndex(p); err == nil || !strings.Contains(err.Error(), "no weight_map") {
		t.Fatalf("index without weight_map: %v", err)
	}
	os.WriteFile(p, []byte(`not json`), 0o644)
	if _, err := ReadIndex(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("index not JSON: %v", err)
	}
}

// rawFile writes a safetensors file of header hdr and dataLen bytes of
// data (a hole), as a hostile writer would: no Encode to keep it honest.
func rawFile(t *testing.T, hdr string, dataLen int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "model.safetensors")
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	if err := os.WriteFile(p, append(b, hdr...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, int64(8+len(hdr))+dataLen); err != nil {
		t.Fatal(err)
	}
	return p
}

// Sizes from a header are checked, never wrapped: a shape whose bytes pass
// int64 ([2^62, 4] of BF16 wrapped to 0 and matched offsets [0,0]), and
// an end offset that DataStart + End would wrap past the file's size.
func TestHeaderSizesNeverWrap(t *testing.T) {
	for hdr, want := range map[string]string{
		`{"w":{"dtype":"BF16","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`:                                                  "tensor w: BF16: shape [4611686018427387904 4] of 2-byte elements passes 2^63-1 bytes",
		`{"w":{"dtype":"U8","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`:                                                    "passes 2^63-1 bytes",
		`{"w":{"dtype":"U8","shape":[16],"data_offsets":[9223372036854775790,9223372036854775806]}}`:                                   "data ends at byte 9223372036854775904 but the file has 99 bytes: truncated shard", // past 2^63: no wrap
		`{"w":{"dtype":"U8","shape":[4611686018427387904,0],"data_offsets":[0,0]},"v":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`: "",
	} {
		h, err := ReadHeader(rawFile(t, hdr, 1))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", hdr, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: header %+v, error %v; want %q", hdr, h, err, want)
		}
	}
	if _, err := (Tensor{Name: "r", DType: "F32", Shape: []int64{2, 1 << 61, 2}}).RowBytes(); err == nil || !strings.Contains(err.Error(), "passes 2^63-1 bytes") {
		t.Errorf("row bytes of a wrapping shape: %v", err)
	}
	if _, _, err := Encode([]Tensor{{Name: "e", DType: "BF16", Shape: []int64{1 << 62, 4}}}, nil); err == nil {
		t.Error("Encode laid out a tensor whose size wraps")
	}
}

// An index over MaxIndexLen is refused before it is read (a sparse 1 GiB
// file costs no disk), naming the file and the limit; a FIFO is refused,
// not waited on.
func TestBoundedReads(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model.safetensors.index.json")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 1<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIndex(p); err == nil || !strings.Contains(err.Error(), p+": 1073741824 bytes, over the 67108864-byte (64 MiB) limit") {
		t.Errorf("1 GiB index: %v", err)
	}
	fifo := filepath.Join(dir, "fifo.safetensors")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHeader(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO shard: %v", err)
	}
	if _, err := ReadBounded(fifo, 1<<20); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO: %v", err)
	}
}
