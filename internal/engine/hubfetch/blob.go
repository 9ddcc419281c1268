package hubfetch

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/fault"
)

// bufSize is the unit of reads from the network and of writes to disk.
const bufSize = 1 << 20

var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// newBlobHash starts the hash the blob's etag is: sha256 of the bytes for
// an LFS file (X-Linked-Etag), the git blob sha1 ("blob <len>\0" then the
// bytes) for a git file (its ETag).
func newBlobHash(b *blob) hash.Hash {
	if b.lfs {
		return sha256.New()
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", b.size)
	return h
}

// hashError is a downloaded blob whose bytes do not hash to its etag.
type hashError struct {
	what, file, algo, want, got string
}

func (e *hashError) Error() string {
	return fmt.Sprintf("%s, file %s: downloaded content has %s %s, the Hub announces %s: corrupted in transit or served wrong; the partial file was removed, nothing was put in blobs/", e.what, e.file, e.algo, e.got, e.want)
}

// fetchBlob puts one blob in place (downloading, resuming or verifying
// it) and links every file holding it into the snapshot. A resumed blob
// whose hash fails is downloaded once more from scratch before the
// mismatch is reported: the kept bytes may be what a crash lost.
func (f *fetcher) fetchBlob(ctx context.Context, b *blob) error {
	final := filepath.Join(f.p.blobsDir, b.etag)
	replace := false
	if b.present && f.r.VerifyExisting {
		ok, err := f.verifyExisting(b, final)
		if err != nil {
			return err
		}
		b.present, replace = ok, !ok
	}
	if b.present {
		f.reused(b)
	} else {
		src := &source{h: f.h, b: b, commit: f.p.commit}
		for try := 0; ; try++ {
			resumed, err := f.download(ctx, b, src, final, replace)
			var he *hashError
			if err != nil && resumed && try == 0 && errors.As(err, &he) {
				continue
			}
			if err != nil {
				return err
			}
			break
		}
	}
	for _, p := range b.paths {
		link := filepath.Join(f.p.snapDir, filepath.FromSlash(p))
		if _, err := ensureLink(link, linkTarget(p, b.etag), &f.dirs); err != nil {
			return err
		}
	}
	f.fileDone(b)
	return nil
}

// verifyExisting hashes a complete blob (Request.VerifyExisting).
func (f *fetcher) verifyExisting(b *blob, final string) (bool, error) {
	in, err := os.Open(final)
	if err != nil {
		return false, fmt.Errorf("verify %s: %w", final, err)
	}
	defer in.Close()
	h := newBlobHash(b)
	if _, err := io.Copy(h, in); err != nil {
		return false, fmt.Errorf("verify %s: %w", final, err)
	}
	_ = unix.Fadvise(int(in.Fd()), 0, 0, unix.FADV_DONTNEED)
	return hex.EncodeToString(h.Sum(nil)) == b.etag, nil
}

// download fetches the blob into blobs/<etag>.incomplete, continuing what
// an earlier call left there, checks its hash, fsyncs and renames it into
// place. resumed says whether bytes already on disk were kept.
func (f *fetcher) download(ctx context.Context, b *blob, src *source, final string, replace bool) (resumed bool, err error) {
	inc := final + ".incomplete"
	if err := os.MkdirAll(f.p.blobsDir, 0o755); err != nil {
		return false, classifyWrite(f.p.blobsDir, err)
	}
	file, err := os.OpenFile(inc, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return false, classifyWrite(inc, err)
	}
	defer file.Close()
	// One writer per partial file: a second fetch of the same repo (another
	// lane) fails transiently and retries later, instead of interleaving.
	if err := unix.Flock(int(file.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, fmt.Errorf("%s is being written by another fetch (%w): retry when it is done", inc, err)
	}
	parts := inc + partsSuffix
	defer func() {
		if err != nil {
			dropEmpty(inc, parts) // still under the lock (the deferred Close comes after)
		}
	}()
	if fi, err := os.Lstat(final); err == nil && fi.Mode().IsRegular() && fi.Size() == b.size && !replace {
		// Another fetch finished it since the plan: take theirs.
		os.Remove(inc)
		f.reused(b)
		return false, nil
	}
	var sum []byte
	if _, serr := os.Lstat(parts); serr == nil || b.size > f.r.ChunkSize {
		sum, resumed, err = f.segmented(ctx, file, b, src, inc)
	} else {
		sum, resumed, err = f.whole(ctx, file, b, src, inc)
	}
	if err != nil {
		return resumed, err
	}
	if got := hex.EncodeToString(sum); got != b.etag {
		file.Close()
		os.Remove(inc)
		os.Remove(parts)
		algo := "git blob sha1"
		if b.lfs {
			algo = "sha256"
		}
		f.unprogress(b)
		return resumed, fault.Permanent(HubContentMismatch, &hashError{what: fmt.Sprintf("repo %s at revision %s (commit %s)", f.r.Repo, f.r.Revision, f.p.commit), file: b.path, algo: algo, want: b.etag, got: got})
	}
	if err := file.Sync(); err != nil {
		return resumed, classifyWrite(inc, fmt.Errorf("fsync: %w", err))
	}
	// The parts file goes first: killed in between, the next call finds a
	// whole partial file without one, takes it as a prefix, re-hashes it
	// and renames it; the other order could leave a parts file behind.
	if err := os.Remove(parts); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return resumed, classifyWrite(parts, err)
	}
	if err := os.Rename(inc, final); err != nil {
		return resumed, classifyWrite(final, err)
	}
	f.dirs.add(f.p.blobsDir)
	f.downloaded(b)
	return resumed, nil
}

// dropEmpty removes a partial download that holds no byte of its blob —
// its first request was refused (an etag other than the listing's, a
// 404) — so a refused file leaves nothing in blobs/; one holding bytes is
// kept for the retry to resume.
func dropEmpty(inc, parts string) {
	fi, err := os.Lstat(inc)
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	if _, err := os.Lstat(parts); err == nil {
		if partsHoldBytes(parts) {
			return
		}
	} else if fi.Size() > 0 {
		return
	}
	os.Remove(parts)
	os.Remove(inc)
}

// whole downloads a blob of at most one chunk in one stream, continuing
// after the bytes an earlier call left in the partial file (huggingface_
// hub's own convention: the partial file is a prefix), whose hash is
// rebuilt by reading them back.
func (f *fetcher) whole(ctx context.Context, file *os.File, b *blob, src *source, inc string) ([]byte, bool, error) {
	fi, err := file.Stat()
	if err != nil {
		return nil, false, err
	}
	off := fi.Size()
	if off > b.size {
		if err := file.Truncate(0); err != nil {
			return nil, false, classifyWrite(inc, err)
		}
		off = 0
	}
	h := newBlobHash(b)
	if off > 0 {
		if _, err := io.Copy(h, io.NewSectionReader(file, 0, off)); err != nil {
			return nil, false, fmt.Errorf("re-read %s: %w", inc, err)
		}
		f.resumedBytes(off)
		// Read back only to rebuild the hash: not worth the page cache.
		_ = unix.Fadvise(int(file.Fd()), 0, off, unix.FADV_DONTNEED)
	}
	resumed := off > 0
	err = f.h.retry(ctx, fmt.Sprintf("download %s of %s", b.path, f.h.what()), func() (bool, error) {
		start := off
		if off >= b.size {
			return false, nil
		}
		body, err := src.open(ctx, off, b.size)
		if err != nil {
			return false, err
		}
		defer body.Close()
		err = f.copyBody(body, file, inc, &off, b.size, h, nil)
		return off > start, err
	})
	if err != nil {
		return nil, resumed, err
	}
	return h.Sum(nil), resumed, nil
}

// copyBody writes body to file from *off up to end, hashing it (h) when
// the hash follows the stream, or telling seg each piece. Each piece is
// handed to writeback at once; with h, what was written dropLag before is
// dropped from the page cache (drop-behind), so a download of hundreds of
// GB does not fill the memory a GPU node's engine is about to claim. (For
// ranges the hasher drops what it has read back.)
func (f *fetcher) copyBody(body io.Reader, file *os.File, path string, off *int64, end int64, h hash.Hash, seg func(n int64) error) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	db := &dropBehind{file: file, done: *off}
	for *off < end {
		n, rerr := io.ReadFull(body, buf[:min(int64(len(buf)), end-*off)])
		// A short write (the disk filled up) still counts what it wrote,
		// so what is on disk, the parts file and the counts agree.
		m, werr := 0, error(nil)
		if n > 0 {
			m, werr = file.WriteAt(buf[:n], *off)
		}
		if m > 0 {
			_ = unix.SyncFileRange(int(file.Fd()), *off, int64(m), unix.SYNC_FILE_RANGE_WRITE)
			if seg != nil {
				if err := seg(int64(m)); err != nil {
					return err
				}
			}
			*off += int64(m)
			f.add(int64(m), true)
			if h != nil {
				h.Write(buf[:m])
				if err := db.upTo(*off, *off == end); err != nil {
					return classifyWrite(path, err)
				}
			}
		}
		if werr != nil {
			return classifyWrite(path, fmt.Errorf("write at byte %d: %w", *off, werr))
		}
		if rerr != nil && *off < end {
			return fmt.Errorf("read %s at byte %d: %w", path, *off, rerr)
		}
	}
	return nil
}

// dropLag is how far behind the writer drop-behind runs: far enough that
// the range's writeback, started as it was written, is usually done, so
// the wait costs nothing.
const dropLag = 8 << 20

// dropBehind drops a file's bytes from the page cache as they are done
// with, in ranges of at least dropLag.
type dropBehind struct {
	file *os.File
	done int64 // dropped up to here
}

// dropBehindOn is the switch a test turns off to show what it changes.
var dropBehindOn = true

// upTo drops up to dropLag before end, or up to end when final.
func (d *dropBehind) upTo(end int64, final bool) error {
	if !dropBehindOn {
		return nil
	}
	if !final {
		end -= dropLag
	}
	if end-d.done < dropLag && !(final && end > d.done) {
		return nil
	}
	err := dropWritten(d.file, d.done, end-d.done)
	d.done = end
	return err
}

// dropWritten waits until [off, off+n) is written back, then drops it from
// the page cache (as hub-mirror's copy does). The wait's error is
// returned: it is the write error a later fsync would report.
func dropWritten(file *os.File, off, n int64) error {
	err := unix.SyncFileRange(int(file.Fd()), off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return err
	}
	_ = unix.Fadvise(int(file.Fd()), off, n, unix.FADV_DONTNEED)
	return nil
}
