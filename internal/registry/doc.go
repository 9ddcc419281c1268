// Package registry keeps sparkrun-style recipe registries: git clones
// under STATE_DIR/registries/NAME, each pinned to the commit its last add
// or update checked out. It runs the real git; it knows nothing of
// recipes (internal/config reads the clones).
//
// It must not import Temporal, activities, workflows or the engines: the
// starter links it.
package registry
