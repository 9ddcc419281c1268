// Package lane turns recipe files into runs. It owns, for the starter and
// the control worker alike:
//
//   - resolution: Resolve finds a lane by name or alias in a loaded recipe
//     set (a broken recipe is named with its error), picks its cluster
//     (--cluster, the recipe's own, a fallback, default_cluster) and
//     applies -o overrides;
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
//
// Which process renders the plan that runs. Both the starter and the
// control worker render, through Resolve, from the recipes_dir of the same
// fleet config:
//
//   - A run the operator starts (cutover, up, serve, stage, bench) is
//     rendered by the starter, and that plan is the one that runs: the
//     starter shows it (--dry-run, recipe render), puts the recipe and the
//     plan in the workflow's input, and the workflow executes exactly what
//     its history recorded. A recipe edited after the run started changes
//     nothing in it, and a replay reads the same plan.
//   - The control worker renders (activities.ResolveLane) only what a
//     workflow names by lane with no plan in its input: the lanes a
//     cutover may roll back to, and the lanes a Verify schedule checks.
//     No operator is there to render them, and they must be rendered from
//     the recipes as they are when the run needs them.
package lane
