package sparserows

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// fixtureDir holds the format fixture written by gen.py from FORMAT.md.
const fixtureDir = "testdata/packed-v1"

// TestPackedFormatFixture checks FORMAT.md against a fixture written from
// the page alone: every field at its documented offset, Marshal byte for
// byte, and a real pack of the fixture's checkpoint reproducing the file.
func TestPackedFormatFixture(t *testing.T) {
	fix := readFile(t, filepath.Join(fixtureDir, "engram-l0-r1of4.bin"))
	const rb, first, count = 264, 3, 3
	if len(fix) != PackedHeaderSize+count*rb {
		t.Fatalf("fixture is %d bytes, want 4096 + 3*264", len(fix))
	}
	le := binary.LittleEndian
	// Field by field, at the offsets the page gives.
	tensor := "model.layers.0.engram.embed.weight"
	if string(fix[0:8]) != "SPLROWS\x00" || le.Uint32(fix[8:]) != 1 || le.Uint32(fix[12:]) != 0 ||
		le.Uint32(fix[16:]) != 1 || le.Uint32(fix[20:]) != 4 || le.Uint64(fix[24:]) != first ||
		le.Uint64(fix[32:]) != count || le.Uint64(fix[40:]) != rb ||
		int(le.Uint16(fix[48:])) != len(tensor) || string(fix[50:50+len(tensor)]) != tensor {
		t.Fatalf("fixture header fields do not sit where FORMAT.md says: % x", fix[:128])
	}
	cl := int(le.Uint16(fix[50+len(tensor):]))
	ckpt := string(fix[52+len(tensor) : 52+len(tensor)+cl])
	if cl != 24 || strings.Trim(string(fix[52+len(tensor)+cl:4092]), "\x00") != "" {
		t.Fatalf("checkpoint id %q (%d bytes) or non-zero padding", ckpt, cl)
	}
	if le.Uint32(fix[4092:]) != crc32.ChecksumIEEE(fix[:4092]) {
		t.Fatal("fixture CRC does not match bytes [0,4092)")
	}
	h, err := UnmarshalPackedHeader(fix)
	if err != nil {
		t.Fatal(err)
	}
	want := PackedHeader{Version: 1, Layer: 0, Rank: 1, TP: 4, FirstRow: first, RowCount: count, RecordSize: rb, Tensor: tensor, Checkpoint: ckpt}
	if h != want {
		t.Fatalf("decoded %+v, want %+v", h, want)
	}
	enc, err := want.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, fix[:PackedHeaderSize]) {
		t.Fatal("Marshal does not reproduce the fixture's header byte for byte")
	}
	// Records: row first+i of the checkpoint's table, as stored.
	sh, err := safetensors.ReadHeader(filepath.Join(fixtureDir, "ckpt", "model-00001-of-00001.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	src := readFile(t, sh.Path)
	ten := sh.Tensors[tensor]
	for i := int64(0); i < count; i++ {
		row := src[sh.DataStart+ten.Begin+(first+i)*rb:][:rb]
		if !bytes.Equal(fix[PackedHeaderSize+i*rb:][:rb], row) {
			t.Fatalf("record %d is not row %d of %s", i, first+i, tensor)
		}
	}
	// The packer's output for that checkpoint is the fixture, byte for byte.
	root := t.TempDir()
	spec := Spec{Src: filepath.Join(fixtureDir, "ckpt"), Dst: filepath.Join(root, "engram"), Format: FormatPacked,
		Tensors: []string{"model.layers.{L}.engram.embed.weight"}, Layers: []int{0}, Rank: 1, TP: 4, Roots: []string{root}, RecordBytes: 264}
	if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(spec.Dst, "engram-l0-r1of4.bin")); !bytes.Equal(got, fix) {
		t.Fatalf("packed output (%d bytes) differs from the fixture (%d bytes)", len(got), len(fix))
	}
}

// TestRecordBytesRefusedBeforeWriting: a table whose rows are not the
// record size the runtime reads is refused, naming tensor, width and the
// expected size, before anything exists in dst (dry run too).
func TestRecordBytesRefusedBeforeWriting(t *testing.T) {
	src := filepath.Join(t.TempDir(), "ckpt")
	writeCheckpoint(t, src, []shardSpec{{"model-00001-of-00001.safetensors", []safetensors.Tensor{
		tn("model.layers.0.engram.embed.weight", "BF16", 40, 132),
		tn("model.layers.1.engram.embed.weight", "BF16", 40, 64),
	}}}, true)
	root := t.TempDir()
	spec := Spec{Src: src, Dst: filepath.Join(root, "state", "engram"), Format: FormatPacked,
		Tensors: []string{"model.layers.{L}.engram.embed.weight"}, Layers: []int{0, 1}, Rank: 0, TP: 2, Roots: []string{root}, RecordBytes: 264}
	for _, dry := range []bool{true, false} {
		_, err := Stage(context.Background(), spec, staging.Options{DryRun: dry})
		if typ, _ := fault.TypeOf(err); typ != RecordSizeMismatch {
			t.Fatalf("dry=%v: %v, want %s", dry, err, RecordSizeMismatch)
		}
		for _, part := range []string{"model.layers.1.engram.embed.weight", "[64] BF16", "128 bytes", "264-byte records", "record_bytes"} {
			if !strings.Contains(err.Error(), part) {
				t.Fatalf("error %q does not name %q", err, part)
			}
		}
		if _, err := os.Lstat(filepath.Join(root, "state")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("dry=%v: a refused table wrote under the root (%v)", dry, err)
		}
	}
	// The 264-byte table alone packs.
	spec.Layers = []int{0}
	if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	h, err := ReadPackedHeader(filepath.Join(spec.Dst, PackedFileName(0, 0, 2)))
	if err != nil || h.RecordSize != 264 || h.RowCount != 20 {
		t.Fatalf("packed header %+v, %v: want 20 records of 264 bytes", h, err)
	}
}
