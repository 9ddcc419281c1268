// Command worker runs sparklane's Temporal workers:
//
//	worker control            workflows + control activities (queue sparklane)
//	worker node --node NAME   node-local activities (queue node.NAME), on that node
//	worker dev                embedded server + web UI + control worker + every local node's worker
//
// It loads the config, dials one client and runs until SIGINT/SIGTERM. The
// command line follows the starter's conventions (cobra: --help on every
// mode exits 0, errors are one line prefixed "worker:").
//
// A thin main over internal/workers (workers.Execute holds the command
// tree), with no test seams; it links the embedded server through
// internal/workers/embedded. The test worker
// (internal/testkit/testworker/cmd/testworker) is the same command line
// with the fault points the process-level tests need.
package main
