package memfit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SparkMemory is a DGX Spark's unified memory (128 GB, shared by CPU and
// GPU): what a node is taken to have when neither its config's
// gpu_memory nor a discovery says otherwise.
const SparkMemory int64 = 128_000_000_000

// DefaultUtilization is the share of a node's memory vLLM takes when the
// lane sets no gpu_memory_utilization (vLLM's default), and what SGLang is
// taken to take without --mem-fraction-static.
const DefaultUtilization = 0.9

// Engine is what the engine flags of a lane's rendered command say about
// memory.
type Engine struct {
	Runtime string `json:"runtime"`
	TP      int    `json:"tp"`
	PP      int    `json:"pp"`
	// Utilization is gpu_memory_utilization (vLLM) or mem_fraction_static
	// (SGLang); UtilizationSet says a flag gave it.
	Utilization    float64 `json:"utilization"`
	UtilizationSet bool    `json:"utilization_set"`
	// MaxLen is max_model_len (vLLM) or context_length (SGLang); 0: the
	// model's max_position_embeddings (vLLM), or no KV floor (others);
	// MaxLenAuto: vLLM's "auto", no KV floor. MaxLenFlag is the flag and
	// its value as written ("--max-model-len 32k"), for messages.
	MaxLen     int64  `json:"max_len,omitempty"`
	MaxLenFlag string `json:"max_len_flag,omitempty"`
	KVDType    string `json:"kv_cache_dtype,omitempty"`
	// tpFrom and ppFrom are the flags TP and PP came from, with their
	// values as written ("-tp 4"; empty: the lane's world shape), for an
	// overflow's error.
	tpFrom, ppFrom string
}

// EngineFlags reads the memory flags of argv (a rank's rendered command);
// tp and pp are the lane's world shape, which flags in argv override.
// Values are read as the engine reads them: --max-model-len by vLLM's
// rule (ParseMaxModelLen), --context-length and the parallel sizes as
// plain integers, and vLLM's --flag_name spelling of --flag-name too. A
// value the engine would refuse, or that is not a positive count, is an
// error naming the flag and the value.
func EngineFlags(runtime string, argv []string, tp, pp int) (Engine, error) {
	e := Engine{Runtime: runtime, TP: max(tp, 1), PP: max(pp, 1), Utilization: DefaultUtilization}
	if runtime != "vllm" && runtime != "sglang" {
		e.Utilization = 1
	}
	for i := 0; i < len(argv); i++ {
		k, v, inline := strings.Cut(argv[i], "=")
		if !inline {
			if i+1 >= len(argv) {
				break
			}
			v = argv[i+1]
		}
		if runtime == "vllm" && strings.HasPrefix(k, "--") {
			k = "--" + strings.ReplaceAll(k[2:], "_", "-") // vLLM reads --max_model_len as --max-model-len
		}
		var err error
		switch k {
		case "--gpu-memory-utilization", "--mem-fraction-static":
			e.Utilization, err = strconv.ParseFloat(strings.TrimSpace(v), 64)
			e.UtilizationSet = true
			if err == nil && !(e.Utilization > 0 && e.Utilization <= 1) {
				err = fmt.Errorf("not in (0, 1]")
			}
		case "--max-model-len":
			e.MaxLen, err = ParseMaxModelLen(v)
			e.MaxLenFlag = k + " " + v
		case "--context-length":
			e.MaxLen, err = positive(v, "SGLang reads --context-length as a plain integer: write 32768, not 32k")
			e.MaxLenFlag = k + " " + v
		case "--kv-cache-dtype":
			e.KVDType = v
		case "-tp", "--tensor-parallel-size", "--tp-size", "--tp":
			e.TP, err = parallelSize(v)
			e.tpFrom = k + " " + v
		case "-pp", "--pipeline-parallel-size", "--pp-size", "--pp":
			e.PP, err = parallelSize(v)
			e.ppFrom = k + " " + v
		default:
			continue
		}
		if err != nil {
			return e, fmt.Errorf("%s %s: %v", k, v, err)
		}
		if !inline {
			i++
		}
	}
	return e, nil
}

// positive reads a plain integer that must be at least 1; hint says what
// to write instead of a value that is not an integer.
func positive(v, hint string) (int64, error) {
	n, err := ParsePlainInt(v)
	if err != nil {
		return 0, fmt.Errorf("%v (%s)", err, hint)
	}
	if n < 1 {
		return 0, fmt.Errorf("%d: must be at least 1", n)
	}
	return n, nil
}

// parallelSize reads a tensor or pipeline parallel size.
func parallelSize(v string) (int, error) {
	n, err := positive(v, "a number of GPUs")
	return int(n), err
}

// Node is one node's memory and where the figure came from ("gpu_memory
// in the config", "discovered", "DGX Spark default").
type Node struct {
	Name   string `json:"node"`
	Memory int64  `json:"memory"`
	Source string `json:"source"`
}

// NodeFit is one node's side of an estimate.
type NodeFit struct {
	Node
	// Budget is Utilization × Memory; Need what the lane needs there.
	Budget int64 `json:"budget"`
	Need   int64 `json:"need"`
	Fits   bool  `json:"fits"`
}

// Estimate is a lane's memory estimate on its nodes.
type Estimate struct {
	Lane    string  `json:"lane"`
	Weights Weights `json:"weights"`
	Model   *Model  `json:"model,omitempty"`
	Engine  Engine  `json:"engine"`
	// WeightsPerNode is Weights.Bytes ÷ (tp × pp); KVPerNode the KV cache
	// one MaxLen-token sequence needs on a node; KVWhy says how.
	WeightsPerNode int64     `json:"weights_per_node"`
	KVPerNode      int64     `json:"kv_per_node"`
	KVWhy          string    `json:"kv_why"`
	Nodes          []NodeFit `json:"nodes"`
}

// Compute is the estimate of lane on nodes. m may be nil (no config.json:
// no KV cache floor is counted, and KVWhy says so). Every product and sum
// is checked: a value that takes one past 2^63-1 (tp × pp, the KV cache
// of a max_model_len or num_hidden_layers no model has) is an error
// naming it, never a wrapped, negative need.
func Compute(lane string, w Weights, m *Model, e Engine, nodes []Node) (*Estimate, error) {
	est := &Estimate{Lane: lane, Weights: w, Model: m, Engine: e}
	if e.TP < 1 || e.PP < 1 {
		return nil, fmt.Errorf("tensor parallel %d × pipeline parallel %d: each must be at least 1", e.TP, e.PP)
	}
	if w.Bytes < 0 {
		return nil, fmt.Errorf("weights of %d bytes: negative", w.Bytes)
	}
	ranks, err := product("tensor parallel × pipeline parallel",
		factor{int64(e.TP), cmp(e.tpFrom, fmt.Sprintf("tensor_parallel %d", e.TP))},
		factor{int64(e.PP), cmp(e.ppFrom, fmt.Sprintf("pipeline_parallel %d", e.PP))})
	if err != nil {
		return nil, err
	}
	est.WeightsPerNode = ceilDiv(w.Bytes, ranks)
	est.KVPerNode, est.KVWhy, err = kvCache(m, e)
	if err != nil {
		return nil, err
	}
	need, ok := add(est.WeightsPerNode, est.KVPerNode)
	if !ok {
		return nil, fmt.Errorf("weights %d + KV cache %d bytes per node passes 2^63-1", est.WeightsPerNode, est.KVPerNode)
	}
	for _, n := range nodes {
		f := NodeFit{Node: n, Budget: budget(e.Utilization, n.Memory), Need: need}
		f.Fits = f.Need <= f.Budget
		est.Nodes = append(est.Nodes, f)
	}
	return est, nil
}

// kvCache is the KV cache one sequence needs on a node, and how it was
// counted (or why it was not).
func kvCache(m *Model, e Engine) (int64, string, error) {
	switch {
	case m == nil:
		return 0, "KV cache not counted (no config.json beside the weights giving layers, KV heads and head dim)", nil
	case e.MaxLen == MaxLenAuto:
		return 0, "KV cache not counted (" + e.MaxLenFlag + ": vLLM fits the context to the memory left; set max_model_len to count one full sequence)", nil
	case e.MaxLen == 0 && e.Runtime != "vllm":
		return 0, "KV cache not counted (" + e.Runtime + " sizes it to the memory left; set context_length to count one full sequence)", nil
	}
	cfg := cmp(m.File, "config.json")
	tokens, why, tokensFrom := e.MaxLen, "max_model_len", e.MaxLenFlag
	if tokens == 0 {
		tokens, why = int64(m.MaxLen), "max_position_embeddings of config.json (no max_model_len)"
		tokensFrom = fmt.Sprintf("max_position_embeddings %d in %s", m.MaxLen, cfg)
	} else if e.MaxLenFlag != "" && !strings.HasSuffix(e.MaxLenFlag, " "+strconv.FormatInt(tokens, 10)) {
		why = e.MaxLenFlag // "--max-model-len 32k": say how 32000 was read
	}
	num, den, dt, err := kvBytes(e.KVDType, m.DType)
	if err != nil {
		return 0, "", err
	}
	b := float64(num) / float64(den)
	layers := ceilDiv(int64(m.Layers), int64(e.PP))
	layersFrom := fmt.Sprintf("num_hidden_layers %d (÷ pp %d) in %s", m.Layers, e.PP, cfg)
	what := "the KV cache of one " + strconv.FormatInt(tokens, 10) + "-token sequence"
	if m.MLA > 0 {
		p, err := product(what, factor{tokens, tokensFrom}, factor{layers, layersFrom},
			factor{int64(m.MLA), fmt.Sprintf("kv_lora_rank + qk_rope_head_dim %d in %s", m.MLA, cfg)}, factor{num, "bytes per element"})
		if err != nil {
			return 0, "", err
		}
		kv := ceilDiv(p, den)
		return kv, fmt.Sprintf("KV cache %d tokens (%s) × %d layers ÷ pp %d × %d latent width (MLA) × %g bytes (%s) = %s", tokens, why, m.Layers, e.PP, m.MLA, b, dt, GB(kv)), nil
	}
	heads := max(ceilDiv(int64(m.KVHeads), int64(e.TP)), 1)
	p, err := product(what, factor{2, "K and V"}, factor{tokens, tokensFrom}, factor{layers, layersFrom},
		factor{heads, fmt.Sprintf("num_key_value_heads %d (÷ tp %d) in %s", m.KVHeads, e.TP, cfg)},
		factor{int64(m.HeadDim), fmt.Sprintf("head_dim %d in %s", m.HeadDim, cfg)}, factor{num, "bytes per element"})
	if err != nil {
		return 0, "", err
	}
	kv := ceilDiv(p, den)
	return kv, fmt.Sprintf("KV cache 2 (K,V) × %d tokens (%s) × %d layers ÷ pp %d × %d kv heads ÷ tp %d × %d head dim × %g bytes (%s) = %s", tokens, why, m.Layers, e.PP, m.KVHeads, e.TP, m.HeadDim, b, dt, GB(kv)), nil
}

// budget is utilization × memory in bytes, held within int64 (a float
// past 2^63 converts to a negative int64).
func budget(utilization float64, memory int64) int64 {
	f := utilization * float64(max(memory, 0))
	switch {
	case !(f > 0):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(f)
}

// GB formats bytes in decimal gigabytes, as memory is sold (DGX Spark:
// 128 GB).
func GB(b int64) string { return fmt.Sprintf("%.1f GB", float64(b)/1e9) }

// Lines are the estimate's arithmetic, one line for the lane and one per
// node.
func (est *Estimate) Lines() []string {
	w, e := est.Weights, est.Engine
	out := []string{
		fmt.Sprintf("weights %s (%s params, %s, %d file(s) in %s) ÷ (tp %d × pp %d) = %s per node", GB(w.Bytes), params(w.Params), strings.Join(w.DTypes, "+"), w.Files, w.Dir, e.TP, e.PP, GB(est.WeightsPerNode)),
		est.KVWhy,
	}
	flag := "gpu_memory_utilization"
	if e.Runtime == "sglang" {
		flag = "mem_fraction_static"
	}
	if !e.UtilizationSet {
		flag += " default"
	}
	for _, n := range est.Nodes {
		verdict, op := "fits", "≤"
		if !n.Fits {
			verdict, op = "DOES NOT FIT", ">"
		}
		out = append(out, fmt.Sprintf("node %s: need %s + %s = %s %s %g (%s) × %s (%s) = %s: %s", n.Name, GB(est.WeightsPerNode), GB(est.KVPerNode), GB(n.Need), op, e.Utilization, flag, GB(n.Memory), n.Source, GB(n.Budget), verdict))
	}
	return out
}

// Err is nil when the lane fits on every node, else the refusal with the
// arithmetic and what to do.
func (est *Estimate) Err() error {
	var bad []string
	for _, n := range est.Nodes {
		if !n.Fits {
			bad = append(bad, n.Name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("lane %s does not fit in memory on %s:\n  %s\nraise tensor_parallel/pipeline_parallel, lower max_model_len or use a smaller quantization (-o key=value), set the node's gpu_memory if it is wrong, or pass --force to run it anyway",
		est.Lane, strings.Join(bad, ", "), strings.Join(est.Lines(), "\n  "))
}

func params(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return strconv.FormatInt(n, 10)
}
