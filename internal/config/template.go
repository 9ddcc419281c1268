package config

import (
	"encoding/json"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/strictdecode"
)

// The command template language of recipe files: {key} placeholders in
// command, image, env, mounts and pre_exec, filled from [defaults], -o
// overrides and built-ins. Loading and checking a recipe reads the
// templates here; internal/lane expands them with the same rules.

// FixedKeys are per-node facts the renderer sets; neither [defaults] nor
// -o may change them.
var FixedKeys = []string{"lane", "node", "node_rank", "nnodes", "head_addr", "node_addr", "hf_cache_dir"}

// BuiltinKeys have a value from the renderer unless [defaults] or -o set
// one.
var BuiltinKeys = []string{"model", "image", "port", "dist_port", "master_port", "tensor_parallel", "expert_parallel", "model_path"}

// Placeholder matches one {key} of a template; group 1 is the key. It is
// contract.Placeholder, which the shell renderer (contract.RenderShell)
// reads hooks with: one pattern for every template.
var Placeholder = contract.Placeholder

// ValueString is the text a [defaults] value stands for in a template: a
// scalar as written (8000, true, 0.5), anything else as JSON.
func ValueString(v any) string {
	if s, ok := strictdecode.ScalarString(v); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}
