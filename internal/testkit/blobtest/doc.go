// Package blobtest makes the blobs the staging-engine tests copy: bytes
// deterministic per seed, their sha256, and a torn blob's other version
// (the same size and sampled hash, another sha256) written over the
// source in place, as a writer on the NAS would.
//
// Test kit: production code must not import it; of sparklane it imports
// only internal/engine/ledger (whose sampled regions it steers clear of).
package blobtest
