// Package contract holds the types that travel in workflow and activity
// inputs and results: the recipe as a run carries it (Recipe and the
// blocks it holds), the plan rendered from it (LanePlan, NodePlan,
// ContainerSpec, RowsFrom, RelayPlan) and Duration. Temporal records
// them in every history as JSON, so they are wire types:
//
//   - a field's JSON name, type or meaning is part of committed histories
//     (workflows/testdata/histories, replayed by workflows/replay_test.go).
//     Adding an optional field is safe; renaming, removing or changing one
//     is a versioned change (workflows/versions.go), with histories
//     recorded before it still decoding;
//   - they carry json tags only. The files operators write are decoded
//     into internal/config's own types (mapstructure tags, file-format
//     rules) and turned into these by internal/lane, so a change to the
//     file format never changes a history by accident;
//   - the package imports nothing of the project: workflows, activities,
//     the engines and the CLI all depend on it, and it must not drag any of
//     them (or viper, or Temporal) along.
//
// Methods here are pure helpers of the data (where an export lands on a
// node, the endpoint a model type is probed on, a container shape as
// docker run flags), so every process that reads a plan reads it alike.
package contract
