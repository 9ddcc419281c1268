package hubcache

import (
	"path/filepath"
	"strings"
)

// The layout's fixed names: a model repo's directory prefix and the three
// directories inside it.
const (
	// RepoPrefix starts a model repo's directory name (models--ORG--NAME).
	RepoPrefix = "models--"
	// Blobs holds the files' content, named by their hash.
	Blobs = "blobs"
	// Refs holds one file per branch or tag, holding its commit.
	Refs = "refs"
	// Snapshots holds one tree of symlinks into Blobs per commit.
	Snapshots = "snapshots"
)

// RepoDir is a model repo's directory name in a cache: "org/name" becomes
// "models--org--name", as huggingface_hub's repo_folder_name writes it.
func RepoDir(repo string) string {
	return RepoPrefix + strings.ReplaceAll(repo, "/", "--")
}

// RepoPath is repo's directory under the cache root.
func RepoPath(root, repo string) string {
	return filepath.Join(root, RepoDir(repo))
}

// IsCommit reports whether s is a full git object id in lowercase hex (40
// digits): a commit, as the Hub names revisions and snapshots (a shorter
// or upper-case one is a name to resolve through refs/), or the git sha1
// a file kept in git (not LFS) is named by in blobs/.
func IsCommit(s string) bool { return isHex(s, 40) }

// IsSHA256 reports whether s is a full sha256 in lowercase hex (64
// digits): the name of an LFS blob, which a blob's bytes must hash to,
// and the hex of an image digest.
func IsSHA256(s string) bool { return isHex(s, 64) }

// IsBlobName reports whether name is one the hub gives blobs: a git blob
// sha1 (40 lowercase hex digits, files kept in git) or an LFS sha256 (64).
func IsBlobName(name string) bool { return isHex(name, 40) || isHex(name, 64) }

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
