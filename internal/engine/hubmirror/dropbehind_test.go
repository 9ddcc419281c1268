package hubmirror

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/testkit/pagecache"
)

// With the drop-behind on, a copied file leaves only its sampled regions
// in the page cache, on both sides (the post-copy check reads the copy's
// samples back from the disk); with it off, the whole copy stays there.
// Read off the kernel's own page-cache residency (mincore), on real files.
func TestCopiedChunksLeaveThePageCache(t *testing.T) {
	defer SetChunkSize(256 << 10)()
	const size = 64*256<<10 + 77 // 64 chunks and a bit: 16 MiB
	// The sampled regions (head, tail, spread samples), each rounded out
	// to whole pages: what a stage reads after the copy, or keeps of it.
	page := int64(os.Getpagesize())
	samples := int64(ledger.HeadBytes + ledger.TailBytes + ledger.SpreadSamples*ledger.SpreadBytes)
	bound := samples + (2+ledger.SpreadSamples)*2*page
	for _, on := range []bool{true, false} {
		name := map[bool]string{true: "on", false: "off"}[on]
		t.Run(name, func(t *testing.T) {
			defer SetDropBehind(on)()
			f := newFixture(t, false)
			pagecache.RequireDiskBacked(t, f.root)
			big := testData(61, size)
			sum := f.repo.blob(big, false)
			f.repo.link(rev1, "big.bin", sum)
			src := filepath.Join(f.repo.dir, "blobs", sum)
			// The fixture just wrote the source: start with none of it cached.
			sf, err := os.Open(src)
			must(t, err)
			must(t, unix.Fdatasync(int(sf.Fd())))
			must(t, unix.Fadvise(int(sf.Fd()), 0, 0, unix.FADV_DONTNEED))
			sf.Close()
			if r := pagecache.Resident(t, src); r > bound {
				t.Fatalf("the source has %d bytes cached before the stage, after dropping them", r)
			}
			_, err = Stage(context.Background(), f.spec(), staging.Options{Parallel: 1})
			must(t, err)
			// Counted before the copy is read back to compare it.
			rs, rd := pagecache.Resident(t, src), pagecache.Resident(t, filepath.Join(f.mirrorRepo(), "blobs", sum))
			fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, "big.bin"), big)
			if on {
				if rs > bound || rd > bound {
					t.Fatalf("drop-behind on: %d bytes of the source and %d of the copy left in the page cache, want at most the samples' %d", rs, rd, bound)
				}
			} else if rs < size-bound || rd < size-bound {
				t.Fatalf("drop-behind off: %d bytes of the source and %d of the copy in the page cache, want nearly all %d (else the on case shows nothing)", rs, rd, size)
			}
		})
	}
}
