// Package disk treats a node's staging roots as a managed resource: it lists
// every staged block of every lane (bytes on disk, when a serve last used
// it, when it was last verified), records "last served" when a serve mounts
// a block, and prunes whole blocks — least recently served first, never a
// block of a running lane — beneath the node's roots only. Packed shards
// cost tens of GiB per node and mirrors hundreds, so which lanes to drop
// to make room must be a listed, reasoned choice, not an rm -rf by hand.
// It knows nothing of Temporal: the node activities call it.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package disk
