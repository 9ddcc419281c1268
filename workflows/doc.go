// Package workflows holds sparklane's deterministic orchestration: the
// fleet probe, staging, verify, serve, stop, bench, the keeper and the
// cutover that strings them together. No I/O, no wall clock, no map
// iteration order, no go statements: every side effect is an activity in
// package activities, and node-local activities run on the node's own
// task queue. Each long workflow is a struct whose methods are its named
// steps; every change to a workflow's command sequence is gated by
// workflow.GetVersion (versions.go) and proven by the replay corpus.
//
// Its inputs, results and names are internal/contract's. It imports
// activities only to name their methods (typed nil pointers), the
// contract and fault; it must not import an engine, the workers or the
// CLI.
package workflows
