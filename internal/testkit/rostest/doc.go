// Package rostest is a test double of the MikroTik RouterOS API: a small TCP
// server on 127.0.0.1 that speaks the real sentence encoding, checks the
// login (plain, or the pre-6.43 MD5 challenge) and answers the few commands
// power sends. There is no MikroTik here, so this double stands in for one.
//
// Test kit (a test double of RouterOS): production code must not import it.
package rostest
