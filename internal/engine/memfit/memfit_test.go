package memfit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/fittest"
)

// A 100B-parameter BF16 model (two sparse shards of 50B: their headers
// say 200 GB, the files hold a few kB) does not fit one 128 GB DGX Spark
// at vLLM's 0.9, and the refusal shows the arithmetic; over tp 2 it fits.
func TestSparseShardsRefusedWithTheArithmetic(t *testing.T) {
	snap := fittest.Snapshot(t, t.TempDir(), "org/big", fittest.Config, 50e9, 50e9)
	var used int64
	filepath.Walk(snap, func(_ string, fi os.FileInfo, _ error) error {
		if st, ok := sysBlocks(fi); ok {
			used += st
		}
		return nil
	})
	if used > 1<<20 {
		t.Fatalf("the fixture uses %d bytes of disk: not sparse", used)
	}
	w, err := ReadWeights(snap)
	if err != nil {
		t.Fatal(err)
	}
	if w.Params != 100e9 || w.Bytes != 200e9 || w.Files != 2 || strings.Join(w.DTypes, ",") != "BF16" {
		t.Fatalf("weights %+v", w)
	}
	m, err := ReadModel(snap)
	if err != nil {
		t.Fatal(err)
	}
	spark := []Node{{Name: "dgx1", Memory: SparkMemory, Source: "DGX Spark default"}}

	e, err := EngineFlags("vllm", []string{"vllm", "serve", "org/big", "--max-model-len", "8192"}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	est, err := Compute("big", w, &m, e, spark)
	if err != nil {
		t.Fatal(err)
	}
	ferr := est.Err()
	if ferr == nil {
		t.Fatalf("200 GB of weights fit 128 GB: %v", est.Lines())
	}
	for _, want := range []string{"lane big does not fit in memory on dgx1",
		"weights 200.0 GB (100.0B params, BF16, 2 file(s) in " + snap + ") ÷ (tp 1 × pp 1) = 200.0 GB per node",
		"KV cache 2 (K,V) × 8192 tokens (max_model_len) × 60 layers ÷ pp 1 × 8 kv heads ÷ tp 1 × 128 head dim × 2 bytes (bfloat16) = 2.0 GB",
		"node dgx1: need 200.0 GB + 2.0 GB = 202.0 GB > 0.9 (gpu_memory_utilization default) × 128.0 GB (DGX Spark default) = 115.2 GB: DOES NOT FIT",
		"--force"} {
		if !strings.Contains(ferr.Error(), want) {
			t.Errorf("refusal lacks %q:\n%v", want, ferr)
		}
	}

	// tp 2 (the flag wins over the world shape given), fp8 KV cache.
	e, _ = EngineFlags("vllm", []string{"vllm", "serve", "org/big", "-tp", "2", "--kv-cache-dtype=fp8", "--gpu-memory-utilization", "0.85"}, 1, 1)
	est, err = Compute("big", w, &m, e, spark)
	if err != nil || est.Err() != nil {
		t.Fatalf("over tp 2: %v %v", err, est.Lines())
	}
	if got := est.Lines()[2]; !strings.Contains(got, "need 100.0 GB + 2.0 GB = 102.0 GB ≤ 0.85 (gpu_memory_utilization) × 128.0 GB (DGX Spark default) = 108.8 GB: fits") {
		t.Errorf("tp 2: %s", got)
	}
	if !strings.Contains(est.KVWhy, "32768 tokens (max_position_embeddings of config.json (no max_model_len))") {
		t.Errorf("KV without max_model_len: %s", est.KVWhy)
	}
}

// SGLang without --context-length sizes its KV pool to what is left:
// no floor is counted; its --mem-fraction-static is the share.
func TestSGLangFlags(t *testing.T) {
	e, err := EngineFlags("sglang", []string{"python3", "-m", "sglang.launch_server", "--tp-size", "4", "--mem-fraction-static", "0.7"}, 1, 1)
	if err != nil || e.TP != 4 || e.Utilization != 0.7 || !e.UtilizationSet {
		t.Fatalf("%+v %v", e, err)
	}
	est, err := Compute("l", Weights{Bytes: 4e9}, &Model{Layers: 2, KVHeads: 1, HeadDim: 1, MaxLen: 10}, e, []Node{{Name: "n", Memory: 10e9}})
	if err != nil || est.KVPerNode != 0 || est.WeightsPerNode != 1e9 || !strings.Contains(est.Lines()[2], "0.7 (mem_fraction_static) × 10.0 GB") {
		t.Fatalf("%v %+v", err, est)
	}
	if _, err := EngineFlags("vllm", []string{"--gpu-memory-utilization", "1.5"}, 1, 1); err == nil {
		t.Error("a utilization of 1.5 was accepted")
	}
}

func TestMemTotal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "meminfo")
	os.WriteFile(p, []byte("MemFree: 1 kB\nMemTotal:       125000000 kB\n"), 0o644)
	if n, err := ReadMemTotal(p); err != nil || n != 128e9 {
		t.Fatalf("%d %v", n, err)
	}
	os.WriteFile(p, []byte("MemFree: 1 kB\n"), 0o644)
	if _, err := ReadMemTotal(p); err == nil || !strings.Contains(err.Error(), "no MemTotal") {
		t.Fatalf("%v", err)
	}
	os.WriteFile(p, []byte("MemTotal: 2 kB\nMemAvailable:    5000 kB\n"), 0o644)
	if n, err := ReadMemAvailable(p); err != nil || n != 5000*1024 {
		t.Fatalf("MemAvailable: %d %v", n, err)
	}
	os.WriteFile(p, []byte("MemTotal: 2 kB\nMemAvailable: 5000 MB\n"), 0o644)
	if _, err := ReadMemAvailable(p); err == nil || !strings.Contains(err.Error(), "no MemAvailable") {
		t.Fatalf("MemAvailable not in kB: %v", err)
	}
	dir := t.TempDir()
	if err := SaveDiscovered(dir, map[string]int64{"a": 5, "b": 0}); err != nil {
		t.Fatal(err)
	}
	SaveDiscovered(dir, map[string]int64{"c": 7})
	if got := LoadDiscovered(dir); len(got) != 2 || got["a"] != 5 || got["c"] != 7 {
		t.Fatalf("%v", got)
	}
}

// A config.json that does not give the KV cache's shape is an error of
// ReadModel; without a model the estimate counts the weights alone and
// says so.
func TestWithoutModelShape(t *testing.T) {
	snap := fittest.Snapshot(t, t.TempDir(), "org/odd", map[string]any{"architectures": []string{"Odd"}}, 1e9)
	if _, err := ReadModel(snap); err == nil || !strings.Contains(err.Error(), "the KV cache cannot be sized") {
		t.Fatalf("%v", err)
	}
	w, _ := ReadWeights(snap)
	e, _ := EngineFlags("vllm", nil, 1, 1)
	est, err := Compute("odd", w, nil, e, []Node{{Name: "n", Memory: SparkMemory}})
	if err != nil || est.Err() != nil || est.KVPerNode != 0 || !strings.Contains(est.Lines()[1], "KV cache not counted") {
		t.Fatalf("%v %v", err, est.Lines())
	}
}

// BenchmarkFit64Shards is the fit of a 400B-parameter model in 64 shards:
// headers only, so its cost is the shards' count, not their size.
func BenchmarkFit64Shards(b *testing.B) {
	shards := make([]int64, 64)
	for i := range shards {
		shards[i] = 400e9 / 64
	}
	snap := fittest.Snapshot(b, b.TempDir(), "org/huge", fittest.Config, shards...)
	e, _ := EngineFlags("vllm", []string{"-tp", "4"}, 1, 1)
	b.ResetTimer()
	for range b.N {
		w, err := ReadWeights(snap)
		if err != nil {
			b.Fatal(err)
		}
		m, err := ReadModel(snap)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Compute("huge", w, &m, e, []Node{{Name: "n", Memory: SparkMemory}}); err != nil {
			b.Fatal(err)
		}
	}
}
