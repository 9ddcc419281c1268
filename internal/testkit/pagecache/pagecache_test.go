package pagecache

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A file just written is in the page cache; after fdatasync and
// FADV_DONTNEED it is not; an empty file has nothing to count.
func TestResident(t *testing.T) {
	dir := t.TempDir()
	RequireDiskBacked(t, dir)
	p := filepath.Join(dir, "f")
	const size = 1 << 20
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := Resident(t, p); r < size/2 {
		t.Fatalf("%d of %d bytes just written are resident", r, size)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if r := Resident(t, p); r > int64(os.Getpagesize()) {
		t.Fatalf("%d bytes resident after dropping them", r)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := Resident(t, empty); r != 0 {
		t.Fatalf("an empty file has %d bytes resident", r)
	}
}
