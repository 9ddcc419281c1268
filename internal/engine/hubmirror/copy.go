package hubmirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, 4<<20); return &b }}

// copy writes it to a temp name beside dst in chunks, fdatasyncing every
// flush interval (progress offset after each), continuing a resumed temp
// file after checking the sampled hash of its kept part against the
// source, then checks the result and renames it into place. A copy that
// fails is removed, so no temp file of a torn or corrupt copy is left to
// be resumed; a cancel keeps it for a resume, and so does a full disk
// (keepFull): once space is freed the next pass copies only the rest.
func (st *stager) copy(ctx context.Context, it *fileItem, src *Source, srcSample, dst string) (ledger.Entry, error) {
	d, name, err := st.dc.Parent(dst, true)
	if err != nil {
		return ledger.Entry{}, classifyWrite(dst, err)
	}
	// Whichever run finds it (a retried attempt, or a new run after a
	// cancel, with or without heartbeat details), a temp file beside dst
	// is this destination's earlier copy, written by this engine or by a
	// receiver: its trusted prefix counts like the heartbeat's offset,
	// after the same sampled check against the source (openTemp). A kill
	// -9 or a cancel costs nothing, a power cut at most two flush
	// intervals per file in flight, however stale (or absent) the
	// heartbeat.
	size := src.Size()
	t, err := openTemp(d, name, src, size, st.resume[it.Rel], 0)
	if err != nil {
		return ledger.Entry{}, err
	}
	st.nas.Add(t.sampled)
	c := &chunkCopy{st: st, it: it, src: src, t: t, out: t.File(), size: size, dst: dst}
	ent, err := c.run(ctx, srcSample)
	// A cancel keeps the temp file for a resume (the progress reports
	// it), and so does a full disk once what was written is flushed; any
	// other failure removes it.
	keep := err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err())
	if err != nil && !keep && c.full {
		keep = c.keepFull() == nil
	}
	if err != nil && !keep {
		c.uncount()
	}
	t.Discard(keep)
	return ent, err
}

// chunkCopy is one large file's copy into its temp file: chunk by chunk on
// the chunk grid, each chunk handed to writeback as it is copied
// (writeBehind) and dropped from the page cache once written back
// (dropBehind), with an fdatasync every flush interval that trails the
// copy by one interval.
type chunkCopy struct {
	st   *stager
	it   *fileItem
	src  *Source
	t    *TempFile
	out  *os.File // t's file
	size int64
	dst  string
	// h hashes the whole content as it is written (the kept prefix
	// re-read from the node's disk, then each chunk read back once it is
	// copied) when the file is a content-addressed blob or verify =
	// "sha256".
	h  *hashBeside
	fl *trailingFlush
	// prevOff and prevN are the chunk copied before the current one,
	// dropped from the page cache once it is written back.
	prevOff, prevN int64
	// counted is what this copy added to the pass's progress, taken back
	// when it fails (a discarded copy is made again from the start).
	counted int64
	// full: a write into the temp file failed for want of space (ENOSPC,
	// EDQUOT): what was written before it is whole, and kept (keepFull).
	full bool
}

// keepFull readies the temp file of a copy a full disk stopped for the
// next pass: everything its writes put in it (the chunks before the
// failed one and what the failed write wrote before it ran out of space)
// is flushed, so a resume in this boot keeps all of it, after its sampled
// check, and one after a reboot keeps its durable prefix. Only a write
// that failed is kept so: a failed flush may have dropped written pages,
// and its temp file is removed.
func (c *chunkCopy) keepFull() error {
	return fdatasync(int(c.out.Fd()))
}

// run copies the file from the temp file's resumed end on, checks it and
// renames it into place.
func (c *chunkCopy) run(ctx context.Context, srcSample string) (ledger.Entry, error) {
	if c.it.WantSHA != "" || c.st.s.sha256 {
		// The resumed part is local: it is hashed from the temp file.
		c.h = newHashBeside(c.out, c.t.Resumed())
		defer c.h.abandon()
	}
	if err := c.copyChunks(ctx); err != nil {
		return ledger.Entry{}, err
	}
	return c.finish(srcSample)
}

// copyChunks copies the rest of the file. Each flush interval's fdatasync
// runs while the next interval is copied (the flush trails the copy by one
// interval), and an interval is not begun before the flush of the one
// before the previous one has returned: so every interval before the last
// two of the temp file is durable, which is what a resume after a reboot
// trusts (trustedPrefix). The progress offset is the durable one; the
// bytes done count each chunk as it is copied.
func (c *chunkCopy) copyChunks(ctx context.Context) error {
	off := c.t.Resumed()
	c.st.prog.offset(c.it.Rel, off, off)
	c.counted = off
	// Tell the kernel the rest is read in order, as cp does (by the
	// kernel's documentation it doubles the readahead window): the source
	// was last read at its sampled regions, out of order. Advice only; an
	// error changes nothing.
	_ = unix.Fadvise(int(c.src.Fd()), off, c.size-off, unix.FADV_SEQUENTIAL)
	flush := flushSize()
	c.fl = newTrailingFlush(c.out)
	defer c.fl.wait() // never return with a flush in flight on out's fd
	for off < c.size {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Chunks end on the chunkSize grid, also after resuming at an
		// offset off it (a receiver's chunk, or all a killed writer
		// wrote), and so flushes on the flush grid: durablePrefix counts
		// whole grid intervals, and would otherwise trust part of one not
		// flushed.
		n := min(chunkSize-off%chunkSize, c.size-off)
		// Beside a serving lane, the chunk waits for the rate and the
		// memory floor (nil pacer: at once).
		if err := c.st.opts.Pacer.Wait(ctx, n); err != nil {
			return err
		}
		if err := c.chunk(off, n); err != nil {
			return err
		}
		off += n
		if off%flush == 0 || off == c.size {
			if err := c.flushed(); err != nil {
				return err
			}
			c.fl.start(off)
		}
	}
	if err := c.flushed(); err != nil {
		return err
	}
	return c.dropPrev()
}

// chunk copies [off, off+n) (hashing it when c.h is set), hands it to
// writeback, drops the chunk before it behind and counts it.
func (c *chunkCopy) chunk(off, n int64) error {
	w, err := c.st.copyRange(c.src.File, c.out, off, n)
	if errors.Is(err, errShortSource) {
		// It shrank while it was copied.
		return &ChangedError{Path: c.it.Src, Why: fmt.Sprintf("it ended at offset %d of the %d bytes it had when opened", off, c.size)}
	} else if err != nil {
		if c.full = errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT); c.full {
			// What the failed write put in the temp file stays there
			// (keepFull) and counts as copied. The file's size says how
			// much that is: a copy_file_range that fails part way may
			// write pages and still report only the error.
			if fi, serr := c.out.Stat(); serr == nil {
				w = max(w, min(fi.Size(), off+n)-off)
			}
		}
		if w > 0 {
			c.count(w)
		}
		return classifyWrite(c.dst, fmt.Errorf("copy %s to %s at offset %d: %w", c.it.Src, c.t.Path(), off+w, err))
	}
	if writeBehind {
		// Hand the chunk to writeback now, without waiting for it, so the
		// disk can write it while the next chunks are read rather than
		// from the kernel's dirty threshold on and at the last flush.
		// Advice, not durability (no metadata, no cache flush: the
		// trailing fdatasync is what a resume trusts); an error changes
		// nothing.
		_ = syncFileRange(int(c.out.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
	if c.h != nil {
		c.h.add(off, off+n)
	}
	if err := c.dropPrev(); err != nil {
		return err
	}
	c.prevOff, c.prevN = off, n
	c.count(n)
	if testAfterChunk != nil {
		testAfterChunk(c.it.Rel, off+n)
	}
	return nil
}

// count adds n bytes copied to the pass's counters and progress.
func (c *chunkCopy) count(n int64) {
	c.st.nas.Add(n)
	c.st.mu.Lock()
	c.st.res.CopiedBytes += n
	c.st.mu.Unlock()
	c.st.prog.add(n)
	c.counted += n
}

// testAfterChunk, when set (tests only), is called after each chunk of a
// large file is copied, with the file's mirror path and the bytes copied
// so far: a fault point that holds the copy at a byte offset while a test
// changes its source.
var testAfterChunk func(rel string, copied int64)

// uncount takes back from the pass's progress what a failed copy added
// to it: a copy made again counts its bytes again.
func (c *chunkCopy) uncount() {
	c.st.prog.undo(c.it.Rel, c.counted)
	c.counted = 0
}

// flushed waits for the flush in flight and makes its end the progress
// offset.
func (c *chunkCopy) flushed() error {
	end, err := c.fl.wait()
	if err != nil {
		return classifyWrite(c.dst, fmt.Errorf("fdatasync %s (bytes up to %d): %w", c.t.Path(), end, err))
	}
	if end > 0 {
		c.st.prog.offset(c.it.Rel, end, 0)
	}
	return nil
}

// dropPrev drops the chunk copied before the current one from the page
// cache once it is written back (dropBehind).
func (c *chunkCopy) dropPrev() error {
	if !dropBehind || c.prevN == 0 {
		return nil
	}
	if c.h != nil {
		// Hashed from the page cache first.
		if err := c.h.wait(c.prevOff + c.prevN); err != nil {
			return err
		}
	}
	if err := dropCopied(c.src.File, c.out, c.prevOff, c.prevN); err != nil {
		return classifyWrite(c.dst, fmt.Errorf("write back %s (bytes %d to %d): %w", c.t.Path(), c.prevOff, c.prevOff+c.prevN, err))
	}
	return nil
}

// finish checks the copied file and commits it; the ledger entry records
// what was written and proved. A content-addressed blob that hashed, as
// it was streamed, to its name is proved whole. Anything else is torn if
// its source's identity moved since it was opened (it changed while it
// was read), whatever it looks like: a *ChangedError, and it is made
// again. A blob that did not hash to its name then comes from a corrupt
// NAS copy (refused), unless part of the file was kept from an earlier
// attempt, which may be from an earlier version of the source (made again
// whole). Last, the samples of the written file must match the source's
// taken before the copy.
func (c *chunkCopy) finish(srcSample string) (ledger.Entry, error) {
	it := c.it
	ent := ledger.Entry{Size: c.size, Source: it.SrcRel, VerifiedAt: time.Now().UTC()}
	if c.h != nil {
		sum, err := c.h.sum()
		if err != nil {
			return ledger.Entry{}, err
		}
		ent.SHA256 = sum
	}
	named := it.WantSHA != "" && ent.SHA256 == it.WantSHA
	if !named {
		if err := c.src.Unchanged(); err != nil {
			return ledger.Entry{}, err
		}
	}
	if it.WantSHA != "" && !named {
		if c.t.Resumed() > 0 {
			return ledger.Entry{}, &ChangedError{Path: it.Src, Why: fmt.Sprintf("the %d bytes kept from an earlier copy and the rest hash to %s, not the blob's name", c.t.Resumed(), ent.SHA256)}
		}
		return ledger.Entry{}, RefuseCorrupt(c.dst, it.Src, it.WantSHA, ent.SHA256)
	}
	// The samples are read back from the disk (dropped behind): only
	// them, without readahead around each. Advice only.
	_ = unix.Fadvise(int(c.out.Fd()), 0, c.size, unix.FADV_RANDOM)
	sum, err := ledger.SampleHash(c.out, c.size)
	if err != nil {
		return ledger.Entry{}, fmt.Errorf("sample %s: %w", c.t.Path(), err)
	}
	if sum != srcSample && !named {
		// The source changed under us (or the copy is wrong): not staged.
		return ledger.Entry{}, &ChangedError{Path: it.Src, Why: "the copy's sampled hash differs from the source's taken before it"}
	}
	ent.Sampled = sum
	if err := c.t.Commit(it.Mode); err != nil {
		return ledger.Entry{}, err
	}
	if fi, ok := c.t.Committed(); ok && named {
		c.st.mu.Lock()
		c.st.written = append(c.st.written, written{rel: it.Rel, committed: &fi})
		c.st.mu.Unlock()
	}
	return ent, nil
}

var errShortSource = errors.New("source ended early")

// ChunkSize is the grain of Stage's copy: its flush interval is a whole
// number of chunks. A receiver's chunk (OpenTemp) divides it, so either
// writer resumes the other's temp file on its own chunk grid.
func ChunkSize() int64 { return chunkSize }

// SetChunkSize makes Stage copy n bytes at a time (its flush interval
// stays the same number of chunks) and returns a func that restores the
// size before it. It is for tests, of this package and of those sharing
// Stage's temp files (internal/engine/relay), which copy megabytes, not
// gigabytes; no Stage may be running when it is called.
func SetChunkSize(n int64) (restore func()) {
	old := chunkSize
	chunkSize = n
	return func() { chunkSize = old }
}

// FlushSize is how many bytes Stage copies between fdatasyncs, for
// hubmirror-bench's report of the flush cadence it measures.
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
// pread/pwrite when the kernel or the filesystems refuse it. It returns
// how many bytes it wrote, all of them but on an error.
func (st *stager) copyRange(src, dst *os.File, off, n int64) (int64, error) {
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
				return done, err
			}
			if m == 0 {
				return done, errShortSource
			}
			done += int64(m)
		}
		if done == n {
			return done, nil
		}
	}
	w, err := rwCopy(src, dst, off+done, n-done)
	return done + w, err
}

// rwCopy copies with pread/pwrite through a 4 MiB buffer and returns how
// many bytes it wrote.
func rwCopy(src, dst *os.File, off, n int64) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var done int64
	for done < n {
		m, err := readFull(src, buf[:min(int64(len(buf)), n-done)], off+done)
		if err != nil {
			return done, err
		}
		w, err := dst.WriteAt(buf[:m], off+done)
		done += int64(w)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// readFull reads all of b from src at off: a source that ends first is
// errShortSource.
func readFull(src *os.File, b []byte, off int64) (int, error) {
	m, err := src.ReadAt(b, off)
	if m < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			return m, errShortSource
		}
		return m, err
	}
	return m, nil
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
