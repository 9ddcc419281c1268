package fittest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/hubcache"
)

// Rev is the commit every snapshot is written at.
const Rev = "0123456789abcdef0123456789abcdef01234567"

// Config is a Llama-shaped config.json: 60 layers, 8 KV heads of 128,
// 32768 positions, bf16.
var Config = map[string]any{"num_hidden_layers": 60, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
	"hidden_size": 8192, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}

// Snapshot writes repo under hubRoot with one BF16 shard per entry of
// shardParams (that many parameters, as a [rows, 1024] tensor plus a
// remainder vector) and config.json (cfg; nil: none), and returns the
// snapshot directory.
func Snapshot(t testing.TB, hubRoot, repo string, cfg map[string]any, shardParams ...int64) string {
	t.Helper()
	repoDir := hubcache.RepoPath(hubRoot, repo)
	snap := filepath.Join(repoDir, hubcache.Snapshots, Rev)
	must(t, os.MkdirAll(snap, 0o755))
	must(t, os.MkdirAll(filepath.Join(repoDir, hubcache.Refs), 0o755))
	must(t, os.WriteFile(filepath.Join(repoDir, hubcache.Refs, "main"), []byte(Rev), 0o644))
	for i, n := range shardParams {
		var ts []safetensors.Tensor
		if rows := n / 1024; rows > 0 {
			ts = append(ts, safetensors.Tensor{Name: fmt.Sprintf("layers.%d.w", i), DType: "BF16", Shape: []int64{rows, 1024}})
		}
		if rest := n % 1024; rest > 0 {
			ts = append(ts, safetensors.Tensor{Name: fmt.Sprintf("layers.%d.b", i), DType: "BF16", Shape: []int64{rest}})
		}
		hdr, laid, err := safetensors.Encode(ts, nil)
		must(t, err)
		p := filepath.Join(snap, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shardParams)))
		must(t, os.WriteFile(p, hdr, 0o644))
		end := int64(0)
		if len(laid) > 0 {
			end = laid[len(laid)-1].End
		}
		must(t, os.Truncate(p, int64(len(hdr))+end)) // the data: a hole
	}
	if cfg != nil {
		b, err := json.Marshal(cfg)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(snap, "config.json"), b, 0o644))
	}
	return snap
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
