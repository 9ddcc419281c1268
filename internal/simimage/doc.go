// Package simimage builds the engine-sim Docker image from scratch through
// the Docker API: no registry is reachable on these machines, so the demo
// and the tests compile ./engine-sim statically and wrap it in a FROM
// scratch image tagged by the binary's content hash.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package simimage
