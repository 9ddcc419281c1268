package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
)

// content is one file's bytes as the Hub stores them: given, or generated
// from a seed on demand (counter-mode, so any range is cheap to produce).
type content struct {
	data []byte // nil: generated
	size int64
	seed uint64

	lfs     bool
	sha256  string // hex, of the content
	gitSHA1 string // hex, git blob id of what git stores (the content, or the LFS pointer)
	pointer []byte // the LFS pointer file git stores, for LFS files
}

// key is the content's identity on the Hub: its ETag in the cache layout
// (sha256 for LFS, git blob sha1 otherwise).
func (c *content) key() string {
	if c.lfs {
		return c.sha256
	}
	return c.gitSHA1
}

func newContent(f File, lfs bool) *content {
	c := &content{data: f.Data, size: f.Size, seed: f.Seed, lfs: lfs}
	if f.Data != nil {
		c.size = int64(len(f.Data))
	}
	h256 := sha256.New()
	g := sha1.New()
	fmt.Fprintf(g, "blob %d\x00", c.size)
	w := io.Writer(h256)
	if !lfs {
		w = io.MultiWriter(h256, g)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < c.size; {
		n := min(int64(len(buf)), c.size-off)
		c.readAt(buf[:n], off)
		w.Write(buf[:n])
		off += n
	}
	c.sha256 = hex.EncodeToString(h256.Sum(nil))
	if lfs {
		// What git stores for an LFS file is the pointer (git-lfs spec v1);
		// its blob id is the sibling's blobId.
		c.pointer = fmt.Appendf(nil, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", c.sha256, c.size)
		g = sha1.New()
		fmt.Fprintf(g, "blob %d\x00", len(c.pointer))
		g.Write(c.pointer)
	}
	c.gitSHA1 = hex.EncodeToString(g.Sum(nil))
	return c
}

// readAt fills p with the content at off (p must lie within the content).
func (c *content) readAt(p []byte, off int64) {
	if c.data != nil {
		copy(p, c.data[off:])
		return
	}
	generate(c.seed, p, off)
}

// generate writes the seeded stream's bytes [off, off+len(p)): word i of
// the stream is splitmix64(seed + i·γ), little endian.
func generate(seed uint64, p []byte, off int64) {
	var w [8]byte
	if r := off % 8; r != 0 {
		binary.LittleEndian.PutUint64(w[:], mix(seed, uint64(off/8)))
		n := copy(p, w[r:])
		p, off = p[n:], off+int64(n)
	}
	i := uint64(off / 8)
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, mix(seed, i))
		p, i = p[8:], i+1
	}
	if len(p) > 0 {
		binary.LittleEndian.PutUint64(w[:], mix(seed, i))
		copy(p, w[:])
	}
}

func mix(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
