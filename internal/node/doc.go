// Package node reaches GPU nodes: an SSH dialer that always checks host keys
// against a known_hosts file (and says exactly what to do when a check fails),
// a small remote-command runner, and a Docker client that is either the local
// socket or the node's socket reached through SSH. It knows nothing of
// Temporal.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package node
