// Package buildinfo is the version and commit every sparklane program
// reports (starter version, worker version, the fleet's build check). It
// imports nothing of the project: the starter, a client only, reads it
// without linking the workers.
package buildinfo
