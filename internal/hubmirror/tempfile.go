package hubmirror

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A temp file (".NAME.sparklane-tmp" beside NAME) is resumed from a prefix
// that reached the disk before the writer stopped, whatever stopped it (a
// cancel, kill -9, a power cut). Two writers share these files, with two
// flush rules:
//   - Stage (copy.go) fdatasyncs each chunk while it copies the next, and
//     begins chunk k+1 only once chunk k-1's flush has returned: every
//     chunk before the last two is durable (durablePrefix).
//   - internal/relay's receiver fdatasyncs each chunk before it writes the
//     next: every chunk before the one holding the last byte is durable. It
//     says so with SyncedChunkXattr on the file, valued with its chunk
//     size. Without the mark (a filesystem without user xattrs, or a mark
//     lost with a crash before it reached the disk) its file is trusted as
//     Stage's are: less, never more.
//
// A writer that takes over a marked file under Stage's rule removes the
// mark, durably, before it writes (clearSyncedMark).

// SyncedChunkXattr marks a temp file whose writer fdatasynced every chunk
// before it wrote the next; its value is that chunk size in decimal bytes.
const SyncedChunkXattr = "user.sparklane.synced-chunk"

// durablePrefix is how much of a temp file of the given size written under
// Stage's rule is durable: every chunk before the last two (the one holding
// its last byte and the one before it, whose fdatasync may still have been
// running).
func durablePrefix(size, chunk int64) int64 {
	if size <= 0 {
		return 0
	}
	return max(0, ((size-1)/chunk-1)*chunk)
}

// syncedChunk is the chunk size a temp file's mark gives, or 0 without a
// (valid) mark.
func syncedChunk(f *os.File) int64 {
	var buf [24]byte
	n, err := unix.Fgetxattr(int(f.Fd()), SyncedChunkXattr, buf[:])
	if err != nil {
		return 0
	}
	c, err := strconv.ParseInt(string(buf[:n]), 10, 64)
	if err != nil || c <= 0 {
		return 0
	}
	return c
}

// trustedPrefix is how much of the open temp file f, of which the first
// size bytes count, a resume may keep after a sampled check against the
// source: up to the chunk holding the last byte when the file is marked,
// else durablePrefix in Stage's chunks.
func trustedPrefix(f *os.File, size int64) int64 {
	if size <= 0 {
		return 0
	}
	if c := syncedChunk(f); c > 0 {
		return (size - 1) / c * c
	}
	return durablePrefix(size, chunkSize)
}

// clearSyncedMark removes f's mark, if any, and fsyncs the removal, so the
// file can be written under Stage's rule.
func clearSyncedMark(f *os.File) error {
	if _, err := unix.Fgetxattr(int(f.Fd()), SyncedChunkXattr, nil); err != nil {
		return nil // no mark (or no xattrs here)
	}
	if err := unix.Fremovexattr(int(f.Fd()), SyncedChunkXattr); err != nil && !errors.Is(err, unix.ENODATA) {
		return fmt.Errorf("remove %s from %s: %w", SyncedChunkXattr, f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", f.Name(), err)
	}
	return nil
}

// TrustedPrefix is how much of the open temp file f, of which the first
// size bytes count, a resume may keep after a sampled check against the
// source, whoever wrote it (Stage, or a receiver that marked it).
func TrustedPrefix(f *os.File, size int64) int64 { return trustedPrefix(f, size) }

// MarkSyncedChunk marks f, a temp file its writer fdatasyncs chunk by chunk
// (chunk bytes each, every one before the next is written), so a resume
// trusts it up to the chunk holding its last byte. Best effort: without the
// mark the file is trusted as Stage's are, one chunk less.
func MarkSyncedChunk(f *os.File, chunk int64) {
	_ = unix.Fsetxattr(int(f.Fd()), SyncedChunkXattr, []byte(strconv.FormatInt(chunk, 10)), 0)
}

// SyncedChunk is the chunk size f's mark gives, or 0 when it has none.
func SyncedChunk(f *os.File) int64 { return syncedChunk(f) }

// ClearSyncedMark removes f's mark, durably, before it is written under
// other rules (a receiver with another chunk size).
func ClearSyncedMark(f *os.File) error { return clearSyncedMark(f) }
