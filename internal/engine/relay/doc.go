// Package relay stages a lane's files onto several nodes while reading the
// NAS about once: each file has one reader node, which copies it from the
// NAS, and every other node receives it from a peer that has it or is
// receiving it (a chain, pipelined at fsynced-chunk granularity), over
// mutually authenticated TLS between the nodes' fleet addresses. Every
// receiver hashes a content-addressed blob as it arrives and checks it
// against its LFS sha256 name (other files against the NAS's sampled
// hash), whatever the verify mode, and falls back to the NAS when a peer
// is slow, gone or wrong, so no peer is a single point of corruption, nor
// a peer that read a torn source. The node that reads a file from the NAS
// makes sure the file did not change while it read it (its identity, as
// hubmirror's Stage does).
// It knows nothing of Temporal.
//
// It owns the transfer: the plan (who reads what from the NAS, who
// forwards to whom), the mTLS server and its registry of what a node can
// serve, and the receiver's copy loop. The files it writes follow
// internal/engine/hubmirror's contract, through hubmirror's exported API only
// (hubmirror.OpenTemp for temp files and resume, hubmirror.Files for what
// to relay, hubmirror.Stage for the ledger pass that adopts what it
// placed): hubmirror never imports relay. It must not import Temporal,
// activities or workflows.
package relay
