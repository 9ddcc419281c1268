package hubmirror

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"sync"
)

// hashBeside hashes a copy's temp file as the copy writes it, on its own
// goroutine: each chunk, once written, is read back from the temp file
// (from the page cache the write left) and hashed while the copier copies
// the next one and waits for the chunk before it to reach the disk. What
// is hashed is what the file holds, in order, from its first byte (the
// part kept from an earlier writer too, read from the node's disk), and
// the copy itself stays what it was (copy_file_range where the kernel
// does it). A chunk is dropped from the page cache (dropBehind) only once
// it is hashed (wait).
//
// Measured against hashing each 4 MiB buffer of a pread/pwrite copy
// (before its write, or beside it on a goroutine), on the shared 2-core
// VM with SHA-NI: see the README.
type hashBeside struct {
	f     *os.File
	h     hash.Hash
	spans chan [2]int64 // [off, end) to hash, in order
	done  chan struct{}

	mu   sync.Mutex
	cond *sync.Cond
	upTo int64 // bytes hashed, from the file's start
	err  error
}

// newHashBeside starts hashing the temp file f, whose first kept bytes
// (an earlier writer's, 0 for none) are hashed first.
func newHashBeside(f *os.File, kept int64) *hashBeside {
	s := &hashBeside{f: f, h: sha256.New(), spans: make(chan [2]int64, 4), done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	if kept > 0 {
		s.spans <- [2]int64{0, kept}
	}
	return s
}

// run hashes the spans handed over, in order, until they end.
func (s *hashBeside) run() {
	defer close(s.done)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for sp := range s.spans {
		for off := sp[0]; off < sp[1] && s.failed() == nil; {
			n := min(int64(len(buf)), sp[1]-off)
			m, err := readFull(s.f, buf[:n], off)
			if err != nil {
				s.fail(fmt.Errorf("read back %s at %d to hash it: %w", s.f.Name(), off, err))
				break
			}
			s.h.Write(buf[:m])
			off += int64(m)
			s.mu.Lock()
			s.upTo = off
			s.cond.Broadcast()
			s.mu.Unlock()
		}
	}
}

func (s *hashBeside) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *hashBeside) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.cond.Broadcast()
	s.mu.Unlock()
}

// add hands over [off, end), written just now after everything handed
// over before it.
func (s *hashBeside) add(off, end int64) { s.spans <- [2]int64{off, end} }

// wait returns once the first end bytes are hashed (or hashing failed).
func (s *hashBeside) wait(end int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.upTo < end && s.err == nil {
		s.cond.Wait()
	}
	return s.err
}

// sum waits for everything handed over and returns its sha256 in hex. It
// ends the hashing: call it once.
func (s *hashBeside) sum() (string, error) {
	s.close()
	if err := s.failed(); err != nil {
		return "", err
	}
	return hex.EncodeToString(s.h.Sum(nil)), nil
}

// abandon ends the hashing of a copy that failed, without hashing what
// is left; it does nothing after sum.
func (s *hashBeside) abandon() {
	if s.spans != nil {
		s.fail(errAbandoned)
		s.close()
	}
}

var errAbandoned = errors.New("copy abandoned")

// close ends the hashing goroutine once what was handed over is hashed
// (or hashing failed); it does nothing after sum.
func (s *hashBeside) close() {
	if s.spans == nil {
		return
	}
	close(s.spans)
	<-s.done
	s.spans = nil
}
