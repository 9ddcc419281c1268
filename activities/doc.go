// Package activities holds sparklane's side effects as thin Temporal
// activities over the engines in internal/engine: node activities run on a
// node's own worker (queue node.NAME) against its disk and Docker socket,
// control activities run on the control worker (queue sparklane). Engines
// know nothing of Temporal; this package turns their progress into
// heartbeats, their permanent faults into non-retryable application
// errors, and their result types into internal/contract's (convert.go:
// every value that leaves an activity is a contract type).
//
// It owns no wire type (internal/contract does) and must not import
// workflows, the workers or the CLI; fault points for tests are the
// injected Seams, never an environment variable.
package activities
