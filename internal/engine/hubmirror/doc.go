// Package hubmirror stages Hugging Face hub caches (models--org--name/ with
// blobs/, refs/ and snapshots/REV/ symlinks) from a NAS onto a node's local
// disk, so HF_HUB_CACHE=DST/hub serves offline at NVMe speed. It is
// reference-aware (only blobs a non-skipped snapshot entry uses are staged),
// resolves links syntactically (never realpath on the source side), writes
// atomically, keeps a sampled-hash ledger so a second pass costs O(files),
// resumes interrupted copies from heartbeat offsets and exports regular-file
// trees of hard links for runtimes that refuse symlinks.
//
// It owns the receiving side's file contract of a mirror: the temp file
// beside each destination and what an earlier writer's temp file is trusted
// for (TempFile, tempfile.go), the ledger and the seals. Anything else that
// writes into a mirror (internal/engine/relay's receiver) does it through that
// exported API (Files, OpenTemp, Stage with staging.Options.Checked) and
// never by file names or marks of its own. So hubmirror must not import
// internal/engine/relay (the dependency runs one way), nor anything of Temporal:
// the node activities wrap Stage and Verify.
package hubmirror
