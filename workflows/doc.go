// Package workflows holds sparklane's deterministic orchestration: the fleet
// probe, staging, verify, serve, stop, bench and the cutover that strings
// them together. No I/O, no wall clock, no map iteration order, no go
// statements: every side effect is an activity in package activities, and
// node-local activities run on the node's own task queue.
package workflows
