// Package activities holds sparklane's side effects as thin Temporal
// activities over the engines in internal/: node activities run on a node's
// own worker (queue node.NAME) against its disk and Docker socket, control
// activities run on the control worker (queue sparklane). Engines know
// nothing of Temporal; this package turns their progress into heartbeats and
// their permanent faults into non-retryable application errors.
package activities
