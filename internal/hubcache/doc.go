// Package hubcache owns the names of the Hugging Face hub cache layout, so
// every package that reads or writes a cache (the fetcher, the mirror, the
// resolver's memory fit, engine-sim, the demo's NAS, the benchmarks and
// test kits) agrees on them:
//
//	models--ORG--NAME/          RepoDir("ORG/NAME")
//	  blobs/SHA256 or SHA1      LFS files by sha256, others by git blob sha1
//	  refs/REF                  a branch or tag name → its commit
//	  snapshots/COMMIT/PATH     symlinks into ../../blobs
//
// It also holds the two hex-name rules of that layout (IsCommit, IsSHA256).
// It is a leaf: it imports nothing of the project and does no I/O.
package hubcache
