package hubmirror

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A temp file (".NAME.sparklane-tmp" beside NAME) is resumed from what
// survived its writer, whatever stopped it (a cancel, kill -9, a power
// cut), after a sampled check against the source:
//   - In the boot that wrote it (BootXattr names the kernel's boot_id), all
//     of it: a cancelled or killed writer leaves every byte it wrote with
//     the kernel, which writes it back as it does any other; only a crash
//     or power cut of the machine loses unflushed bytes, and that is a new
//     boot. Every writer marks its temp file at creation, and when it takes
//     one over (TakeOver), after flushing what it keeps.
//   - After a reboot, or without the mark, only the prefix its writer knew
//     durable, by its flush rule.
//
// Two writers share these files, with two flush rules:
//   - Stage (copy.go) fdatasyncs every flush interval (flushSize: a whole
//     number of chunks) while it copies the next, and begins interval k+1
//     only once interval k-1's flush has returned: every interval before
//     the last two is durable (durablePrefix).
//   - internal/relay's receiver fdatasyncs each chunk before it writes the
//     next: every chunk before the one holding the last byte is durable. It
//     says so with SyncedChunkXattr on the file, valued with its chunk
//     size. Without the mark (a filesystem without user xattrs, or a mark
//     lost with a crash before it reached the disk) its file is trusted as
//     Stage's are: less, never more.
//
// A writer that takes over a marked file under Stage's rule removes the
// mark, durably, before it writes (clearSyncedMark). A writer that takes
// over any temp file flushes it first (TakeOver), so what the file held is
// durable before its own rule's claims begin.

// BootXattr marks a temp file with the boot it was written in: the value
// of /proc/sys/kernel/random/boot_id when its writer created or took it
// over.
const BootXattr = "user.sparklane.boot"

// bootID is this boot's id, or "" when the kernel does not say (then no
// temp file is trusted past its flushed prefix).
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// markBoot marks f as written in this boot. Best effort: without the mark
// (no user xattrs here) a resume trusts the flushed prefix only.
func markBoot(f *os.File) {
	if id := bootID(); id != "" {
		_ = unix.Fsetxattr(int(f.Fd()), BootXattr, []byte(id), 0)
	}
}

// sameBoot says whether f was written in this boot.
func sameBoot(f *os.File) bool {
	id := bootID()
	if id == "" {
		return false
	}
	var buf [64]byte
	n, err := unix.Fgetxattr(int(f.Fd()), BootXattr, buf[:])
	return err == nil && string(buf[:n]) == id
}

// SyncedChunkXattr marks a temp file whose writer fdatasynced every chunk
// before it wrote the next; its value is that chunk size in decimal bytes.
const SyncedChunkXattr = "user.sparklane.synced-chunk"

// durablePrefix is how much of a temp file of the given size written under
// Stage's rule, flushed every interval bytes, is durable: every interval
// before the last two (the one holding its last byte and the one before
// it, whose fdatasync may still have been running).
func durablePrefix(size, interval int64) int64 {
	if size <= 0 {
		return 0
	}
	return max(0, ((size-1)/interval-1)*interval)
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
// source: all of them when f was written in this boot; else up to the
// chunk holding the last byte when a receiver marked it, else durablePrefix
// in Stage's flush intervals.
func trustedPrefix(f *os.File, size int64) int64 {
	if size <= 0 {
		return 0
	}
	if sameBoot(f) {
		return size
	}
	if c := syncedChunk(f); c > 0 {
		return (size - 1) / c * c
	}
	return durablePrefix(size, flushSize())
}

// takeOver readies the temp file f, resumed at its first size bytes, for
// this writer: it flushes what f holds (what a resume kept in this boot may
// not have reached the disk, and the new writer's flush rule counts from a
// durable start) and marks f as written in this boot.
func takeOver(f *os.File) error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("fdatasync %s: %w", f.Name(), err)
	}
	markBoot(f)
	return nil
}

// dropMarks removes the temp file's marks from f before it is renamed into
// place (best effort; the caller's fsync makes it durable).
func dropMarks(f *os.File) {
	_ = unix.Fremovexattr(int(f.Fd()), SyncedChunkXattr)
	_ = unix.Fremovexattr(int(f.Fd()), BootXattr)
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

// MarkBoot marks a temp file f its writer just created as written in this
// boot (BootXattr; best effort).
func MarkBoot(f *os.File) { markBoot(f) }

// TakeOver flushes the resumed temp file f and marks it as written in this
// boot, before its new writer writes on.
func TakeOver(f *os.File) error { return takeOver(f) }

// DropMarks removes a temp file's marks (SyncedChunkXattr, BootXattr)
// before it is renamed into place.
func DropMarks(f *os.File) { dropMarks(f) }
