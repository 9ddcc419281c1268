package sparserows

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
)

// shardSpec is one shard a test writes: its file name and tensors in order.
type shardSpec struct {
	name    string
	tensors []safetensors.Tensor
}

// fixture is a checkpoint a test wrote, with every tensor's bytes kept.
type fixture struct {
	dir  string
	data map[string][]byte // tensor name → data
}

// fill makes n deterministic bytes, distinct per seed.
func fill(seed string, n int64) []byte {
	out := make([]byte, 0, n+32)
	var ctr [8]byte
	for i := uint64(0); int64(len(out)) < n; i++ {
		binary.LittleEndian.PutUint64(ctr[:], i)
		s := sha256.Sum256(append([]byte(seed), ctr[:]...))
		out = append(out, s[:]...)
	}
	return out[:n]
}

func tensorBytes(t *testing.T, tn safetensors.Tensor) int64 {
	t.Helper()
	es, err := safetensors.DTypeSize(tn.DType)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(es)
	for _, d := range tn.Shape {
		n *= d
	}
	return n
}

// writeCheckpoint writes shards and (when index) model.safetensors.index.json.
func writeCheckpoint(t *testing.T, dir string, shards []shardSpec, index bool) *fixture {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fx := &fixture{dir: dir, data: map[string][]byte{}}
	wm := map[string]string{}
	for _, s := range shards {
		hdr, _, err := safetensors.Encode(s.tensors, map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		buf := append([]byte(nil), hdr...)
		for _, tn := range s.tensors {
			d := fill(s.name+"/"+tn.Name, tensorBytes(t, tn))
			fx.data[tn.Name] = d
			buf = append(buf, d...)
			wm[tn.Name] = s.name
		}
		if err := os.WriteFile(filepath.Join(dir, s.name), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if index {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": wm})
		if err := os.WriteFile(filepath.Join(dir, IndexName), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return fx
}

// table returns the concatenated bytes of a table (one tensor or its parts).
func (fx *fixture) table(name string) []byte {
	if d, ok := fx.data[name]; ok {
		return d
	}
	var out []byte
	for k := 0; ; k++ {
		d, ok := fx.data[name+".part"+itoa(k)]
		if !ok {
			return out
		}
		out = append(out, d...)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func tn(name, dtype string, shape ...int64) safetensors.Tensor {
	return safetensors.Tensor{Name: name, DType: dtype, Shape: shape}
}

// standardCheckpoint: layer 3's table is one BF16 tensor [1006, 24] in
// shard 1; layer 14's table is split in two U8 parts of 7-byte rows across
// shards 1 and 2 (600 + 406 rows); other tensors sit around them.
func standardCheckpoint(t *testing.T, dir string) *fixture {
	return writeCheckpoint(t, dir, []shardSpec{
		{"model-00001-of-00002.safetensors", []safetensors.Tensor{
			tn("model.embed_tokens.weight", "F32", 64, 16),
			tn("model.layers.3.engram.table", "BF16", 1006, 24),
			tn("model.layers.14.engram.table.part0", "U8", 600, 7),
		}},
		{"model-00002-of-00002.safetensors", []safetensors.Tensor{
			tn("model.layers.14.engram.table.part1", "U8", 406, 7),
			tn("lm_head.weight", "F16", 32, 8),
		}},
	}, true)
}

func baseSpec(t *testing.T, src, format string, rank, tp int) Spec {
	root := t.TempDir()
	return Spec{
		Src: src, Dst: filepath.Join(root, "state", "engram"), Format: format,
		Tensors: []string{"model.layers.{L}.engram.table"}, Layers: []int{3, 14},
		Rank: rank, TP: tp, Roots: []string{root}, BlockRows: 64,
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
