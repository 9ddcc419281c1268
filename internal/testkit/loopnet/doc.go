// Package loopnet gives tests real TCP on 127.0.0.1: a listener closed when
// the test ends, an accept loop that hands each connection to a handler, and
// an address on which nothing listens.
//
// Test kit (loopback TCP servers for tests): production code must not import
// it.
package loopnet
