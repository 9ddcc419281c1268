// Package staging holds what the staging engines (hubmirror,
// sparserows, and the relay's receiver) share: the result and progress
// shapes reported to activities and the CLI, the preflight checks every
// write goes through, and the Pacer every write asks beside a serving
// lane (a rate, a MemAvailable floor).
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package staging
