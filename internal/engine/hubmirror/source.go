package hubmirror

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/fault"
)

// Sources that change while they are copied. A NAS file rewritten in place
// while a node copies it leaves a copy that is neither its old bytes nor
// its new ones, and sampling cannot be relied on to tell (the rewrite may
// fall between the samples). So every copy reads its source through one
// descriptor and compares the source's identity when it was opened
// (inode, size, mtime and ctime, from fstat of that descriptor) with its
// identity once the last byte was read: a write, truncate or chmod in
// between moves ctime. A copy whose source moved is discarded and made
// again from a new look at the source, at most SourceAttempts times, then
// refused (fault.SourceChanged). A content-addressed blob is also hashed
// as it streams and checked against its name before it is renamed into
// place (copy.go), which does not depend on what the NAS reports.

// SourceAttempts is how many copies of a source that changes while it is
// read are made before it is refused: one writer finishing its rewrite
// costs a second copy; a source rewritten again and again is refused.
const SourceAttempts = 3

// Source is a NAS file open for one copy, with its identity at the open.
type Source struct {
	*os.File
	// Path is the file's path, for messages.
	Path string
	at   unix.Stat_t
}

// OpenSource opens path for one copy and records its identity.
func OpenSource(path string) (*Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	s := &Source{File: f, Path: path}
	if err := unix.Fstat(int(f.Fd()), &s.at); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	return s, nil
}

// Size is the source's size when it was opened.
func (s *Source) Size() int64 { return s.at.Size }

// Unchanged returns nil when the source's identity is the one it had when
// it was opened, else a *ChangedError saying what moved. It is called
// once the copy's last byte was read.
func (s *Source) Unchanged() error {
	return unchangedSince(int(s.Fd()), s.Path, s.at)
}

// unchangedSince compares the identity of the open descriptor fd of path
// with before.
func unchangedSince(fd int, path string, before unix.Stat_t) error {
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if why := identityMoved(before, now); why != "" {
		return &ChangedError{Path: path, Why: why}
	}
	return nil
}

// identityMoved says what differs between two fstats of one file, or ""
// when nothing that a write moves did.
func identityMoved(a, b unix.Stat_t) string {
	switch {
	case a.Dev != b.Dev || a.Ino != b.Ino:
		return fmt.Sprintf("inode %d:%d is now %d:%d", a.Dev, a.Ino, b.Dev, b.Ino)
	case a.Size != b.Size:
		return fmt.Sprintf("size %d is now %d", a.Size, b.Size)
	case a.Mtim != b.Mtim:
		return fmt.Sprintf("mtime %s is now %s", stamp(a.Mtim), stamp(b.Mtim))
	case a.Ctim != b.Ctim:
		return fmt.Sprintf("ctime %s is now %s", stamp(a.Ctim), stamp(b.Ctim))
	}
	return ""
}

func stamp(t unix.Timespec) string {
	return time.Unix(t.Unix()).UTC().Format(time.RFC3339Nano)
}

// ChangedError is a copy whose source changed while it was read (or whose
// kept prefix, from an earlier attempt, no longer hashes with the rest to
// the blob's name): the copy is discarded and made again.
type ChangedError struct {
	// Path is the source file.
	Path string
	// Why says what moved.
	Why string
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("source file %s changed while copying (%s)", e.Path, e.Why)
}

// RefuseChanged is the permanent fault for a file whose source changed
// in each of attempts copies (last is the last attempt's): dst is the
// node path nothing was staged at.
func RefuseChanged(dst string, last *ChangedError, attempts int) error {
	return fault.Permanent(fault.SourceChanged, fmt.Errorf("%s: source file %s changed while copying, in each of %d attempts (last: %s): is something writing to the NAS? Nothing was staged there; rerun once the NAS copy is stable", dst, last.Path, attempts, last.Why))
}

// RefuseCorrupt is the permanent fault (fault.ContentMismatch) for a copy
// of the NAS blob src whose bytes, hashed as they were written, hash to
// got instead of the blob's content-addressed name want: the NAS copy is
// corrupt, and nothing was staged at the node path dst.
func RefuseCorrupt(dst, src, want, got string) error {
	return fault.Permanent(fault.ContentMismatch, fmt.Errorf("%s: source blob %s is corrupt: its content's sha256 is %s, not its name %s; nothing was staged: re-download it on the NAS", dst, src, got, want))
}
