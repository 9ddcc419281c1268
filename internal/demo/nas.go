package demo

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/hubcache"
)

// Repos in the synthetic hub.
const (
	ModelRepo  = "demo/sim-model"
	EngramRepo = "demo/sim-engram"
	Revision   = "5d0c1a7e9b3f4c2d8e6a0b1c2d3e4f5a6b7c8d9e"
)

// EngramLayers are the layers whose tables the demo packs per rank.
var EngramLayers = []int{1, 3}

// EngramRows are the row counts of the engram tables, deliberately not
// divisible by 4 or 2, so the tiling's remainder rows are exercised.
var EngramRows = map[int]int64{1: 100_003, 3: 100_019}

// NAS describes the generated hub.
type NAS struct {
	Hub        string `json:"hub"`
	ModelBytes int64  `json:"model_bytes"`
	// EngramSnapshot is the sparse-rows src (a snapshot dir).
	EngramSnapshot string `json:"engram_snapshot"`
}

// RepoDir is models--org--name under hub (hubcache.RepoPath), kept for
// the suites that look into the demo's NAS.
func RepoDir(hub, repo string) string {
	return hubcache.RepoPath(hub, repo)
}

// GenerateNAS writes the hub under dir/hub unless a complete one of the
// same size is already there (a marker file records it), so a second demo
// reuses it.
func GenerateNAS(dir string, modelBytes int64) (NAS, error) {
	hub := filepath.Join(dir, "hub")
	nas := NAS{Hub: hub, ModelBytes: modelBytes, EngramSnapshot: filepath.Join(RepoDir(hub, EngramRepo), hubcache.Snapshots, Revision)}
	marker := filepath.Join(dir, ".sparklane-demo-nas.json")
	if b, err := os.ReadFile(marker); err == nil {
		var old NAS
		if json.Unmarshal(b, &old) == nil && old == nas {
			return nas, nil
		}
	}
	if err := os.RemoveAll(hub); err != nil {
		return nas, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// The model: 4 shards of F16 tensors plus small real files.
	shards := 4
	per := modelBytes / int64(shards)
	const width = 2048 // F16 elements per row
	rowsPer := per / (width * 2) / 4
	if rowsPer < 1 {
		rowsPer = 1
	}
	var files []genFile
	weightMap := map[string]string{}
	for s := 0; s < shards; s++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		var ts []safetensors.Tensor
		for k := 0; k < 4; k++ {
			tn := fmt.Sprintf("model.layers.%d.mlp.w%d.weight", s, k)
			ts = append(ts, safetensors.Tensor{Name: tn, DType: "F16", Shape: []int64{rowsPer, width}})
			weightMap[tn] = name
		}
		files = append(files, genFile{path: name, tensors: ts})
	}
	files = append(files,
		genFile{path: "config.json", data: []byte(`{"architectures":["SimForCausalLM"],"model_type":"sim","hidden_size":2048}` + "\n")},
		genFile{path: "tokenizer.json", data: []byte(`{"version":"1.0","model":{"type":"sim"}}` + "\n")},
		genFile{path: "model.safetensors.index.json", data: mustIndex(weightMap, modelBytes)},
	)
	if err := writeRepo(hub, ModelRepo, files, rng); err != nil {
		return nas, err
	}
	// The engram tables: one shard per layer, BF16 rows of 128 values.
	var efiles []genFile
	ewm := map[string]string{}
	for _, l := range EngramLayers {
		name := fmt.Sprintf("engram-l%d.safetensors", l)
		tn := fmt.Sprintf("model.layers.%d.engram.table", l)
		efiles = append(efiles, genFile{path: name, tensors: []safetensors.Tensor{{Name: tn, DType: "BF16", Shape: []int64{EngramRows[l], 128}}}})
		ewm[tn] = name
	}
	efiles = append(efiles, genFile{path: "model.safetensors.index.json", data: mustIndex(ewm, 0)})
	if err := writeRepo(hub, EngramRepo, efiles, rng); err != nil {
		return nas, err
	}
	b, _ := json.Marshal(nas)
	return nas, atomicfile.Write(marker, b, 0o644)
}

type genFile struct {
	path    string
	data    []byte
	tensors []safetensors.Tensor
}

func mustIndex(wm map[string]string, total int64) []byte {
	b, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": wm}, "", "  ")
	return append(b, '\n')
}

// writeRepo writes blobs named by the sha256 of their content (as LFS does),
// snapshots/REV/FILE → ../../blobs/SHA links, and refs/main.
func writeRepo(hub, repo string, files []genFile, rng *rand.Rand) error {
	dir := RepoDir(hub, repo)
	for _, d := range []string{hubcache.Blobs, hubcache.Refs, filepath.Join(hubcache.Snapshots, Revision)} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, f := range files {
		tmp, err := os.CreateTemp(filepath.Join(dir, hubcache.Blobs), ".gen-*")
		if err != nil {
			return err
		}
		h := sha256.New()
		w := io.MultiWriter(tmp, h)
		if f.tensors != nil {
			hdr, laid, err := safetensors.Encode(f.tensors, map[string]string{"format": "pt"})
			if err != nil {
				tmp.Close()
				return err
			}
			if _, err := w.Write(hdr); err != nil {
				tmp.Close()
				return err
			}
			var n int64
			for _, t := range laid {
				n += t.End - t.Begin
			}
			if err := writeRandom(w, n, rng); err != nil {
				tmp.Close()
				return err
			}
		} else if _, err := w.Write(f.data); err != nil {
			tmp.Close()
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		sum := hex.EncodeToString(h.Sum(nil))
		if err := os.Rename(tmp.Name(), filepath.Join(dir, hubcache.Blobs, sum)); err != nil {
			return err
		}
		link := filepath.Join(dir, hubcache.Snapshots, Revision, f.path)
		os.Remove(link)
		if err := os.Symlink(filepath.Join("..", "..", hubcache.Blobs, sum), link); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, hubcache.Refs, "main"), []byte(Revision), 0o644)
}

func writeRandom(w io.Writer, n int64, rng *rand.Rand) error {
	buf := make([]byte, 4<<20)
	for n > 0 {
		c := int64(len(buf))
		if c > n {
			c = n
		}
		for i := int64(0); i+8 <= c; i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], rng.Uint64())
		}
		if _, err := w.Write(buf[:c]); err != nil {
			return err
		}
		n -= c
	}
	return nil
}
