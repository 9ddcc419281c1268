// Package embedded links the embedded Temporal server (internal/devserver)
// into a program: importing it for its side effect lets workers.Connect
// and workers.RunDev start the server in-process. The control service
// (worker dev, which `starter control start` runs) and the end-to-end
// tests import it; the starter, only a client, does not.
//
// It must be imported only by programs that host the control service:
// the server and its UI are most of a binary's packages.
package embedded
