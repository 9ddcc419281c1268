package memfit

import (
	"fmt"
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
	// model's max_position_embeddings (vLLM), or no KV floor (others).
	MaxLen  int    `json:"max_len,omitempty"`
	KVDType string `json:"kv_cache_dtype,omitempty"`
}

// EngineFlags reads the memory flags of argv (a rank's rendered command);
// tp and pp are the lane's world shape, which flags in argv override.
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
		var err error
		switch k {
		case "--gpu-memory-utilization", "--mem-fraction-static":
			e.Utilization, err = strconv.ParseFloat(v, 64)
			e.UtilizationSet = true
			if err == nil && (e.Utilization <= 0 || e.Utilization > 1) {
				err = fmt.Errorf("not in (0, 1]")
			}
		case "--max-model-len", "--context-length":
			e.MaxLen, err = parseLen(v)
		case "--kv-cache-dtype":
			e.KVDType = v
		case "-tp", "--tensor-parallel-size", "--tp-size", "--tp":
			e.TP, err = strconv.Atoi(v)
		case "-pp", "--pipeline-parallel-size", "--pp-size", "--pp":
			e.PP, err = strconv.Atoi(v)
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
	e.TP, e.PP = max(e.TP, 1), max(e.PP, 1)
	return e, nil
}

// parseLen reads vLLM's max_model_len forms: 32768, 32k, 1m.
func parseLen(s string) (int, error) {
	mult := 1
	switch l := strings.ToLower(s); {
	case strings.HasSuffix(l, "k"):
		mult, s = 1024, s[:len(s)-1]
	case strings.HasSuffix(l, "m"):
		mult, s = 1024*1024, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	return n * mult, err
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
// no KV floor is counted, and KVWhy says so).
func Compute(lane string, w Weights, m *Model, e Engine, nodes []Node) (*Estimate, error) {
	est := &Estimate{Lane: lane, Weights: w, Model: m, Engine: e}
	ranks := int64(e.TP * e.PP)
	est.WeightsPerNode = (w.Bytes + ranks - 1) / ranks
	switch {
	case m == nil:
		est.KVWhy = "KV cache not counted (no config.json beside the weights giving layers, KV heads and head dim)"
	case e.MaxLen == 0 && e.Runtime != "vllm":
		est.KVWhy = "KV cache not counted (" + e.Runtime + " sizes it to the memory left; set context_length to count one full sequence)"
	default:
		tokens, why := e.MaxLen, "max_model_len"
		if tokens == 0 {
			tokens, why = m.MaxLen, "max_position_embeddings of config.json (no max_model_len)"
		}
		b, dt, err := kvBytes(e.KVDType, m.DType)
		if err != nil {
			return nil, err
		}
		layers := (m.Layers + e.PP - 1) / e.PP
		if m.MLA > 0 {
			est.KVPerNode = int64(float64(tokens) * float64(layers) * float64(m.MLA) * b)
			est.KVWhy = fmt.Sprintf("KV cache %d tokens (%s) × %d layers ÷ pp %d × %d latent width (MLA) × %g bytes (%s) = %s", tokens, why, m.Layers, e.PP, m.MLA, b, dt, GB(est.KVPerNode))
		} else {
			heads := max((m.KVHeads+e.TP-1)/e.TP, 1)
			est.KVPerNode = int64(2 * float64(tokens) * float64(layers) * float64(heads) * float64(m.HeadDim) * b)
			est.KVWhy = fmt.Sprintf("KV cache 2 (K,V) × %d tokens (%s) × %d layers ÷ pp %d × %d kv heads ÷ tp %d × %d head dim × %g bytes (%s) = %s", tokens, why, m.Layers, e.PP, m.KVHeads, e.TP, m.HeadDim, b, dt, GB(est.KVPerNode))
		}
	}
	for _, n := range nodes {
		f := NodeFit{Node: n, Budget: int64(e.Utilization * float64(n.Memory)), Need: est.WeightsPerNode + est.KVPerNode}
		f.Fits = f.Need <= f.Budget
		est.Nodes = append(est.Nodes, f)
	}
	return est, nil
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
