// Package simtest runs engine-sim in-process for tests of the packages that
// talk to an engine (probe, bench): it writes a small, valid model tree and
// starts sim.Run on free loopback ports (or on a PipeNet), stopping it in
// t.Cleanup.
//
// Test kit (a test double of loopback TCP): production code must not import
// it.
package simtest
