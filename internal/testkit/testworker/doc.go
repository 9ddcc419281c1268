// Package testworker holds the fault points the integration tests inject
// into workers (activities.Seams), and the test worker program that arms
// them from its environment (cmd/testworker: workers.Execute with these
// seams). Production workers have no such variables: only this test
// kit's program reads them. In-process workers get the same seams through
// workers.Deps or workers.ConnectOptions.
//
// A kill -9 test never has a worker kill itself: the fetch fault point
// writes a marker file with the byte count it reached and blocks the
// download, and the test, which waits for the marker, sends SIGKILL to the
// worker's process.
//
// A test kit: production code never imports it.
package testworker
