// Package staging holds what the two staging engines (hubmirror,
// sparserows) share: the result and progress shapes reported to activities
// and the CLI, and the preflight checks every write goes through.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package staging
