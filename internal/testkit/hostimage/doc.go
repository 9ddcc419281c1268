// Package hostimage is the container tests' shared kit: the local Docker
// engine, and images built FROM scratch out of this machine's own programs
// and the shared libraries they load, so no registry is needed.
//
// A test kit: never imported by production code.
package hostimage
