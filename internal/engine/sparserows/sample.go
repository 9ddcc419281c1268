package sparserows

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// Block sampling: a block's sampled hash covers its length and
// sampleWindows windows of sampleWindow bytes spread evenly from its first
// to its last byte (a block no larger than the windows together is hashed
// whole). 64 KiB per 64 MiB block keeps a verify-only pass of a 4 GiB
// share to a few MiB of reads.
const (
	sampleWindow  = 4 << 10
	sampleWindows = 16
)

// sampleBlock hashes the sampled windows of r over [0, n).
func sampleBlock(r io.ReaderAt, n int64) (string, error) {
	h := sha256.New()
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(n))
	h.Write(lb[:])
	if n <= sampleWindow*sampleWindows {
		buf := make([]byte, n)
		if err := readFull(r, buf, 0); err != nil {
			return "", err
		}
		h.Write(buf)
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	buf := make([]byte, sampleWindow)
	span := n - sampleWindow
	for i := int64(0); i < sampleWindows; i++ {
		at := span * i / (sampleWindows - 1)
		if err := readFull(r, buf, at); err != nil {
			return "", err
		}
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// equalContent compares two readers over [0, n) byte for byte.
func equalContent(a, b io.ReaderAt, n int64) (bool, error) {
	const chunk = 8 << 20
	ba := make([]byte, min(n, chunk))
	bb := make([]byte, min(n, chunk))
	for off := int64(0); off < n; {
		c := min(n-off, chunk)
		if err := readFull(a, ba[:c], off); err != nil {
			return false, err
		}
		if err := readFull(b, bb[:c], off); err != nil {
			return false, err
		}
		if !bytes.Equal(ba[:c], bb[:c]) {
			return false, nil
		}
		off += c
	}
	return true, nil
}

func readFull(r io.ReaderAt, buf []byte, off int64) error {
	m, err := r.ReadAt(buf, off)
	if m == len(buf) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("short read at offset %d: got %d of %d bytes (file truncated?)", off, m, len(buf))
	}
	return err
}

// span is a byte range of one open file.
type span struct {
	f   *os.File
	off int64
	n   int64
}

// spanReader reads the concatenation of spans as one region starting at 0:
// a block's bytes in the source (possibly across part tensors and shards)
// or in the output.
type spanReader []span

func (s spanReader) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	for _, sp := range s {
		if len(p) == 0 {
			break
		}
		if off >= sp.n {
			off -= sp.n
			continue
		}
		c := min(int64(len(p)), sp.n-off)
		m, err := sp.f.ReadAt(p[:c], sp.off+off)
		done += m
		if int64(m) < c {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return done, fmt.Errorf("%s at offset %d: %w", sp.f.Name(), sp.off+off+int64(m), err)
		}
		p = p[c:]
		off = 0
	}
	if len(p) > 0 {
		return done, io.EOF
	}
	return done, nil
}
