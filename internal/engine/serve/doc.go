// Package serve runs a lane's rank containers on one node's Docker engine:
// make sure the image is there, start each rank under a deterministic name
// and labels (looking before creating, so a retry is a no-op), stop a lane
// and then look again to prove nothing is left, and report each rank's
// state and last log lines. It knows nothing of Temporal; activities wrap it.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package serve
