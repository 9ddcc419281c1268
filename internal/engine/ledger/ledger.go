package ledger

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// Sampling shape. A region is hashed as: its length, then head, tail and
// SpreadSamples evenly spaced windows. Regions smaller than the samples
// together are hashed whole.
const (
	HeadBytes     = 1 << 20
	TailBytes     = 1 << 20
	SpreadSamples = 16
	SpreadBytes   = 64 << 10
)

// SampleHash hashes the sampled regions of r over [0, size).
func SampleHash(r io.ReaderAt, size int64) (string, error) {
	return SampleRegion(r, 0, size)
}

// SampledBytes is how many bytes SampleRegion reads for a region of n bytes.
func SampledBytes(n int64) int64 {
	if n <= HeadBytes+TailBytes+SpreadSamples*SpreadBytes {
		return n
	}
	return HeadBytes + TailBytes + SpreadSamples*SpreadBytes
}

// sampleBufs holds SampleRegion's read buffers: a verify pass over
// thousands of small files samples each twice, and a fresh 256 KiB buffer
// per call made the garbage collector the pass's main cost.
var sampleBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// SampleRegion hashes the sampled regions of r over [off, off+n).
func SampleRegion(r io.ReaderAt, off, n int64) (string, error) {
	h := sha256.New()
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(n))
	h.Write(lenBuf[:])
	bp := sampleBufs.Get().(*[]byte)
	defer sampleBufs.Put(bp)
	buf := *bp
	read := func(at, count int64) error {
		for count > 0 {
			c := int64(len(buf))
			if c > count {
				c = count
			}
			m, err := r.ReadAt(buf[:c], at)
			h.Write(buf[:m])
			if int64(m) < c {
				if err == nil || errors.Is(err, io.EOF) {
					return fmt.Errorf("short read at offset %d: got %d of %d bytes", at, m, c)
				}
				return err
			}
			at += c
			count -= c
		}
		return nil
	}
	if n <= HeadBytes+TailBytes+SpreadSamples*SpreadBytes {
		if err := read(off, n); err != nil {
			return "", err
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	if err := read(off, HeadBytes); err != nil {
		return "", err
	}
	mid := n - HeadBytes - TailBytes
	step := mid / SpreadSamples
	for i := int64(0); i < SpreadSamples; i++ {
		at := off + HeadBytes + i*step + (step-SpreadBytes)/2
		if err := read(at, SpreadBytes); err != nil {
			return "", err
		}
	}
	if err := read(off+n-TailBytes, TailBytes); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// SampleBytes is SampleHash of data held in memory (a small file read
// whole), hashed in place.
func SampleBytes(data []byte) string {
	n := int64(len(data))
	if n <= HeadBytes+TailBytes+SpreadSamples*SpreadBytes {
		h := sha256.New()
		var lenBuf [8]byte
		binary.LittleEndian.PutUint64(lenBuf[:], uint64(n))
		h.Write(lenBuf[:])
		h.Write(data)
		return hex.EncodeToString(h.Sum(nil))
	}
	sum, _ := SampleRegion(bytes.NewReader(data), 0, n) // cannot fail in memory
	return sum
}

// SampleFile opens path and hashes its sampled regions.
func SampleFile(path string) (size int64, sum string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	sum, err = SampleHash(f, st.Size())
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", path, err)
	}
	return st.Size(), sum, nil
}

// Entry is what the ledger knows of one file or block.
type Entry struct {
	Size    int64  `json:"size"`
	Sampled string `json:"sampled"`
	// SHA256 is the full content hash when verify = "sha256" computed it.
	SHA256 string `json:"sha256,omitempty"`
	// Source identifies what the entry was made from (a source path, a
	// tensor and row range), so a changed source invalidates it.
	Source     string    `json:"source,omitempty"`
	VerifiedAt time.Time `json:"verified_at"`
	// Seal, when set, is the staged file's identity on the node's own
	// filesystem at the moment its whole content was last proved: see Seal.
	Seal *Seal `json:"seal,omitempty"`
}

// Seal is a staged file's identity (device, inode, mtime and ctime in ns)
// recorded when its whole content was proved against its content-addressed
// name. A later pass that finds the same identity knows the content has not
// changed since: ctime cannot be set from user space, and every write,
// truncate, chmod or rename moves it. It is the node's own local
// filesystem's word, never the NAS's (NFS lies about mtime and size), and
// it is recorded only when the ctime is older than the look by a margin, so
// a change in the same timestamp tick cannot hide (git's "racy clean").
type Seal struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	MtimeNS int64  `json:"mtime_ns"`
	CtimeNS int64  `json:"ctime_ns"`
}

// LinkSeal is a symlink's target and its identity when the target was read.
type LinkSeal struct {
	Target string `json:"target"`
	Seal
}

// SealOf is the identity of st.
func SealOf(st unix.Stat_t) Seal {
	return Seal{Dev: uint64(st.Dev), Ino: st.Ino, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()}
}

// Matches reports whether st has this identity.
func (s *Seal) Matches(st unix.Stat_t) bool {
	return s != nil && *s == SealOf(st)
}

// Ledger is the file kept in a staging dst.
type Ledger struct {
	Version   int              `json:"version"`
	Kind      string           `json:"kind"`
	UpdatedAt time.Time        `json:"updated_at"`
	Entries   map[string]Entry `json:"entries"`
	// Links seals the symlinks a mirror made (by path): a symlink's text
	// cannot be changed in place, so the same identity means the same
	// target, and a pass checks the link with an lstat instead of reading
	// it (on a cold tree, one random read each).
	Links map[string]LinkSeal `json:"links,omitempty"`
}

// Version is the ledger file format version.
const Version = 1

// New returns an empty ledger of the given kind.
func New(kind string) *Ledger {
	return &Ledger{Version: Version, Kind: kind, Entries: map[string]Entry{}}
}

// Load reads a ledger; a missing file is an empty ledger, a corrupt one an
// error naming the file (staging then rebuilds by adoption, not by trust).
func Load(path, kind string) (*Ledger, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return New(kind), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger %s: %w", path, err)
	}
	return decode(b, path, kind)
}

// decode parses the ledger file path held b, refusing a corrupt one or one
// of another format version (staging then rebuilds by adoption). The
// ledger it returns keeps b (decodeFast): b must not change afterwards.
func decode(b []byte, path, kind string) (*Ledger, error) {
	l := New(kind)
	if !decodeFast(b, l) {
		l = New(kind)
		if err := json.Unmarshal(b, l); err != nil {
			return nil, fmt.Errorf("ledger %s is not valid JSON (%v): delete it to re-verify the tree from scratch", path, err)
		}
	}
	if l.Version != Version {
		return nil, fmt.Errorf("ledger %s has version %d, this sparklane reads %d: delete it to re-verify", path, l.Version, Version)
	}
	if l.Entries == nil {
		l.Entries = map[string]Entry{}
	}
	return l, nil
}

// Save writes the ledger atomically: temp file in the same dir, fsync, rename.
// It is compact JSON (jq reads it): a mirror of 10,000 files has a ledger
// of megabytes that every pass loads.
func (l *Ledger) Save(path string) error {
	b, err := l.encode()
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o644)
}

// encode stamps the ledger with the time it is saved and marshals it.
func (l *Ledger) encode() ([]byte, error) {
	l.UpdatedAt = time.Now().UTC()
	return json.Marshal(l)
}

// LoadIn is Load for the ledger file name inside d, a staging directory
// opened beneath the node's root: a ledger that is a symlink is not
// followed (it reads as corrupt and is rebuilt by adoption).
func LoadIn(d *staging.Dir, name, kind string) (*Ledger, error) {
	b, err := d.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return New(kind), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger %s: %w", d.Join(name), err)
	}
	return decode(b, d.Join(name), kind)
}

// SaveIn is Save for the ledger file name inside d (beneath the node's root).
func (l *Ledger) SaveIn(d *staging.Dir, name string) error {
	b, err := l.encode()
	if err != nil {
		return err
	}
	return WriteFileAtomicIn(d, name, b, 0o644)
}

// WriteFileAtomicIn is WriteFileAtomic for name inside d: the temp file is
// created exclusively (never through a link) beside it, fsynced and renamed
// over name, and d is fsynced; nothing is written outside d.
func WriteFileAtomicIn(d *staging.Dir, name string, data []byte, perm os.FileMode) error {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + name + ".tmp-" + fmt.Sprintf("%x", rnd)
	f, err := d.OpenFile(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return staging.ClassifyWrite(d.Join(name), fmt.Errorf("write %s: %w", d.Join(name), err))
	}
	if op, err := atomicfile.Fill(f, data, perm); err != nil {
		d.Remove(tmp)
		return staging.ClassifyWrite(d.Join(name), fmt.Errorf("%s %s: %w", op, d.Join(name), err))
	}
	if err := d.Rename(tmp, name); err != nil {
		d.Remove(tmp)
		return staging.ClassifyWrite(d.Join(name), fmt.Errorf("rename into %s: %w", d.Join(name), err))
	}
	_ = d.Sync()
	return nil
}
