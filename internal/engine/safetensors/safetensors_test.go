package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
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
		}, "reaches beyond the file"},
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
