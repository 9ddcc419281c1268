package hubmirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/ledger"
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, 4<<20); return &b }}

// copy writes it to a temp name beside dst in chunks, fdatasyncing every
// flush interval (progress offset after each), continuing a resumed temp
// file after checking the sampled hash of its kept part against the
// source, then checks the result and renames it into place.
func (st *stager) copy(ctx context.Context, it *fileItem, src *os.File, size int64, srcSample, dst string) (ledger.Entry, error) {
	d, name, err := st.dc.Parent(dst, true)
	if err != nil {
		return ledger.Entry{}, classifyWrite(dst, err)
	}
	tmp := tmpBase(name)
	var out *os.File
	var off int64
	want, have := st.resume[it.Rel]
	// Whichever run finds it (a retried attempt, or a new run after a
	// cancel, with or without heartbeat details), a temp file beside dst is
	// this destination's earlier copy, written by this engine or by the
	// relay's receiver: its trusted prefix (trustedPrefix: all of it in the
	// boot that wrote it; after a reboot every flush interval before the
	// last two of this engine's, whose flush trails the copy) counts like a
	// heartbeat offset, after the same sampled check against the source. A
	// kill -9 or a cancel costs nothing, a power cut at most two flush
	// intervals per file in flight, however stale (or absent) the
	// heartbeat.
	if fi, err := d.Lstat(tmp); err == nil && isReg(fi) && fi.Size > 0 {
		if f, err := d.OpenFile(tmp, os.O_RDWR, 0); err == nil {
			if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
				if done := trustedPrefix(f, min(fi.Size(), size)); done > want {
					want, have = done, true
				}
				if have && want > 0 && want <= size && fi.Size() >= want {
					a, errA := ledger.SampleRegion(f, 0, want)
					b, errB := ledger.SampleRegion(src, 0, want)
					st.nas.Add(ledger.SampledBytes(want))
					// This engine's flush trails its copy: a receiver's
					// mark no longer holds once it writes here.
					if errA == nil && errB == nil && a == b && f.Truncate(want) == nil && clearSyncedMark(f) == nil && takeOver(f) == nil {
						out, off = f, want
					}
				}
			}
			if out == nil {
				f.Close()
			}
		}
	}
	if out == nil {
		f, err := d.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return ledger.Entry{}, classifyWrite(dst, fmt.Errorf("create: %w", err))
		}
		// A truncated receiver's temp file keeps its mark: drop it.
		if err := clearSyncedMark(f); err != nil {
			f.Close()
			return ledger.Entry{}, classifyWrite(dst, err)
		}
		markBoot(f)
		out = f
	}
	keep := false // keep the temp file for a resume (cancelled, not failed)
	ok := false
	defer func() {
		if !ok {
			out.Close()
			if !keep {
				d.Remove(tmp)
			}
		}
	}()
	fail := func(err error) (ledger.Entry, error) {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			keep = true
		}
		return ledger.Entry{}, err
	}

	var h hash.Hash
	if st.s.sha256 {
		h = sha256.New()
		if off > 0 {
			// The resumed part is local: hash it from the temp file.
			if _, err := io.Copy(h, io.NewSectionReader(out, 0, off)); err != nil {
				return fail(fmt.Errorf("re-read %s: %w", d.Join(tmp), err))
			}
		}
	}
	st.prog.offset(it.Rel, off, off)
	// Tell the kernel the rest is read in order, as cp does (by the
	// kernel's documentation it doubles the readahead window): the source
	// was last read at its sampled regions, out of order. Advice only; an
	// error changes nothing.
	_ = unix.Fadvise(int(src.Fd()), off, size-off, unix.FADV_SEQUENTIAL)
	// Each flush interval's fdatasync runs while the next interval is
	// copied (the flush trails the copy by one interval), and an interval
	// is not begun before the flush of the one before the previous one has
	// returned: so every interval before the last two of the temp file is
	// durable, which is what a resume after a reboot trusts
	// (trustedPrefix). The progress offset is the durable one; the bytes
	// done count each chunk as it is copied.
	flush := flushSize()
	fl := newTrailingFlush(out)
	defer fl.wait() // never return with a flush in flight on out's fd
	// flushed waits for the flush in flight and makes its end the
	// progress offset.
	flushed := func() error {
		end, err := fl.wait()
		if err != nil {
			return classifyWrite(dst, fmt.Errorf("fdatasync %s (bytes up to %d): %w", d.Join(tmp), end, err))
		}
		if end > 0 {
			st.prog.offset(it.Rel, end, 0)
		}
		return nil
	}
	// The chunk copied before this one, dropped from the page cache once
	// it is written back (dropBehind).
	var prevOff, prevN int64
	dropPrev := func() error {
		if !dropBehind || prevN == 0 {
			return nil
		}
		if err := dropCopied(src, out, prevOff, prevN); err != nil {
			return classifyWrite(dst, fmt.Errorf("write back %s (bytes %d to %d): %w", d.Join(tmp), prevOff, prevOff+prevN, err))
		}
		return nil
	}
	for off < size {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		// Chunks end on the chunkSize grid, also after resuming at an
		// offset off it (a receiver's chunk, or all a killed writer
		// wrote), and so flushes on the flush grid: durablePrefix counts
		// whole grid intervals, and would otherwise trust part of one not
		// flushed.
		n := min(chunkSize-off%chunkSize, size-off)
		var err error
		if h != nil {
			err = st.readHashWrite(src, out, off, n, h)
		} else {
			err = st.copyRange(src, out, off, n)
		}
		if errors.Is(err, errShortSource) {
			return fail(fmt.Errorf("source file %s shrank while copying to %s: %w: rerun when the NAS copy is stable", it.Src, dst, err))
		} else if err != nil {
			return fail(classifyWrite(dst, fmt.Errorf("copy %s to %s at offset %d: %w", it.Src, d.Join(tmp), off, err)))
		}
		if writeBehind {
			// Hand the chunk to writeback now, without waiting for it,
			// so the disk can write it while the next chunks are read
			// rather than from the kernel's dirty threshold on and at
			// the last flush. Advice, not durability (no metadata,
			// no cache flush: the trailing fdatasync is what a resume
			// trusts); an error changes nothing.
			_ = syncFileRange(int(out.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
		}
		if err := dropPrev(); err != nil {
			return fail(err)
		}
		prevOff, prevN = off, n
		off += n
		st.nas.Add(n)
		st.mu.Lock()
		st.res.CopiedBytes += n
		st.mu.Unlock()
		st.prog.add(n)
		if off%flush == 0 || off == size {
			if err := flushed(); err != nil {
				return fail(err)
			}
			fl.start(off)
		}
	}
	if err := flushed(); err != nil {
		return fail(err)
	}
	if err := dropPrev(); err != nil {
		return fail(err)
	}
	ent := ledger.Entry{Size: size, Source: it.SrcRel, VerifiedAt: time.Now().UTC()}
	if h != nil {
		ent.SHA256 = hex.EncodeToString(h.Sum(nil))
		if it.WantSHA != "" && ent.SHA256 != it.WantSHA {
			return fail(fault.Permanent(fault.ContentMismatch, fmt.Errorf("source blob %s: content sha256 is %s, not its name %s: the NAS copy is corrupt, re-download it", it.Src, ent.SHA256, it.WantSHA)))
		}
	}
	// The samples are read back from the disk (dropped behind): only
	// them, without readahead around each. Advice only.
	_ = unix.Fadvise(int(out.Fd()), 0, size, unix.FADV_RANDOM)
	sum, err := ledger.SampleHash(out, size)
	if err != nil {
		return fail(fmt.Errorf("sample %s: %w", d.Join(tmp), err))
	}
	if sum != srcSample {
		// The source changed under us (or the copy is wrong): not staged.
		return fail(fmt.Errorf("%s: copied content does not match the source %s sampled before the copy (the source changed while copying?): rerun", dst, it.Src))
	}
	ent.Sampled = sum
	// The marks are the temp file's, not the staged file's (the fsync
	// below makes their removal durable).
	dropMarks(out)
	mode := it.Mode
	if mode == 0 {
		mode = 0o644
	}
	if err := out.Chmod(mode); err != nil {
		return fail(classifyWrite(dst, fmt.Errorf("chmod %s: %w", d.Join(tmp), err)))
	}
	if err := out.Sync(); err != nil {
		return fail(classifyWrite(dst, fmt.Errorf("fsync %s: %w", d.Join(tmp), err)))
	}
	if err := out.Close(); err != nil {
		return fail(classifyWrite(dst, fmt.Errorf("close %s: %w", d.Join(tmp), err)))
	}
	if err := d.Rename(tmp, name); err != nil {
		return fail(classifyWrite(dst, err))
	}
	ok = true
	return ent, nil
}

var errShortSource = errors.New("source ended early")

// writeBehind starts each chunk's writeback as soon as it is copied. A
// cold 4 GiB stage into new space, in one series: 3.21 s with it, 3.69 s
// without, cp -a + sync 4.04 s (medians of 5; faster in 4 of 5 rounds;
// FRESH=1 scripts/bench-flush.sh HEAD 5 4 with this checkout adding it).
// hubmirror-bench's -write-behind=false turns it off to measure it again.
var writeBehind = true

// syncFileRange is unix.SyncFileRange; a test stands in for it to see
// which ranges are handed to writeback.
var syncFileRange = unix.SyncFileRange

// dropBehind drops each chunk from the page cache, on both sides, once
// the next one is copied and the chunk is written back (dropCopied): a
// stage of hundreds of GB keeps about two chunks per file in flight in
// the page cache instead of filling it. On a DGX Spark the page cache
// comes out of the memory the GPU shares, which a lane's engine is about
// to claim; on this VM, memory the page cache frees goes back to the
// host, and each page touched again costs a host page fault: a cold copy
// of 4 GiB after a page-cache drop took 34–57 s with `cp` and with the
// write-behind alone, and 4.9–5.2 s with each chunk dropped behind (see
// the README). The post-copy sampled check then reads the copied samples
// back from the disk, not from the page cache. hubmirror-bench's
// -drop-behind=false turns it off to measure it again.
var dropBehind = true

// dropCopied waits until [off, off+n) of dst is written back, then drops
// that range of dst and of src from the page cache. The wait's error is
// returned, not ignored: it consumes the write error the next fdatasync
// of this fd would otherwise have reported. The drops are advice.
func dropCopied(src, dst *os.File, off, n int64) error {
	err := unix.SyncFileRange(int(dst.Fd()), off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return err
	}
	_ = unix.Fadvise(int(dst.Fd()), off, n, unix.FADV_DONTNEED)
	_ = unix.Fadvise(int(src.Fd()), off, n, unix.FADV_DONTNEED)
	return nil
}

// copyRange copies [off, off+n) with copy_file_range, falling back to
// pread/pwrite when the kernel or the filesystems refuse it.
func (st *stager) copyRange(src, dst *os.File, off, n int64) error {
	st.mu.Lock()
	noCFR := st.noCFR
	st.mu.Unlock()
	done := int64(0)
	if !noCFR {
		for done < n {
			roff, woff := off+done, off+done
			m, err := unix.CopyFileRange(int(src.Fd()), &roff, int(dst.Fd()), &woff, int(n-done), 0)
			if err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
					st.mu.Lock()
					st.noCFR = true
					st.mu.Unlock()
					break
				}
				return err
			}
			if m == 0 {
				return errShortSource
			}
			done += int64(m)
		}
		if done == n {
			return nil
		}
	}
	return rwCopy(src, dst, off+done, n-done, nil)
}

func (st *stager) readHashWrite(src, dst *os.File, off, n int64, h hash.Hash) error {
	return rwCopy(src, dst, off, n, h)
}

// rwCopy copies with pread/pwrite through a 4 MiB buffer, hashing what it
// reads in the same pass when h is set.
func rwCopy(src, dst *os.File, off, n int64, h hash.Hash) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for n > 0 {
		c := int64(len(buf))
		if c > n {
			c = n
		}
		m, err := src.ReadAt(buf[:c], off)
		if int64(m) < c {
			if err == nil || errors.Is(err, io.EOF) {
				return errShortSource
			}
			return err
		}
		if h != nil {
			h.Write(buf[:m])
		}
		if _, err := dst.WriteAt(buf[:m], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

// fdatasync is unix.Fdatasync; a test stands in for it to hold a flush
// and look at what was written meanwhile.
var fdatasync = unix.Fdatasync

// trailingFlush runs one fdatasync of a file at a time in the background,
// so the next chunk is copied while the previous one reaches the disk.
type trailingFlush struct {
	fd      int
	done    chan error
	end     int64 // what the pending flush makes durable ends at end
	pending bool
}

func newTrailingFlush(f *os.File) *trailingFlush {
	return &trailingFlush{fd: int(f.Fd()), done: make(chan error, 1)}
}

// start flushes everything written so far (up to end) in the background.
// The previous flush must have been waited for.
func (t *trailingFlush) start(end int64) {
	t.end, t.pending = end, true
	go func() { t.done <- fdatasync(t.fd) }()
}

// wait returns when no flush is in flight: the end offset the flush made
// durable (0 when none was pending).
func (t *trailingFlush) wait() (end int64, err error) {
	if !t.pending {
		return 0, nil
	}
	t.pending = false
	return t.end, <-t.done
}
