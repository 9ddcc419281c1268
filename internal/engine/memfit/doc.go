// Package memfit estimates whether a lane fits in its nodes' memory before
// anything is staged: the weights its safetensors headers declare (read
// from the NAS, headers only), split over tensor × pipeline parallel ranks,
// plus the KV cache one max-length sequence needs, against the share of
// each node's memory the engine flags let the engine take.
//
// It is an engine: it must not import go.temporal.io, activities,
// workflows, internal/cli, internal/workers or internal/config (the
// starter and internal/lane feed it plain values).
package memfit
