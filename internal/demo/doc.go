// Package demo builds `starter demo`'s world from nothing: a synthetic NAS
// hub (a model of safetensors shards in the Hugging Face hub layout, and
// engram tables for sparse-rows), a fleet of local nodes each with its own
// fs_root, and two sim lanes. It never needs a GPU or a registry.
//
// It must not import go.temporal.io, activities or workflows: the CLI runs
// the demo's lanes through the control service.
package demo
