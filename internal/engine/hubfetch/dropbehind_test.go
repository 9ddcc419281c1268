package hubfetch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/pagecache"
)

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
			pagecache.RequireDiskBacked(t, cache)
			req := request(s, cache)
			if _, err := fetch(t, req); err != nil {
				t.Fatal(err)
			}
			page := int64(os.Getpagesize())
			for _, p := range []string{bigFile, "model-00002-of-00002.safetensors", "tokenizer.json"} {
				n := int64(len(want[p]))
				r := pagecache.Resident(t, filepath.Join(cache, "models--acme--tiny-llm", "blobs", s.ETag(testRepo, p)))
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
