package loopfs

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// Fill writes a file at path until the filesystem holding it is full (a
// write fails with ENOSPC) and returns its size: a real full disk, for a
// test that must see a writer run out of space.
func Fill(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	var n int64
	for {
		m, err := f.Write(buf)
		n += int64(m)
		if errors.Is(err, syscall.ENOSPC) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// WriteFile writes n bytes to path (real blocks, not a hole) and fsyncs
// them: it takes n bytes of the filesystem's free space.
func WriteFile(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for i := range buf {
		buf[i] = 0xa5
	}
	for n > 0 {
		m, err := f.Write(buf[:min(int64(len(buf)), n)])
		if err != nil {
			t.Fatalf("loopfs: write %s: %v", path, err)
		}
		n -= int64(m)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}
