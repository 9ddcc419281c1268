package hubmirror

import (
	"context"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// smallMax is the size up to which a file is read whole into memory, copied
// from that buffer and not fsynced one by one (a syncfs before the ledger is
// saved covers it). Such files are sampled whole, so a crash that leaves one
// with bad content is always caught by the next pass.
const smallMax = 1 << 20

// SmallMax is the size up to which Stage reads a file whole (and samples
// it whole): moving such a file onto the node by another way (a peer)
// saves no NAS read.
const SmallMax = smallMax

// smallWorkers is how many small files are in flight per opts.Parallel:
// they are bound by latency (metadata, one random read), not bandwidth.
const smallWorkers = 16

// metaWorkers is how many source entries are resolved at once while
// planning (cold lstat/readlink on a NAS is latency-bound).
const metaWorkers = 64

// forEach runs fn(ctx, 0..n-1) with at most workers calls in flight: that
// many goroutines (errgroup) take the indexes in order, so a pass over
// thousands of files starts a few goroutines, not one per file. The first
// error cancels the ctx the other calls get, stops starting new ones and
// is returned; with no error, the parent's own cancellation is returned
// (calls it stopped from starting are not done).
func forEach(parent context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(parent)
	var next atomic.Int64
	for w := 0; w < min(max(1, workers), n); w++ {
		g.Go(func() error {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return nil
				}
				if err := fn(ctx, i); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return parent.Err()
}

// prefetch asks the kernel to read the sampled regions of f ahead, all at
// once, so SampleHash's reads hit the page cache instead of paying one
// round trip per region (cold NVMe, and above all NFS).
func prefetch(f *os.File, size int64) {
	if size <= ledger.SampledBytes(size) {
		unix.Fadvise(int(f.Fd()), 0, size, unix.FADV_WILLNEED)
		return
	}
	fd := int(f.Fd())
	unix.Fadvise(fd, 0, ledger.HeadBytes, unix.FADV_WILLNEED)
	mid := size - ledger.HeadBytes - ledger.TailBytes
	step := mid / ledger.SpreadSamples
	for i := int64(0); i < ledger.SpreadSamples; i++ {
		at := ledger.HeadBytes + i*step + (step-ledger.SpreadBytes)/2
		unix.Fadvise(fd, at, ledger.SpreadBytes, unix.FADV_WILLNEED)
	}
	unix.Fadvise(fd, size-ledger.TailBytes, ledger.TailBytes, unix.FADV_WILLNEED)
}

// sampleOpen hashes the sampled regions of an open file after prefetching them.
func sampleOpen(f *os.File, size int64) (string, error) {
	prefetch(f, size)
	return ledger.SampleHash(f, size)
}

// readSmall reads a whole source file of at most smallMax bytes with raw
// syscalls. ok is false when the file turned out larger (the caller then
// takes the chunked path). The bytes read are what the copy writes, so
// they are torn only if the file changed while it was read: its identity
// before the read and after it must agree, else the error is a
// *ChangedError.
func readSmall(path string) (data []byte, ok bool, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var before unix.Stat_t
	data, ok, err = readSmallInto(fd, path, nil, &before)
	if err != nil || !ok {
		return nil, ok, err
	}
	if err := unchangedSince(fd, path, before); err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// smallBufs holds smallMax-byte buffers for reading staged small files
// that are only hashed (a verify pass reads thousands).
var smallBufs = sync.Pool{New: func() any { b := make([]byte, smallMax); return &b }}

// readSmallInto reads the whole file open at fd (path names it), when it
// is at most smallMax bytes, into buf when it is large enough (the result
// aliases it), else into a new slice; st gets the fstat it sized the read
// by. The caller closes fd.
func readSmallInto(fd int, path string, buf []byte, st *unix.Stat_t) (data []byte, ok bool, err error) {
	if err := unix.Fstat(fd, st); err != nil {
		return nil, false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Size > smallMax {
		return nil, false, nil
	}
	// A nil buf must not make an empty file's data nil: callers tell a
	// small file read whole from one to copy by data != nil.
	if buf != nil && int64(len(buf)) >= st.Size {
		data = buf[:st.Size]
	} else {
		data = make([]byte, st.Size)
	}
	for off := 0; off < len(data); {
		n, err := unix.Pread(fd, data[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return nil, false, &os.PathError{Op: "read", Path: path, Err: errShortSource}
		}
		off += n
	}
	return data, true, nil
}

// sampleDst hashes the sampled regions of the staged file name in d (not
// following a link) of the given size: small ones are read whole with raw
// syscalls.
func sampleDst(d *staging.Dir, name string, size int64) (string, error) {
	if size <= smallMax {
		fd, err := d.OpenRaw(name, unix.O_RDONLY, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		bp := smallBufs.Get().(*[]byte)
		defer smallBufs.Put(bp)
		var st unix.Stat_t
		data, ok, err := readSmallInto(fd, d.Join(name), *bp, &st)
		if err != nil {
			return "", err
		}
		if ok && int64(len(data)) == size {
			return ledger.SampleBytes(data), nil
		}
	}
	f, err := d.OpenFile(name, unix.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	return sampleOpen(f, fi.Size())
}
