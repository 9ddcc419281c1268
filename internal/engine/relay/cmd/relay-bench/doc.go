// Command relay-bench is scripts/bench-relay.sh: it stages one hub-mirror
// lane on the network-namespace test fleet (internal/testkit/testfleet) side
// by
// side — on one node, on N nodes each reading the NAS, and on N nodes
// through the relay — with the NAS served from its own host (sshfs over its
// sshd, host key checked) behind a rate-limited link (tc tbf on the NAS
// host's interface), then kills a receiving node mid-relay and restarts it.
// It prints the NAS bytes each way (the engine's counters, and the NAS
// host's own sftp-server processes' read counters from /proc/PID/io), the
// wall times and their ratios, and the bytes re-copied after the kill.
//
// `relay-bench node ...` is one node's worker for a pass, started on the
// node by the orchestrator.
//
// A benchmark main: it runs the relay on the test fleet, without Temporal.
package main
