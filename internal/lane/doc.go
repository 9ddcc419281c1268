// Package lane turns recipe files into runs. It owns, for the starter and
// the control worker alike:
//
//   - the plan: Render and RenderOn turn a recipe into what each node
//     runs (engine argv with the world's multi-node and data-parallel
//     flags, env with the world shape, the node's RDMA comm env and the HF
//     cache env, mounts with staged data bound in and their sources
//     checked against the node's roots, the container spec), and
//     RecipeHash says what a running lane runs;
//   - the file-to-wire step: Wire converts internal/config's recipe into
//     contract.Recipe, the form workflows carry and histories record;
//   - checks that need the fleet: Validate and ValidateSet (a recipe's
//     cluster, fit, roots, and a render), Check for `starter recipe check`.
//
// It reads no files of its own (config loads them). It must not import
// Temporal (go.temporal.io/...) or cobra, directly or through what it
// imports, nor workflows, activities or the CLI: they call it, in the
// starter and in the control worker alike (imports_test.go checks).
// Its inputs are internal/config's file types; its outputs are
// internal/contract's wire types.
package lane
