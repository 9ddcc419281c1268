// Command starter is sparklane's operator CLI: it starts workflows, follows
// them and prints results. See `starter --help`. It is only a client of the
// control service: killing it at any moment loses nothing.
//
// A thin main: it loads nothing itself and calls internal/cli; it must not
// link the Temporal server (a test checks this).
package main
