package hubmirror

import (
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// A temp file (".NAME.sparklane-tmp" beside NAME) is resumed from what
// survived its writer, whatever stopped it (a cancel, kill -9, a power
// cut), after a sampled check against the source:
//   - In the boot that wrote it (BootXattr names the kernel's boot_id), all
//     of it: a cancelled or killed writer leaves every byte it wrote with
//     the kernel, which writes it back as it does any other; only a crash
//     or power cut of the machine loses unflushed bytes, and that is a new
//     boot. Every writer marks its temp file at creation, and when it takes
//     one over (takeOver), after flushing what it keeps.
//   - After a reboot, or without the mark, only the prefix its writer knew
//     durable, by its flush rule.
//
// Two writers share these files through TempFile (OpenTemp), with two
// flush rules:
//   - Stage (copy.go) fdatasyncs every flush interval (flushSize: a whole
//     number of chunks) while it copies the next, and begins interval k+1
//     only once interval k-1's flush has returned: every interval before
//     the last two is durable (durablePrefix).
//   - a receiver (internal/engine/relay's) fdatasyncs each chunk before it writes
//     the next: every chunk before the one holding the last byte is durable. It
//     says so with SyncedChunkXattr on the file, valued with its chunk
//     size. Without the mark (a filesystem without user xattrs, or a mark
//     lost with a crash before it reached the disk) its file is trusted as
//     Stage's are: less, never more.
//
// A writer that takes over a marked file under Stage's rule removes the
// mark, durably, before it writes (clearSyncedMark). A writer that takes
// over any temp file flushes it first (takeOver), so what the file held is
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

// MarkBoot marks f, a temp file its writer just created or took over, as
// written in this boot (BootXattr), so a resume in this boot keeps all of
// it. OpenTemp marks its files; it is exported for tests that stand in
// for such a writer. Best effort: without the mark (no user xattrs here)
// a resume trusts the flushed prefix only.
func MarkBoot(f *os.File) {
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
	MarkBoot(f)
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

// markSyncedChunk marks f, a temp file its writer fdatasyncs chunk by
// chunk (chunk bytes each, every one before the next is written), so a
// resume trusts it up to the chunk holding its last byte. Best effort:
// without the mark the file is trusted as Stage's are, one chunk less.
func markSyncedChunk(f *os.File, chunk int64) {
	_ = unix.Fsetxattr(int(f.Fd()), SyncedChunkXattr, []byte(strconv.FormatInt(chunk, 10)), 0)
}

// TempFile is one mirror file being written under its temp name
// (".NAME.sparklane-tmp" beside NAME), by Stage or by a receiver that
// fills mirrors on its behalf (internal/engine/relay). It carries the contract
// every such writer keeps, so that any of them resumes what another left:
// an earlier temp file is kept up to its trusted prefix after a sampled
// check against the source, its marks say how its writer flushed it, and
// Commit renames the checked file into place without them.
type TempFile struct {
	d       *staging.Dir
	name    string // the final name in d
	f       *os.File
	resumed int64 // the prefix kept from an earlier writer
	sampled int64 // source bytes read to check that prefix
	done    bool  // renamed into place
	// after is the file's identity under its final name right after
	// Commit renamed it (afterOK: it could be looked at).
	after   unix.Stat_t
	afterOK bool
}

// OpenTemp opens the temp file of name in d, size bytes long once
// written, for a receiver that fdatasyncs every chunk bytes before it
// writes the next (chunk > 0, dividing ChunkSize(), so a resume of
// Stage's temp file at a whole Stage chunk stays on the receiver's grid).
// A temp file an earlier writer left there (a killed or cancelled Stage
// or receiver) is kept up to its trusted prefix when that prefix's
// sampled hash matches src's (Resumed says how much; src is read for
// it), flushed, and marked as this writer's; else a new one is made. The
// caller writes from Resumed() on, then Commits or Discards it.
func OpenTemp(d *staging.Dir, name string, src io.ReaderAt, size, chunk int64) (*TempFile, error) {
	if chunk <= 0 {
		return nil, fmt.Errorf("temp file %s: chunk %d: a receiver flushes whole chunks", d.Join(tmpBase(name)), chunk)
	}
	return openTemp(d, name, src, size, 0, chunk)
}

// openTemp is OpenTemp for any writer: chunk 0 is Stage's rule (a flush
// every interval, trailing the copy), and known a prefix the writer's own
// progress (a heartbeat's flushed offset) vouches for, kept if the file
// holds it and it passes the same check.
func openTemp(d *staging.Dir, name string, src io.ReaderAt, size, known, chunk int64) (*TempFile, error) {
	t := &TempFile{d: d, name: name}
	if t.resume(src, size, known, chunk) {
		return t, nil
	}
	return t, t.create(chunk)
}

// resume takes over the temp file an earlier copy of this destination
// left, whoever wrote it and whether or not a heartbeat names it: its
// trusted prefix (trustedPrefix: all of it in the boot that wrote it;
// after a reboot up to what its writer's flush rule made durable) counts
// like a heartbeat offset, after a sampled check against src. A kill -9
// or a cancel then costs nothing, a power cut at most what the rule
// leaves unflushed per file in flight. It reports whether it did.
func (t *TempFile) resume(src io.ReaderAt, size, known, chunk int64) bool {
	tmp := tmpBase(t.name)
	if fi, err := t.d.Lstat(tmp); err != nil || !isReg(fi) || fi.Size <= 0 {
		return false
	}
	f, err := t.d.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	if keep := t.check(f, src, size, known); keep > 0 && f.Truncate(keep) == nil && adopt(f, chunk) == nil {
		t.f, t.resumed = f, keep
		return true
	}
	f.Close()
	return false
}

// check is how much of the open temp file f a resume keeps: its trusted
// prefix, or known when that is more and f holds it, once the prefix's
// sampled hash matches src's over the same bytes; 0 for nothing.
func (t *TempFile) check(f *os.File, src io.ReaderAt, size, known int64) int64 {
	fi, err := f.Stat()
	if err != nil || fi.Size() <= 0 {
		return 0
	}
	keep := max(known, trustedPrefix(f, min(fi.Size(), size)))
	if keep <= 0 || keep > size || fi.Size() < keep {
		return 0
	}
	a, errA := ledger.SampleRegion(f, 0, keep)
	b, errB := ledger.SampleRegion(src, 0, keep)
	t.sampled = ledger.SampledBytes(keep)
	if errA != nil || errB != nil || a != b {
		return 0
	}
	return keep
}

// adopt readies a resumed temp file f for its new writer's rule (chunk 0:
// Stage's): a receiver's mark no longer holds once Stage, whose flush
// trails its copy, writes on, nor once a receiver with another chunk does,
// so it is dropped first, durably; what f holds is flushed (takeOver);
// then a receiver marks it with its own chunk, all it kept being flushed
// now.
func adopt(f *os.File, chunk int64) error {
	if chunk == 0 || syncedChunk(f) != chunk {
		if err := clearSyncedMark(f); err != nil {
			return err
		}
	}
	if err := takeOver(f); err != nil {
		return err
	}
	if chunk > 0 {
		markSyncedChunk(f, chunk)
	}
	return nil
}

// create makes a new, empty temp file (replacing any) marked for its
// writer's rule and as written in this boot.
func (t *TempFile) create(chunk int64) error {
	dst := t.d.Join(t.name)
	f, err := t.d.OpenFile(tmpBase(t.name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return classifyWrite(dst, fmt.Errorf("create: %w", err))
	}
	if chunk > 0 {
		// Every chunk is fdatasynced before the next is written: say so,
		// so a resume after a reboot keeps all but the last.
		markSyncedChunk(f, chunk)
	} else if err := clearSyncedMark(f); err != nil {
		// A truncated receiver's temp file keeps its mark: drop it.
		f.Close()
		return classifyWrite(dst, err)
	}
	MarkBoot(f)
	t.f = f
	return nil
}

// File is the temp file, open for reading and writing; the TempFile
// closes it.
func (t *TempFile) File() *os.File { return t.f }

// Resumed is how many bytes of an earlier writer's temp file were kept:
// the caller writes from there on.
func (t *TempFile) Resumed() int64 { return t.resumed }

// Path is the temp file's path, for messages.
func (t *TempFile) Path() string { return t.d.Join(tmpBase(t.name)) }

// Reader opens another, read-only descriptor of the temp file, which
// still reads the file once Commit renamed it: a receiver serves what it
// has written to its peers through it while it writes on.
func (t *TempFile) Reader() (*os.File, error) {
	f, err := t.d.OpenFile(tmpBase(t.name), unix.O_RDONLY, 0)
	if err != nil {
		return nil, classifyWrite(t.d.Join(t.name), err)
	}
	return f, nil
}

// HashResumed feeds the kept prefix to h, so a whole-content hash taken
// while the rest is written covers the file: the resumed part is local.
func (t *TempFile) HashResumed(h hash.Hash) error {
	if t.resumed == 0 {
		return nil
	}
	if _, err := io.Copy(h, io.NewSectionReader(t.f, 0, t.resumed)); err != nil {
		return fmt.Errorf("re-read %s: %w", t.Path(), err)
	}
	return nil
}

// Commit renames the written and checked temp file into place with mode
// (0: 0644). The marks were the temp file's, not the staged file's: they
// are dropped, and the fsync before the rename makes that durable. A
// failure is classified (staging.ClassifyWrite) naming the destination.
func (t *TempFile) Commit(mode fs.FileMode) error {
	dst, tmp := t.d.Join(t.name), t.Path()
	dropMarks(t.f)
	if mode == 0 {
		mode = 0o644
	}
	if err := t.f.Chmod(mode); err != nil {
		return classifyWrite(dst, fmt.Errorf("chmod %s: %w", tmp, err))
	}
	if err := t.f.Sync(); err != nil {
		return classifyWrite(dst, fmt.Errorf("fsync %s: %w", tmp, err))
	}
	if err := t.f.Close(); err != nil {
		return classifyWrite(dst, fmt.Errorf("close %s: %w", tmp, err))
	}
	if err := t.d.Rename(tmpBase(t.name), t.name); err != nil {
		return classifyWrite(dst, err)
	}
	t.done = true
	fi, err := t.d.Lstat(t.name)
	t.after, t.afterOK = fi, err == nil
	return nil
}

// Committed is the file's identity under its final name right after
// Commit renamed it (the rename moved its ctime): a writer that proved
// the content it wrote (its hash is its name) seals the file with it
// once its ctime is old enough, if the file still has it then (seal.go).
// ok is false before Commit, or when the file could not be looked at.
func (t *TempFile) Committed() (fi unix.Stat_t, ok bool) {
	return t.after, t.afterOK
}

// Discard ends a temp file that was not committed: it is closed and, unless
// keep (a cancel or kill: what was written stays for a resume), removed.
// After Commit it does nothing, so it can be deferred.
func (t *TempFile) Discard(keep bool) {
	if t.done {
		return
	}
	t.f.Close()
	if !keep {
		t.d.Remove(tmpBase(t.name))
	}
}
