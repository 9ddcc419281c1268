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

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/hubmirror"
	"github.com/sparklane/sparklane/internal/ledger"
	"github.com/sparklane/sparklane/internal/staging"
)

var errShortSource = errors.New("source ended early")

var bufPool = sync.Pool{New: func() any { b := make([]byte, 4<<20); return &b }}

// badContent is a received file whose content a peer got wrong: the file
// is fetched again from the NAS and the peer is not asked again.
type badContent struct{ why string }

func (b *badContent) Error() string { return b.why }

// copy writes f to its temp name beside the final one, chunk by chunk
// (fdatasync, then servable), from peer when set and healthy, else from
// the NAS; checks it; renames it into place. It returns the peer any byte
// came from, and the file's sha256 when it was hashed and matched.
func (p *pass) copy(ctx context.Context, f File, d *staging.Dir, name string, nas nasReader, want, peer string, e *entry) (usedPeer, sum string, err error) {
	// A temp file beside dst is an earlier copy of this destination (a
	// killed or cancelled pass, this engine's or hubmirror's Stage's):
	// hubmirror keeps its trusted prefix after a sampled check against the
	// NAS, flushed and marked with this pass's chunk before it writes on
	// (hubmirror.OpenTemp). (A copy refused for bad content removed its
	// temp.)
	t, err := hubmirror.OpenTemp(d, name, nas, f.Size, p.job.Chunk)
	if err != nil {
		return "", "", err
	}
	if t.Resumed() > 0 {
		p.mu.Lock()
		p.res.Resumed += t.Resumed()
		p.mu.Unlock()
	}
	c := &receipt{p: p, f: f, t: t, out: t.File(), dst: d.Join(name), nas: nas, peer: peer, e: e}
	err = c.run(ctx, want)
	c.closeStream()
	// A cancel or kill leaves the fsynced chunks for a resume; content a
	// peer got wrong is not resumed from.
	var bad *badContent
	t.Discard(err != nil && ctx.Err() != nil && !errors.As(err, &bad))
	return c.used, c.sum, err
}

// receipt is one attempt at receiving a file into its temp file.
type receipt struct {
	p    *pass
	f    File
	t    *hubmirror.TempFile
	out  *os.File // t's file
	dst  string
	nas  nasReader
	e    *entry // the registry's entry peers read, or nil
	h    hash.Hash
	sum  string // the sha256, once checked against f.WantSHA
	peer string // the peer to fetch from, "" for the NAS
	used string // the peer any byte came from
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
	if c.p.job.SHA256 && c.f.WantSHA != "" {
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
	}
	return nil
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
				err = errShortSource
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
	c.p.report(true)
	if c.p.job.OnChunk != nil {
		c.p.job.OnChunk(c.f.Rel, off)
	}
}

// check compares the written file with the NAS: its samples with the
// NAS's taken before the copy, and its sha256 with the blob's name when
// hashed. Wrong content any peer sent is the peer's (badContent: fetched
// again from the NAS); from the NAS alone it is a corrupt NAS copy (a
// permanent fault) or a source that changed while it was copied.
func (c *receipt) check(want string) error {
	got, err := ledger.SampleHash(c.out, c.f.Size)
	if err != nil {
		return fmt.Errorf("relay: sample %s: %w", c.t.Path(), err)
	}
	var why string
	if got != want {
		why = "sampled hash differs from the NAS's"
	} else if c.h != nil {
		if c.sum = hex.EncodeToString(c.h.Sum(nil)); c.sum != c.f.WantSHA {
			why = "sha256 " + c.sum + " is not its name " + c.f.WantSHA
			c.sum = ""
		}
	}
	switch {
	case why == "":
		return nil
	case c.used != "":
		c.p.mu.Lock()
		c.p.prog.BytesDone -= c.f.Size
		c.p.mu.Unlock()
		return &badContent{why}
	case c.h != nil && got == want:
		return fault.Permanent(fault.ContentMismatch, fmt.Errorf("NAS file %s: %s: the NAS copy is corrupt, re-download it", c.f.Src, why))
	}
	return fmt.Errorf("relay: %s: copied content does not match the NAS file %s sampled before the copy (it changed while copying?): rerun", c.dst, c.f.Src)
}

// closeStream ends the peer's stream, if any.
func (c *receipt) closeStream() {
	if c.stream != nil {
		c.stream.Close()
		c.stream = nil
	}
}
