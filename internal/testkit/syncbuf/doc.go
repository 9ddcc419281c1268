// Package syncbuf is a bytes.Buffer that a test can read while the code
// under test writes to it from other goroutines (a log, a process's
// output).
//
// Test kit (a locked buffer for tests): production code must not import it.
package syncbuf
