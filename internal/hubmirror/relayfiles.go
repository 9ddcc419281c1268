package hubmirror

import (
	"context"
	"io/fs"
	"sort"
)

// File is one regular file a Stage of a Spec would bring onto the node, as
// the relay (internal/relay) plans it: every node of a lane lists the same
// NAS and so computes the same list, which lets each node derive the same
// relay plan without it travelling through workflow history.
type File struct {
	// Rel is the mirror-relative path (the ledger key).
	Rel string
	// Src is the NAS file (links resolved syntactically, checked inside
	// src and the shared roots).
	Src string
	// Size is the source's size when listed.
	Size int64
	// Mode is the permission bits the staged file gets.
	Mode fs.FileMode
	// WantSHA is the blob's LFS sha256 name, or empty.
	WantSHA string
}

// Files validates in and lists, read-only, the regular files Stage would
// bring into the mirror, sorted by Rel, with the mirror directory
// (Dst/hub) they land in. Nothing is written.
func Files(ctx context.Context, in Spec) (mirror string, files []File, err error) {
	s, err := validate(in)
	if err != nil {
		return "", nil, err
	}
	p, err := buildPlan(ctx, s, nil)
	if err != nil {
		return "", nil, err
	}
	files = make([]File, 0, len(p.Files))
	for _, it := range p.Files {
		files = append(files, File{Rel: it.Rel, Src: it.Src, Size: it.Size, Mode: it.Mode, WantSHA: it.WantSHA})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Rel < files[j].Rel })
	return s.mirror, files, nil
}

// ChunkSize is the grain of Stage's copy: its flush interval is a whole
// number of chunks. A receiver's chunk (OpenTemp) divides it, so either
// writer resumes the other's temp file on its own chunk grid.
func ChunkSize() int64 { return chunkSize }

// SetChunkSize makes Stage copy n bytes at a time (its flush interval
// stays the same number of chunks) and returns a func that restores the
// size before it. It is for tests, of this package and of those sharing
// Stage's temp files (internal/relay), which copy megabytes, not
// gigabytes; no Stage may be running when it is called.
func SetChunkSize(n int64) (restore func()) {
	old := chunkSize
	chunkSize = n
	return func() { chunkSize = old }
}

// FlushSize is how many bytes Stage copies between fdatasyncs.
func FlushSize() int64 { return flushSize() }

// SetFlushChunks makes Stage fdatasync every k chunks and returns a func
// that restores the count before it. For tests, and hubmirror-bench's
// -flush-mib, which measures the flush cadence; no Stage may be running
// when it is called.
func SetFlushChunks(k int64) (restore func()) {
	old := flushChunks
	flushChunks = k
	return func() { flushChunks = old }
}

// SetWriteBehind turns Stage's write-behind (each copied chunk handed to
// writeback at once) on or off and returns a func that restores it. For
// tests, and hubmirror-bench's -write-behind, which measures it; no Stage
// may be running when it is called.
func SetWriteBehind(on bool) (restore func()) {
	old := writeBehind
	writeBehind = on
	return func() { writeBehind = old }
}

// SetDropBehind turns Stage's drop-behind (each chunk dropped from the
// page cache once written back) on or off and returns a func that
// restores it. For tests, and hubmirror-bench's -drop-behind, which
// measures it; no Stage may be running when it is called.
func SetDropBehind(on bool) (restore func()) {
	old := dropBehind
	dropBehind = on
	return func() { dropBehind = old }
}

// SmallMax is the size up to which Stage reads a file whole (and samples
// it whole): relaying such a file saves no NAS read.
const SmallMax = smallMax
