// Package hubfetch downloads Hugging Face Hub repos at a pinned revision
// into a hub cache dir (hf_cache_dir on the NAS), in exactly the layout
// huggingface_hub writes, so hf, transformers, vLLM and sparklane's
// hub-mirror read the result as their own:
//
//	models--ORG--NAME/
//	  blobs/<etag>                    sha256 for LFS files, git blob sha1 otherwise
//	  blobs/<etag>.incomplete         a partial download (resumed by the next call)
//	  blobs/<etag>.incomplete.parts   its range bookkeeping (large files only)
//	  snapshots/<commit>/<path>       relative symlink ../../blobs/<etag> (one more ../ per directory)
//	  refs/<revision>                 the commit, when the revision is a branch or tag
//
// It owns that download: listing the revision (GET /api/models/{repo}/
// revision/{rev}?blobs=true; from an endpoint whose listing carries no
// file metadata — it ignores or refuses the parameter, as mirrors and
// air-gapped proxies that implement only what `hf download` reads do —
// each file's size and etag come from a HEAD of its /resolve URL, read as
// huggingface_hub's get_hf_file_metadata reads them), skip globs
// (hub-mirror's semantics),
// the free-space and read-only checks before any write, parallel files
// and parallel ranges, verification while streaming (sha256 against
// X-Linked-Etag, git blob sha1 against ETag), drop-behind of written
// bytes, fsync before rename, resume from what is on disk, and the
// classification of failures with internal/fault.
//
// Choices a wrapper should know:
//   - A blob already under blobs/ with the announced size is trusted
//     without reading it: this engine (like huggingface_hub) only ever
//     renames a file there after its hash matched, so a re-hash would
//     re-read hundreds of GB from the NAS to catch only later tampering.
//     Request.VerifyExisting re-hashes (and replaces a bad one) for that.
//   - Resume: a file of at most one chunk continues with Range: bytes=N-
//     after the N bytes on disk (huggingface_hub's convention); a larger
//     one is split in chunks fetched by parallel ranges, each chunk's
//     written bytes counted in the .parts file as they land. Either way
//     the bytes kept are read back to rebuild the hash, and a kept prefix
//     that fails the hash (a crash can leave garbage) is fetched once more
//     from scratch before HubContentMismatch is reported.
//   - A failed file does not stop the others: what they download is kept
//     for the retry, and every failure is returned (errors.Join).
//
// One struct in, one struct out: Fetch(ctx, Request) (Result, error), with
// a Progress callback for heartbeats that also says why a request is being
// retried. A request that delivers nothing for Request.ReadIdle is
// aborted and retried from the bytes on disk, within the call; a partial
// file that got no byte (its first answer was refused: a wrong etag) is
// removed. All state is on disk, so a retry of
// the same Request resumes wherever the last attempt stopped; heartbeat
// details are for display only. EndpointFromEnv and TokenFromEnv read
// HF_ENDPOINT and the token as the Hub's tools do; the token only ever
// goes into the Authorization header (Secret redacts it everywhere else).
//
// It must not import Temporal (go.temporal.io/...), cobra/viper, or the
// packages that wrap it (activities, workflows, internal/cli,
// internal/config): the Temporal activity is a thin wrapper over Fetch.
// Of sparklane it imports only internal/fault, internal/contract (the
// public Hub's address, DefaultHubEndpoint) and internal/hubcache (the
// cache layout's names).
package hubfetch
