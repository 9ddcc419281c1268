// Package itest holds sparklane's integration tests: a real Temporal server
// in-process (the embedded one the product uses), real workers, real files,
// real Docker containers of engine-sim and the real CLI. They live in one
// package because each package that links the server costs seconds to build
// and start.
//
// Test-only: production code must not import it.
package itest
