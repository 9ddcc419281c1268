package hubfetch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// partsSuffix names the state file beside a partial large blob:
// blobs/<etag>.incomplete.parts. huggingface_hub and hub-mirror look only
// at *.incomplete (a hub-mirror refuses a repo that still has one).
const partsSuffix = ".parts"

// The parts file: a header (magic, blob size, chunk size, segment count)
// then, per segment of chunk bytes, the count of its bytes written from
// its start, as little-endian int64s. A count is updated in place by one
// aligned 8-byte pwrite after its bytes are written to the partial file,
// so a killed process never leaves a count above what it wrote. After a
// machine crash a count may claim bytes the disk lost: the blob's hash
// then fails and the blob is downloaded once more from scratch.
var partsMagic = [8]byte{'S', 'L', 'H', 'F', 'P', 'R', 'T', '1'}

const partsHeader = 32

// segments is a large blob's download state: which bytes of each
// segment are written, shared by the range workers and the hasher.
type segments struct {
	size, chunk int64
	done        []int64
	st          *os.File // the parts file

	mu   sync.Mutex
	cond *sync.Cond
	stop bool
}

func (s *segments) n() int { return len(s.done) }

func (s *segments) bounds(i int) (int64, int64) {
	a := int64(i) * s.chunk
	return a, min(a+s.chunk, s.size)
}

// openSegments loads the parts file beside inc, or starts one: from the
// partial file's bytes taken as a prefix when it has no parts file (how
// huggingface_hub leaves one), else from nothing. It returns the bytes
// kept.
func openSegments(file *os.File, inc string, size, chunk int64) (*segments, int64, error) {
	parts := inc + partsSuffix
	s, err := loadSegments(parts, file, size)
	if err != nil {
		return nil, 0, err
	}
	if s == nil {
		prefix := int64(0)
		if _, err := os.Lstat(parts); errors.Is(err, os.ErrNotExist) {
			if fi, err := file.Stat(); err == nil {
				prefix = min(fi.Size(), size)
			}
		}
		if s, err = newSegments(parts, size, chunk, prefix); err != nil {
			return nil, 0, classifyWrite(parts, err)
		}
		if prefix == 0 {
			if err := file.Truncate(0); err != nil {
				s.st.Close()
				return nil, 0, classifyWrite(inc, err)
			}
		}
		// Reserve the space now where the filesystem can (ENOSPC here, not
		// at 90 %); elsewhere the file is extended sparse.
		if err := unix.Fallocate(int(file.Fd()), 0, 0, size); errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			s.st.Close()
			return nil, 0, classifyWrite(inc, fmt.Errorf("fallocate %d bytes: %w", size, err))
		}
		if err := file.Truncate(size); err != nil {
			s.st.Close()
			return nil, 0, classifyWrite(inc, err)
		}
	}
	s.cond = sync.NewCond(&s.mu)
	var kept int64
	for _, d := range s.done {
		kept += d
	}
	return s, kept, nil
}

// loadSegments reads a parts file that fits this blob and its partial
// file; anything else is nil (start over).
func loadSegments(parts string, file *os.File, size int64) (*segments, error) {
	st, err := os.OpenFile(parts, os.O_RDWR, 0)
	if err != nil {
		return nil, nil
	}
	b, err := readAllAt(st)
	if err != nil || len(b) < partsHeader || [8]byte(b[:8]) != partsMagic {
		st.Close()
		return nil, nil
	}
	le := binary.LittleEndian
	chunk, n := int64(le.Uint64(b[16:])), int64(le.Uint64(b[24:]))
	fi, ferr := file.Stat()
	if int64(le.Uint64(b[8:])) != size || chunk <= 0 || n != (size+chunk-1)/chunk || int64(len(b)) != partsHeader+8*n || ferr != nil || fi.Size() != size {
		st.Close()
		return nil, nil
	}
	s := &segments{size: size, chunk: chunk, done: make([]int64, n), st: st}
	for i := range s.done {
		d := int64(le.Uint64(b[partsHeader+8*i:]))
		a, e := s.bounds(i)
		if d < 0 || d > e-a {
			st.Close()
			return nil, nil
		}
		s.done[i] = d
	}
	return s, nil
}

// partsHoldBytes says whether a parts file counts any byte written (an
// unreadable one is taken to: keep what is not known to be empty).
func partsHoldBytes(parts string) bool {
	f, err := os.Open(parts)
	if err != nil {
		return true
	}
	defer f.Close()
	b, err := readAllAt(f)
	if err != nil || len(b) < partsHeader || [8]byte(b[:8]) != partsMagic {
		return true
	}
	for i := partsHeader; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != 0 {
			return true
		}
	}
	return false
}

func readAllAt(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil || fi.Size() > 1<<26 {
		return nil, fmt.Errorf("parts file unusable")
	}
	b := make([]byte, fi.Size())
	_, err = f.ReadAt(b, 0)
	return b, err
}

// newSegments writes a parts file (temp, fsync, rename) with the first
// prefix bytes counted as written.
func newSegments(parts string, size, chunk, prefix int64) (*segments, error) {
	n := (size + chunk - 1) / chunk
	s := &segments{size: size, chunk: chunk, done: make([]int64, n)}
	b := make([]byte, partsHeader+8*n)
	copy(b, partsMagic[:])
	le := binary.LittleEndian
	le.PutUint64(b[8:], uint64(size))
	le.PutUint64(b[16:], uint64(chunk))
	le.PutUint64(b[24:], uint64(n))
	for i := range s.done {
		a, e := s.bounds(i)
		s.done[i] = max(0, min(prefix, e)-a)
		le.PutUint64(b[partsHeader+8*i:], uint64(s.done[i]))
	}
	tmp := parts + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(tmp, parts); err != nil {
		f.Close()
		return nil, err
	}
	s.st = f
	return s, nil
}

// advance counts n more bytes of segment i written, on disk then in
// memory, and wakes the hasher.
func (s *segments) advance(i int, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(s.done[i]+n))
	if _, err := s.st.WriteAt(b[:], partsHeader+8*int64(i)); err != nil {
		return err
	}
	s.done[i] += n
	s.cond.Broadcast()
	return nil
}

func (s *segments) doneOf(i int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[i]
}

// abort wakes the hasher for good.
func (s *segments) abort() {
	s.mu.Lock()
	s.stop = true
	s.mu.Unlock()
	s.cond.Broadcast()
}

// waitBeyond blocks until the bytes written from 0 without a gap reach
// past off, and returns where they end; false once aborted.
func (s *segments) waitBeyond(off int64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.stop {
			return 0, false
		}
		end := s.size
		for i := int(off / s.chunk); i < s.n(); i++ {
			a, e := s.bounds(i)
			if a+s.done[i] < e {
				end = a + s.done[i]
				break
			}
		}
		if end > off {
			return end, true
		}
		s.cond.Wait()
	}
}

// segmented downloads a large blob as ParallelRanges range requests of a
// chunk each, while one goroutine hashes the bytes written without a gap
// from the start, reading them back from the page cache and then dropping
// them behind. What is on disk is resumed (the hash rebuilt by reading it
// back); at most the unrecorded tail of a piece per range is fetched again.
func (f *fetcher) segmented(ctx context.Context, file *os.File, b *blob, src *source, inc string) ([]byte, bool, error) {
	s, kept, err := openSegments(file, inc, b.size, f.r.ChunkSize)
	if err != nil {
		return nil, false, err
	}
	defer s.st.Close()
	f.resumedBytes(kept)
	resumed := kept > 0
	var todo []int
	for i := range s.n() {
		if a, e := s.bounds(i); a+s.done[i] < e {
			todo = append(todo, i)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopHash := context.AfterFunc(ctx, s.abort)
	defer stopHash()
	h := newBlobHash(b)
	hashed := make(chan error, 1)
	go func() {
		err := hashSegments(s, file, inc, h)
		if err != nil {
			cancel() // a read-back or write-back error: stop the ranges
		}
		hashed <- err
	}()

	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, min(f.r.ParallelRanges, len(todo)))
	for w := range errs {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= len(todo) || ctx.Err() != nil {
					return
				}
				if err := f.fetchSegment(ctx, s, file, src, inc, todo[k]); err != nil {
					errs[w] = err
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.abort()
		if herr := <-hashed; herr != nil && !errors.Is(herr, errHashStopped) {
			return nil, resumed, herr
		}
		return nil, resumed, err
	}
	if err := <-hashed; err != nil {
		return nil, resumed, err
	}
	return h.Sum(nil), resumed, nil
}

// fetchSegment downloads what segment i lacks, retrying from where each
// try left off.
func (f *fetcher) fetchSegment(ctx context.Context, s *segments, file *os.File, src *source, inc string, i int) error {
	a, e := s.bounds(i)
	what := fmt.Sprintf("download %s bytes %d-%d of %s", src.b.path, a, e-1, f.h.what())
	return f.h.retry(ctx, what, func() (bool, error) {
		off := a + s.doneOf(i)
		start := off
		if off >= e {
			return false, nil
		}
		body, err := src.open(ctx, off, e)
		if err != nil {
			return false, err
		}
		defer body.Close()
		err = f.copyBody(body, file, inc, &off, e, nil, func(n int64) error {
			if err := s.advance(i, n); err != nil {
				return classifyWrite(inc+partsSuffix, err)
			}
			return nil
		})
		return off > start, err
	})
}

var errHashStopped = errors.New("hash stopped: the download failed")

// hashSegments hashes the blob in order as its bytes arrive, reading them
// back (they are in the page cache, or on disk when resumed), and drops
// each hashed range from the page cache once it is written back.
func hashSegments(s *segments, file *os.File, inc string, h hash.Hash) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var off int64
	db := &dropBehind{file: file}
	for off < s.size {
		end, ok := s.waitBeyond(off)
		if !ok {
			return errHashStopped
		}
		for off < end {
			n := min(int64(len(buf)), end-off)
			if _, err := file.ReadAt(buf[:n], off); err != nil {
				return fmt.Errorf("read back %s at byte %d: %w", inc, off, err)
			}
			h.Write(buf[:n])
			off += n
		}
		if err := db.upTo(off, off == s.size); err != nil {
			return classifyWrite(inc, err)
		}
	}
	return nil
}
