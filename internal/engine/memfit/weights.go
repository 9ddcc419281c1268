package memfit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
)

// Weights is what a model directory's safetensors headers declare.
type Weights struct {
	// Dir is the snapshot directory read; Files the shards read.
	Dir   string `json:"dir"`
	Files int    `json:"files"`
	// Params is the parameter count (elements of every tensor) and Bytes
	// their size (elements × dtype bytes, as stored: packed quantized
	// tensors count as their storage dtype).
	Params int64 `json:"params"`
	Bytes  int64 `json:"bytes"`
	// DTypes are the stored dtypes, sorted.
	DTypes []string `json:"dtypes"`
}

// ReadWeights reads the safetensors headers of the model in dir (a Hub
// snapshot directory, whose files may be links into blobs/): the shards
// model.safetensors.index.json names when there is one (a repo may also
// ship a consolidated copy), else every *.safetensors file. Only headers
// are read, so a sparse or absent data section costs nothing.
func ReadWeights(dir string) (Weights, error) {
	w := Weights{Dir: dir}
	var files []string
	if ix, err := safetensors.ReadIndex(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		for _, s := range ix.Shards() {
			files = append(files, filepath.Join(dir, s))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return w, err
	} else if files, err = filepath.Glob(filepath.Join(dir, "*.safetensors")); err != nil {
		return w, err
	}
	if len(files) == 0 {
		return w, fmt.Errorf("%s: no *.safetensors files: not a safetensors model snapshot", dir)
	}
	dtypes := map[string]bool{}
	for _, f := range files {
		h, err := safetensors.ReadHeader(f)
		if err != nil {
			return w, fmt.Errorf("memory fit: %w", err)
		}
		for _, name := range h.Names() {
			t := h.Tensors[name]
			n, err := elements(t.Shape)
			if err != nil {
				return w, fmt.Errorf("memory fit: %s: tensor %s: %w", f, name, err)
			}
			var okP, okB bool
			w.Params, okP = add(w.Params, n)
			w.Bytes, okB = add(w.Bytes, t.End-t.Begin)
			if !okP || !okB {
				return w, fmt.Errorf("memory fit: %s: tensor %s: the model's parameters or bytes pass 2^63-1 in total: not a real model", f, name)
			}
			dtypes[t.DType] = true
		}
		w.Files++
	}
	for d := range dtypes {
		w.DTypes = append(w.DTypes, d)
	}
	sort.Strings(w.DTypes)
	return w, nil
}

// elements is the element count of a shape, checked: a shape like
// [2^62, 4] passes 2^63-1 and is an error, never a wrapped 0.
func elements(shape []int64) (int64, error) {
	fs := make([]factor, len(shape))
	for i, d := range shape {
		if d == 0 {
			return 0, nil
		}
		fs[i] = factor{d, fmt.Sprintf("dimension %d (%d)", i, d)}
	}
	n, err := product(fmt.Sprintf("the element count of shape %v", shape), fs...)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// MaxConfigLen bounds the config.json the fit reads: the Hub serves it,
// so its size is the repo owner's choice; a real one is a few kB (a
// multimodal model's tens of kB).
const MaxConfigLen = 16 << 20

// ErrNoKVShape is ReadModel's error for a config.json that reads but does
// not give the KV cache's shape: the fit then counts the weights alone,
// saying so, where a config.json that does not read is an error.
var ErrNoKVShape = errors.New("the KV cache cannot be sized")

// Model is what the KV cache size depends on, from the model's config.json.
type Model struct {
	Layers  int `json:"layers"`
	KVHeads int `json:"kv_heads"`
	HeadDim int `json:"head_dim"`
	// MLA is the compressed KV width per token and layer of a multi-head
	// latent attention model (kv_lora_rank + qk_rope_head_dim, DeepSeek):
	// one latent, not split over tensor-parallel ranks. 0 for others.
	MLA int `json:"mla,omitempty"`
	// MaxLen is max_position_embeddings, the context an engine serves
	// when no max_model_len is given.
	MaxLen int `json:"max_len"`
	// DType is torch_dtype, what "auto" KV caches store.
	DType string `json:"dtype"`
	// File is the config.json read, for messages.
	File string `json:"file,omitempty"`
}

// ReadModel reads dir/config.json; a multimodal model's text_config (or
// llm_config) is where its language model's shape is. A file over
// MaxConfigLen is refused unread, a value that is negative or past int64
// is an error naming its key, and a config.json without the shape is
// ErrNoKVShape.
func ReadModel(dir string) (Model, error) {
	p := filepath.Join(dir, "config.json")
	b, err := safetensors.ReadBounded(p, MaxConfigLen)
	if err != nil {
		return Model{}, err
	}
	type shape struct {
		Layers    int    `json:"num_hidden_layers"`
		Heads     int    `json:"num_attention_heads"`
		KVHeads   int    `json:"num_key_value_heads"`
		HeadDim   int    `json:"head_dim"`
		Hidden    int    `json:"hidden_size"`
		KVLora    int    `json:"kv_lora_rank"`
		Rope      int    `json:"qk_rope_head_dim"`
		MaxPos    int    `json:"max_position_embeddings"`
		DType     string `json:"torch_dtype"`
		DTypeNew  string `json:"dtype"`
		Text      *shape `json:"text_config"`
		LLMConfig *shape `json:"llm_config"`
	}
	var c shape
	if err := json.Unmarshal(b, &c); err != nil {
		return Model{}, fmt.Errorf("%s: %v", p, err)
	}
	prefix := ""
	if c.Layers == 0 && c.Text != nil {
		c, prefix = *c.Text, "text_config."
	} else if c.Layers == 0 && c.LLMConfig != nil {
		c, prefix = *c.LLMConfig, "llm_config."
	}
	for _, kv := range []struct {
		key string
		v   int
	}{{"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim},
		{"hidden_size", c.Hidden}, {"kv_lora_rank", c.KVLora}, {"qk_rope_head_dim", c.Rope}, {"max_position_embeddings", c.MaxPos}} {
		if kv.v < 0 {
			return Model{}, fmt.Errorf("%s: %s%s = %d: negative; not a model's shape", p, prefix, kv.key, kv.v)
		}
	}
	m := Model{Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, MaxLen: c.MaxPos, DType: cmp(c.DType, c.DTypeNew), File: p}
	if m.KVHeads == 0 {
		m.KVHeads = c.Heads
	}
	if m.HeadDim == 0 && c.Heads > 0 {
		m.HeadDim = c.Hidden / c.Heads
	}
	if c.KVLora > 0 {
		mla, ok := add(int64(c.KVLora), int64(c.Rope))
		if !ok {
			return m, fmt.Errorf("%s: %skv_lora_rank %d + qk_rope_head_dim %d passes 2^63-1: not a model's shape", p, prefix, c.KVLora, c.Rope)
		}
		m.MLA = int(mla)
	}
	if m.Layers <= 0 || (m.MLA == 0 && (m.KVHeads <= 0 || m.HeadDim <= 0)) {
		return m, fmt.Errorf("%s: no num_hidden_layers, num_key_value_heads/num_attention_heads and head_dim/hidden_size: %w", p, ErrNoKVShape)
	}
	return m, nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// kvBytes is the size of one KV cache element for an engine's
// kv_cache_dtype ("auto" or empty: the model's dtype), as num ÷ den bytes
// (fp4 is ½), and the dtype's name.
func kvBytes(kvDType, modelDType string) (num, den int64, name string, err error) {
	d := strings.ToLower(kvDType)
	if d == "" || d == "auto" {
		d = strings.ToLower(modelDType)
	}
	switch {
	case d == "" || slices.Contains([]string{"bfloat16", "bf16", "float16", "fp16", "half"}, d):
		return 2, 1, cmp(d, "bf16"), nil
	case strings.HasPrefix(d, "fp8") || strings.HasPrefix(d, "float8") || d == "int8":
		return 1, 1, d, nil
	case strings.HasPrefix(d, "fp4") || strings.HasPrefix(d, "nvfp4"):
		return 1, 2, d, nil
	case d == "float32" || d == "fp32" || d == "float":
		return 4, 1, d, nil
	}
	return 0, 1, d, fmt.Errorf("kv_cache_dtype %q: unknown: write auto, bf16, fp16, fp8 or fp8_e4m3", kvDType)
}
