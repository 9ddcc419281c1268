package hubfetch

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident is how many bytes of path are in the page cache (mincore).
func resident(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if fi.Size() == 0 {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore %s: %v", path, e)
	}
	var n int64
	for _, v := range vec {
		if v&1 != 0 {
			n += int64(page)
		}
	}
	return n
}

// TestDownloadsLeaveThePageCache: with drop-behind, a fetched blob (one
// stream or ranges) leaves none of its bytes in the page cache; without,
// nearly all of them stay. Read off the kernel's page-cache residency
// (mincore) of real files on a disk-backed filesystem.
func TestDownloadsLeaveThePageCache(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[on], func(t *testing.T) {
			defer func(old bool) { dropBehindOn = old }(dropBehindOn)
			dropBehindOn = on
			want := fixture()
			s, _ := serve(t, want)
			cache := t.TempDir()
			var st unix.Statfs_t
			if err := unix.Statfs(cache, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
				t.Fatalf("%s is on tmpfs (%v), whose pages never leave the page cache: point TMPDIR at a disk-backed filesystem", cache, err)
			}
			req := request(s, cache)
			if _, err := fetch(t, req); err != nil {
				t.Fatal(err)
			}
			page := int64(os.Getpagesize())
			for _, p := range []string{bigFile, "model-00002-of-00002.safetensors", "tokenizer.json"} {
				n := int64(len(want[p]))
				r := resident(t, filepath.Join(cache, "models--acme--tiny-llm", "blobs", s.ETag(testRepo, p)))
				if on && r > page {
					t.Fatalf("drop-behind on: %d of %s's %d bytes left in the page cache", r, p, n)
				}
				if !on && r < n/2 {
					t.Fatalf("drop-behind off: only %d of %s's %d bytes in the page cache (else the on case shows nothing)", r, p, n)
				}
			}
		})
	}
}
