package relay

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

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, 4<<20); return &b }}

// badContent is a received file whose content a peer got wrong: the file
// is fetched again from the NAS and the peer is not asked again.
type badContent struct{ why string }

func (b *badContent) Error() string { return b.why }

// received is what one receipt of a file gave: the peer any byte came
// from, the file's sha256 when it hashed to the blob's name, and the
// sampled hash of what was written.
type received struct {
	peer, sum, sampled string
}

// copy writes f to its temp name beside the final one, chunk by chunk
// (fdatasync, then servable), from peer when set and healthy, else from
// the NAS; checks it; renames it into place. A copy that fails is
// removed (a cancel or kill keeps its fsynced chunks for a resume), and
// what it added to the progress is taken back.
func (p *pass) copy(ctx context.Context, f File, d *staging.Dir, name string, nas nasReader, want, peer string, e *entry) (received, error) {
	// A temp file beside dst is an earlier copy of this destination (a
	// killed or cancelled pass, this engine's or hubmirror's Stage's):
	// hubmirror keeps its trusted prefix after a sampled check against the
	// NAS, flushed and marked with this pass's chunk before it writes on
	// (hubmirror.OpenTemp). (A copy that failed otherwise removed its
	// temp.)
	t, err := hubmirror.OpenTemp(d, name, nas, f.Size, p.job.Chunk)
	if err != nil {
		return received{}, err
	}
	if t.Resumed() > 0 {
		p.mu.Lock()
		p.res.Resumed += t.Resumed()
		p.mu.Unlock()
	}
	c := &receipt{p: p, f: f, t: t, out: t.File(), dst: d.Join(name), nas: nas, peer: peer, e: e}
	err = c.run(ctx, want)
	c.closeStream()
	if err != nil {
		p.mu.Lock()
		p.prog.BytesDone -= c.counted
		p.mu.Unlock()
	}
	// A cancel or kill leaves the fsynced chunks for a resume; content a
	// peer got wrong, or a torn copy, is not resumed from.
	t.Discard(err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()))
	return received{peer: c.used, sum: c.sum, sampled: c.got}, err
}

// receipt is one attempt at receiving a file into its temp file.
type receipt struct {
	p   *pass
	f   File
	t   *hubmirror.TempFile
	out *os.File // t's file
	dst string
	nas nasReader
	e   *entry // the registry's entry peers read, or nil
	// h hashes the whole file (the kept prefix re-read from the node's
	// disk, then every byte as it is written) when it is a
	// content-addressed blob: whatever the verify mode, a peer may have
	// read a torn source, and its bytes are confirmed by the name alone.
	h    hash.Hash
	sum  string // the sha256, once checked against f.WantSHA
	got  string // the written file's sampled hash, once checked
	peer string // the peer to fetch from, "" for the NAS
	used string // the peer any byte came from
	// counted is the bytes this receipt added to the pass's progress.
	counted int64
	// stream is the peer's response being read, nil while reading the NAS.
	stream io.ReadCloser
}

// run writes the file from the temp file's resumed end on, servable to
// peers chunk by chunk, checks it against the NAS and renames it into
// place.
func (c *receipt) run(ctx context.Context, want string) error {
	if c.e != nil {
		rf, err := c.t.Reader()
		if err != nil {
			return err
		}
		c.e.start(rf, c.t.Resumed())
	}
	if c.f.WantSHA != "" {
		c.h = sha256.New()
		if err := c.t.HashResumed(c.h); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
	}
	if err := c.chunks(ctx); err != nil {
		return err
	}
	if err := c.check(want); err != nil {
		return err
	}
	if err := c.t.Commit(c.f.Mode); err != nil {
		return err
	}
	if c.e != nil {
		c.e.done(nil)
	}
	if c.stream != nil {
		c.p.peerBack(c.peer) // it sent the file to its end, and it was right
	}
	return nil
}

// chunks copies the rest of the file a chunk at a time, each fdatasynced
// before the next is written (what the temp file's mark promises), then
// made servable and reported.
func (c *receipt) chunks(ctx context.Context) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	chunk := c.p.job.Chunk
	for off := c.t.Resumed(); off < c.f.Size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		// From the peer: at the start, or again at a chunk boundary once
		// a peer given up on may be tried again (it restarted).
		c.connect(ctx, off)
		// Chunks end on the chunk grid, also after resuming off it (all a
		// killed writer wrote): the mark trusts whole grid chunks.
		n := min(chunk-off%chunk, c.f.Size-off)
		if err := c.fill(ctx, off, n, *bp); err != nil {
			return err
		}
		if err := unix.Fdatasync(int(c.out.Fd())); err != nil {
			return staging.ClassifyWrite(c.dst, fmt.Errorf("fdatasync %s: %w", c.t.Path(), err))
		}
		off += n
		c.landed(off, n)
		c.dropBehind(off-n, n)
	}
	return nil
}

// dropBehind drops a chunk just written (and fdatasynced) from the page
// cache, with the NAS file's same range, while the pass stages beside a
// serving lane (a pacer is set): the engine beside it shares the memory
// the page cache takes (on a DGX Spark, the GPU's). A peer reading the
// chunk next reads it from the disk. Advice only; on a node serving
// nothing the chunk stays cached for the peers, as before.
func (c *receipt) dropBehind(off, n int64) {
	if c.p.job.Pacer == nil {
		return
	}
	_ = unix.Fadvise(int(c.out.Fd()), off, n, unix.FADV_DONTNEED)
	_ = unix.Fadvise(int(c.nas.src.Fd()), off, n, unix.FADV_DONTNEED)
}

// connect opens a stream from the peer at off when there is none and the
// peer may be asked.
func (c *receipt) connect(ctx context.Context, off int64) {
	if c.stream != nil || c.peer == "" || !c.p.peerOK(c.peer) {
		return
	}
	s, err := c.p.open(ctx, c.peer, c.f.Rel, off)
	if err != nil {
		c.p.giveUp(c.peer, err.Error(), false)
		return
	}
	c.stream = s
}

// fill writes [off, off+n) of the file through buf, hashing it when c.h
// is set.
func (c *receipt) fill(ctx context.Context, off, n int64, buf []byte) error {
	for w := int64(0); w < n; {
		m := min(int64(len(buf)), n-w)
		// Beside a serving lane, the bytes wait for the rate and the
		// memory floor before they are read (nil pacer: at once); a
		// peer's stream waits meanwhile (its stall timer runs only
		// inside a read).
		if err := c.p.job.Pacer.Wait(ctx, m); err != nil {
			return err
		}
		k, err := c.read(ctx, buf[:m], off+w)
		if err != nil {
			return err
		}
		if k == 0 {
			continue
		}
		if _, err := c.out.WriteAt(buf[:k], off+w); err != nil {
			return staging.ClassifyWrite(c.dst, fmt.Errorf("write %s at %d: %w", c.t.Path(), off+w, err))
		}
		if c.h != nil {
			c.h.Write(buf[:k])
		}
		w += int64(k)
		c.p.written.Add(int64(k))
	}
	return nil
}

// read reads the file's bytes at at into b: from the peer's stream while
// there is one (a stream that breaks is given up on, what it sent is
// kept, and the rest comes from the NAS), else all of b from the NAS.
func (c *receipt) read(ctx context.Context, b []byte, at int64) (int, error) {
	if c.stream == nil {
		k, err := c.nas.ReadAt(b, at)
		if k < len(b) {
			if err == nil || errors.Is(err, io.EOF) {
				// It shrank while it was copied.
				return k, &hubmirror.ChangedError{Path: c.f.Src, Why: fmt.Sprintf("it ended at offset %d of its %d bytes", at+int64(k), c.f.Size)}
			}
			return k, fmt.Errorf("relay: read NAS file %s at %d: %w", c.f.Src, at, err)
		}
		return k, nil
	}
	k, err := io.ReadFull(c.stream, b)
	if k > 0 {
		c.used = c.peer
		c.p.addPeer(c.peer, int64(k))
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		c.p.giveUp(c.peer, fmt.Sprintf("stream of %s ended at %d of %d bytes: %v", c.f.Rel, at+int64(k), c.f.Size, err), false)
		c.closeStream()
	}
	return k, nil
}

// landed makes the chunk ending at off, n bytes, servable and counts it.
func (c *receipt) landed(off, n int64) {
	if c.e != nil {
		c.e.advance(off)
	}
	c.p.mu.Lock()
	c.p.prog.BytesDone += n
	c.p.mu.Unlock()
	c.counted += n
	c.p.report(true)
	if c.p.job.OnChunk != nil {
		c.p.job.OnChunk(c.f.Rel, off)
	}
}

// check compares the written file with what it must be. A
// content-addressed blob whose bytes, as they were written, hash to its
// name is the blob, wherever they came from. Anything else is torn if the
// NAS file changed while it was received (its identity moved): a
// *hubmirror.ChangedError, and it is received again. Then a blob not
// hashing to its name, or a file whose samples differ from the NAS's
// taken before the receipt, is wrong: a peer's (badContent: fetched again
// from the NAS), else a corrupt NAS copy (refused), or, when part of it
// was kept from an earlier attempt or its samples differ, a NAS file that
// changed between the looks (received again).
func (c *receipt) check(want string) error {
	var hashed string
	if c.h != nil {
		hashed = hex.EncodeToString(c.h.Sum(nil))
	}
	named := c.f.WantSHA != "" && hashed == c.f.WantSHA
	if named {
		c.sum = hashed
	} else if err := c.nas.src.Unchanged(); err != nil {
		return err
	}
	if c.p.job.Pacer != nil {
		// Dropped behind: the samples are read back from the disk, only
		// them, without readahead around each (advice only).
		_ = unix.Fadvise(int(c.out.Fd()), 0, c.f.Size, unix.FADV_RANDOM)
	}
	got, err := ledger.SampleHash(c.out, c.f.Size)
	if err != nil {
		return fmt.Errorf("relay: sample %s: %w", c.t.Path(), err)
	}
	c.got = got
	var why string
	switch {
	case named:
		return nil
	case c.f.WantSHA != "":
		why = "sha256 " + hashed + " is not its name " + c.f.WantSHA
	case got != want:
		why = "sampled hash differs from the NAS's"
	default:
		return nil
	}
	switch {
	case c.used != "":
		return &badContent{why}
	case c.f.WantSHA != "" && c.t.Resumed() == 0:
		return hubmirror.RefuseCorrupt(c.dst, c.f.Src, c.f.WantSHA, hashed)
	}
	return &hubmirror.ChangedError{Path: c.f.Src, Why: why + " (the NAS file changed since it was sampled, or since the temp file's kept part was written)"}
}

// closeStream ends the peer's stream, if any.
func (c *receipt) closeStream() {
	if c.stream != nil {
		c.stream.Close()
		c.stream = nil
	}
}
