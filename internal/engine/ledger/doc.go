// Package ledger records what staging wrote: per file (or per block of rows)
// its size and a hash of sampled regions (head, tail and spread samples),
// optionally a full sha256. Both staging engines keep one in their dst, so a
// second pass verifies in O(files) and copies nothing. It never trusts the
// source's mtime or size: NFS lies about both. A file proved whole against
// its content-addressed name may carry a Seal of its local identity.
//
// It owns the ledger file's format (Ledger, Entry, Seal, written atomically
// beneath a node's root) and the sampling shape (SampleHash, SampledBytes)
// every engine and the relay compare with. It is shared by the engines, so
// it must not import any of them (internal/engine/hubmirror, internal/engine/relay,
// internal/engine/sparserows) nor anything of Temporal: only internal/engine/staging, for
// the directories it writes in.
package ledger
