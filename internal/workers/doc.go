// Package workers wires sparklane's Temporal workers (control, node, dev)
// and the connection every command needs: an external cluster, an already
// running embedded server, or an embedded server started in-process with
// the local workers (only in programs that link it in: see Embedded). It
// holds the worker command line too (Execute), so the worker's main stays
// thin and the test worker (internal/testkit/testworker) is the same
// program with its fault points (Options.Seams) injected.
//
// It owns the worker processes' wiring: which workflows and activities
// each queue serves, the node worker's relay and rank watch, the metrics
// it serves. It is the one package that joins workflows, activities and
// the engines; the CLI must not import it (the starter is a client only).
package workers
