package memfit

import (
	"bufio"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/fittest"
)

// max_model_len is read as vLLM reads it (human_readable_int_or_auto in
// vllm/utils/argparse_utils.py): lowercase units are powers of 1000 and
// take decimals (multiplied in floating point and truncated, as vLLM
// does), uppercase ones powers of 1024 on whole numbers only, else a
// plain integer as Python's int() reads it, and auto or -1.
func TestMaxModelLenAsVLLMReadsIt(t *testing.T) {
	for in, want := range map[string]int64{
		"32768": 32768, " 32768 ": 32768, "+32768": 32768, "32_768": 32768, "007": 7,
		"32k": 32000, "32K": 32768, "25.6k": 25600, "0.5k": 500, "1m": 1_000_000, "1M": 1 << 20,
		"2g": 2e9, "1G": 1 << 30, "1t": 1e12, "1T": 1 << 40, "128k": 128000, "256K": 262144,
		"1.2345k":           1234,                // vLLM: int(1.2345 * 1000) = int(1234.5) = 1234
		"8.2m":              8199999,             // vLLM: 8.2 * 10**6 is 8199999.999… in binary floating point
		"9007199254740993k": 9007199254740992000, // float64(9007199254740993) is …992, as in vLLM
		"auto":              MaxLenAuto, "AUTO": MaxLenAuto, "-1": MaxLenAuto, " -1 ": MaxLenAuto,
	} {
		got, err := ParseMaxModelLen(in)
		if err != nil || got != want {
			t.Errorf("ParseMaxModelLen(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"1.5M":                 "decimals are not allowed with the binary unit M (1024^2), as vLLM refuses them: write 1.5m",
		"0.5K":                 "decimals are not allowed with the binary unit K",
		"32kb":                 "is not an integer",
		"32 k":                 "is not an integer",
		"k":                    "is not an integer",
		".5k":                  "is not an integer",
		"5.k":                  "is not an integer",
		"1e3":                  "is not an integer",
		"1_000_":               "is not an integer",
		"1__000":               "is not an integer",
		"+-5":                  "is not an integer",
		"３２k":                  "is not an integer", // fullwidth digits: ASCII only
		"":                     "is not an integer",
		"0":                    "is not a context length",
		"-5":                   "is not a context length",
		"0.0001k":              "is not a context length", // truncates to 0
		"9223372036854775808":  "past the largest integer",
		"9007199254740993K":    "past the largest length",
		"9300000000000000000k": "past the largest length",
		"9223373t":             "past the largest length",
	} {
		got, err := ParseMaxModelLen(in)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseMaxModelLen(%q) = %d, %v; want an error saying %q", in, got, err, why)
		}
	}
}

// The fit reads --max-model-len by that rule: "32k" is 32,000 tokens, not
// 32,768, and "25.6k" is estimated, not an error; SGLang's
// --context-length is a plain integer, as SGLang reads it.
func TestEngineFlagsReadMaxModelLenAsTheEngineDoes(t *testing.T) {
	for argv, want := range map[string]int64{
		"--max-model-len 32k": 32000, "--max-model-len=32K": 32768, "--max-model-len 25.6k": 25600, "--max_model_len 1m": 1e6,
	} {
		e, err := EngineFlags("vllm", strings.Fields(argv), 1, 1)
		if err != nil || e.MaxLen != want || e.MaxLenFlag != strings.Replace(strings.Replace(argv, "=", " ", 1), "_", "-", 2) {
			t.Errorf("%s: %+v %v, want %d", argv, e, err, want)
		}
	}
	e, _ := EngineFlags("vllm", strings.Fields("--max-model-len 32k"), 1, 1)
	est, err := Compute("l", Weights{Bytes: 1e9}, &Model{Layers: 1, KVHeads: 1, HeadDim: 1}, e, nil)
	if err != nil || est.KVPerNode != 2*32000*2 || !strings.Contains(est.KVWhy, "32000 tokens (--max-model-len 32k)") {
		t.Errorf("%v %+v", err, est)
	}
	e, _ = EngineFlags("vllm", strings.Fields("--max-model-len auto"), 1, 1)
	if est, err := Compute("l", Weights{Bytes: 1e9}, &Model{Layers: 1, KVHeads: 1, HeadDim: 1, MaxLen: 10}, e, nil); err != nil || est.KVPerNode != 0 || !strings.Contains(est.KVWhy, "KV cache not counted (--max-model-len auto: vLLM fits the context") {
		t.Errorf("auto: %v %+v", err, est)
	}
	if _, err := EngineFlags("sglang", strings.Fields("--context-length 32k"), 1, 1); err == nil || !strings.Contains(err.Error(), "--context-length 32k") || !strings.Contains(err.Error(), "SGLang reads --context-length as a plain integer") {
		t.Errorf("sglang 32k: %v", err)
	}
	for _, argv := range []string{"-tp 0", "-pp -2", "--tensor-parallel-size x", "-tp 99999999999999999999"} {
		if _, err := EngineFlags("vllm", strings.Fields(argv), 1, 1); err == nil || !strings.Contains(err.Error(), argv) {
			t.Errorf("%s: %v", argv, err)
		}
	}
}

// -tp 4294967296 -pp 4294967296 multiplies to 2^64, which wrapped to 0
// ranks and divided the weights by zero (a panic in recipe check and
// cutover --dry-run): it is an error naming the flags.
func TestRanksOverflowIsAnError(t *testing.T) {
	e, err := EngineFlags("vllm", strings.Fields("vllm serve m -tp 4294967296 -pp 4294967296"), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	est, err := Compute("l", Weights{Bytes: 200e9}, &Model{Layers: 60, KVHeads: 8, HeadDim: 128, MaxLen: 8192}, e, []Node{{Name: "n", Memory: SparkMemory}})
	if err == nil || est != nil || !strings.Contains(err.Error(), "tensor parallel × pipeline parallel passes 2^63-1 at -pp 4294967296 (4294967296 × 4294967296)") {
		t.Fatalf("%v %+v", err, est)
	}
}

// num_hidden_layers = 2^63-1 in config.json, or --max-model-len
// 9007199254740993k, took the KV cache past int64: it wrapped to a
// negative need that "fit". Each is an error naming the key or flag and
// its value.
func TestKVOverflowIsAnErrorNamingTheKey(t *testing.T) {
	cfg := map[string]any{}
	for k, v := range fittest.Config {
		cfg[k] = v
	}
	cfg["num_hidden_layers"] = int64(math.MaxInt64)
	snap := fittest.Snapshot(t, t.TempDir(), "org/deep", cfg, 1e9)
	w, err := ReadWeights(snap)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadModel(snap)
	if err != nil || m.Layers != math.MaxInt64 {
		t.Fatalf("%+v %v", m, err)
	}
	spark := []Node{{Name: "n", Memory: SparkMemory}}
	e, _ := EngineFlags("vllm", strings.Fields("--max-model-len 8192"), 1, 1)
	est, err := Compute("deep", w, &m, e, spark)
	if err == nil || est != nil || !strings.Contains(err.Error(), "passes 2^63-1 at num_hidden_layers 9223372036854775807 (÷ pp 1) in "+filepath.Join(snap, "config.json")) {
		t.Errorf("2^63-1 layers: %v %+v", err, est)
	}
	for _, pp := range []string{"2", "7"} { // ⌈layers ÷ pp⌉ never adds pp to 2^63-1 first
		e, _ := EngineFlags("vllm", strings.Fields("--max-model-len 8192 -pp "+pp), 1, 1)
		if est, err := Compute("deep", w, &m, e, spark); err == nil || !strings.Contains(err.Error(), "num_hidden_layers 9223372036854775807") {
			t.Errorf("2^63-1 layers, pp %s: %v %+v", pp, err, est)
		}
	}

	m = Model{Layers: 60, KVHeads: 8, HeadDim: 128, MaxLen: 32768, DType: "bfloat16"}
	e, err = EngineFlags("vllm", strings.Fields("--max-model-len 9007199254740993k"), 1, 1)
	if err != nil || e.MaxLen != 9007199254740992000 {
		t.Fatalf("%+v %v", e, err)
	}
	est, err = Compute("long", w, &m, e, spark)
	if err == nil || est != nil || !strings.Contains(err.Error(), "passes 2^63-1 at --max-model-len 9007199254740993k") {
		t.Errorf("9007199254740993k: %v %+v", err, est)
	}
	// MLA: the latent width is counted once, checked the same way.
	m = Model{Layers: 61, MLA: 576, MaxLen: 163840}
	if est, err = Compute("mla", w, &m, e, spark); err == nil || !strings.Contains(err.Error(), "--max-model-len 9007199254740993k") {
		t.Errorf("MLA, 9007199254740993k: %v %+v", err, est)
	}
	// A value that does not overflow but is past any node still refuses.
	e, _ = EngineFlags("vllm", strings.Fields("--max-model-len 1t"), 1, 1)
	if est, err = Compute("long", w, &Model{Layers: 60, KVHeads: 8, HeadDim: 128}, e, spark); err != nil || est.Nodes[0].Need <= 0 || est.Err() == nil {
		t.Errorf("1t tokens: %v %+v", err, est)
	}
}

// config.json values no model has are errors naming the key: a negative
// one, one past int64 (JSON allows it), an MLA width whose sum passes
// int64.
func TestConfigValuesNamed(t *testing.T) {
	for body, want := range map[string]string{
		`{"num_hidden_layers": 9223372036854775808, "num_attention_heads": 8, "head_dim": 128}`:                              "num_hidden_layers",
		`{"num_hidden_layers": 60, "num_attention_heads": 8, "head_dim": -128}`:                                              "head_dim = -128: negative",
		`{"text_config": {"num_hidden_layers": 60, "num_key_value_heads": -1, "head_dim": 128}}`:                             "text_config.num_key_value_heads = -1: negative",
		`{"num_hidden_layers": 61, "kv_lora_rank": 9223372036854775807, "qk_rope_head_dim": 64, "num_attention_heads": 128}`: "kv_lora_rank 9223372036854775807 + qk_rope_head_dim 64 passes 2^63-1",
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, "config.json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if m, err := ReadModel(dir); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %+v %v, want %q", body, m, err, want)
		}
	}
}

// A tensor of shape [2^62, 4] has 2^64 elements: the product wrapped to
// 0, and BF16's 2^65 bytes to 0 too, so data_offsets [0,0] matched and the
// tensor counted 0 parameters. It is refused, naming the file and tensor.
func TestTensorShapeElementsNeverWrap(t *testing.T) {
	snap := fittest.Snapshot(t, t.TempDir(), "org/wide", fittest.Config, 1e6)
	hdr := []byte(`{"huge":{"dtype":"BF16","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`)
	shard := filepath.Join(snap, "model-00002-of-00002.safetensors")
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	if err := os.WriteFile(shard, append(b, hdr...), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := ReadWeights(snap)
	if err == nil || !strings.Contains(err.Error(), shard) || !strings.Contains(err.Error(), "tensor huge") || !strings.Contains(err.Error(), "passes 2^63-1 bytes") {
		t.Fatalf("weights %+v, %v", w, err)
	}
	for shape, want := range map[string]int64{"[4611686018427387904, 0, 4]": 0, "[3, 5, 7]": 105, "[]": 1} {
		var dims []int64
		for _, f := range strings.FieldsFunc(strings.Trim(shape, "[]"), func(r rune) bool { return r == ',' || r == ' ' }) {
			d, _ := strconv.ParseInt(f, 10, 64)
			dims = append(dims, d)
		}
		if n, err := elements(dims); err != nil || n != want {
			t.Errorf("elements(%s) = %d %v, want %d", shape, n, err, want)
		}
	}
	if n, err := elements([]int64{1 << 62, 4}); err == nil {
		t.Errorf("elements([2^62, 4]) = %d, no error", n)
	}
}

// A config.json of 2 GiB (the Hub serves whatever a repo holds) was read
// whole: 2.1 GB of RSS. It is refused before a byte of it is read, naming
// the file and the limit, and the check's memory stays small. The file is
// sparse: the test costs no disk.
func TestHugeConfigRefusedWithBoundedMemory(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()

	runtime.GC()
	resetPeakRSS(t)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rssBefore := procStatus(t, "VmRSS")
	_, err = ReadModel(dir)
	runtime.ReadMemStats(&after)
	peak := procStatus(t, "VmHWM")

	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "2147483648 bytes, over the 16777216-byte (16 MiB) limit") {
		t.Errorf("ReadModel of a 2 GiB config.json: %v", err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	growth := peak - rssBefore
	t.Logf("reading a 2 GiB sparse config.json: %d bytes allocated, peak RSS %d KiB over the %d KiB before", allocated, growth>>10, rssBefore>>10)
	if allocated > 64<<20 || growth > 64<<20 {
		t.Errorf("the refusal took %d bytes of allocations and %d bytes of RSS: the file was read", allocated, growth)
	}
}

// resetPeakRSS makes VmHWM the current RSS (Linux: "5" to clear_refs), so
// the peak read after a call is that call's.
func resetPeakRSS(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS: %v", err)
	}
}

// procStatus is a /proc/self/status field in bytes.
func procStatus(t *testing.T, key string) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == key {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}
