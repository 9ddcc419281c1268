// Package contract is sparklane's wire layer: every type that travels in a
// workflow or activity input, result, signal, query or update, and the
// names runs are found by (workflow IDs, task queues, query, signal and
// update names). Temporal records these values in every history as JSON,
// and a control worker redeployed mid-run replays histories the old binary
// wrote, so:
//
//   - A CHANGE HERE IS A VERSIONED CHANGE. A field's JSON name, type or
//     meaning is part of committed histories (workflows/testdata/histories,
//     replayed by workflows/replay_test.go, and decoded field by field by
//     workflows/wire_test.go). Adding an optional field is safe; renaming,
//     removing or retyping one needs a gate in workflows/versions.go, with
//     the histories recorded before it still decoding.
//   - Types here own their fields: no engine type is embedded. The engines
//     (internal/engine/...) return their own types and activities convert
//     them at the boundary (activities/convert.go), so an engine's rename
//     never changes a history. They carry json tags only: the files
//     operators write are decoded into internal/config's types and turned
//     into these by internal/lane.
//   - The package imports nothing of the project (nor Temporal, nor
//     viper): workflows, activities, the engines and the CLI all depend on
//     it, and it must not drag any of them along.
//
// Files by family: plan.go and recipe.go (the recipe as a run carries it
// and the per-node plan rendered from it), ids.go (workflow IDs, queues,
// lease kinds), shell.go (the one owner of shell words: splitting a
// command, quoting a word, filling placeholders into shell text),
// progress.go (the steps every workflow answers its progress query with),
// node.go (fleet probe, node status, leases), stage.go
// (staging, verify), images.go and imageref.go (the lane's image, the one
// owner of "is this image on this node, and under which ID"), serve.go
// (hooks, ranks, probes, up and stop), keeper.go, control.go (cutover,
// lane resolution, bench), disk.go, power.go, fetch.go, duration.go.
//
// Methods here are pure helpers of the data (where an export lands on a
// node, the endpoint a model type is probed on, an image plan), so every
// process that reads a plan reads it alike.
package contract
