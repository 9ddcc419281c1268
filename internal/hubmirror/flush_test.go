package hubmirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/staging"
)

// The flush trails the copy by exactly one chunk: while chunk k's
// fdatasync is held, chunk k+1 is written (the copy goes on) and chunk k+2
// is not begun (so every chunk before a temp file's last two is durable,
// which is all durablePrefix trusts). The double of fdatasync holds each
// flush until the test has looked at the temp file; in a synctest bubble,
// synctest.Wait returns once the copier is blocked on that flush.
func TestFlushTrailsTheCopyByOneChunk(t *testing.T) {
	defer SetChunkSize(256 << 10)() // the file must be over smallMax
	f := newFixture(t, false)
	big := testData(41, 6*int(chunkSize)+123) // 7 chunks, the last short
	sum := f.repo.blob(big, false)
	f.repo.link(rev1, "big.bin", sum)
	sp := f.spec()
	type flush struct {
		fd      int
		release chan error
	}
	synctest.Test(t, func(t *testing.T) {
		calls := make(chan flush)
		old := fdatasync
		fdatasync = func(fd int) error {
			c := flush{fd, make(chan error)}
			calls <- c
			return <-c.release
		}
		defer func() { fdatasync = old }()
		done := make(chan error, 1)
		go func() {
			_, err := Stage(context.Background(), sp, staging.Options{Parallel: 1})
			done <- err
		}()
		n := 0
		for {
			select {
			case c := <-calls:
				n++
				synctest.Wait()
				// Errors are reported and the flush released all the same,
				// so the Stage ends and the bubble with it.
				var st unix.Stat_t
				if err := unix.Fstat(c.fd, &st); err != nil {
					t.Errorf("flush %d: fstat: %v", n, err)
				} else if want := min(int64(n+1)*chunkSize, int64(len(big))); st.Size != want {
					t.Errorf("flush %d held (through byte %d): the temp file holds %d bytes, want %d (the next chunk written, nothing after it)", n, int64(n)*chunkSize, st.Size, want)
				}
				c.release <- nil
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				if n != 7 {
					t.Fatalf("%d chunk flushes, want 7 (one per chunk)", n)
				}
				fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, "big.bin"), big)
				return
			}
		}
	})
}

// durablePrefix trusts every chunk before the last two.
func TestDurablePrefix(t *testing.T) {
	const c = 100
	for _, tc := range []struct{ size, want int64 }{
		{0, 0}, {1, 0}, {100, 0}, {101, 0}, {200, 0}, {201, 100}, {300, 100}, {301, 200}, {350, 200},
	} {
		if got := durablePrefix(tc.size, c); got != tc.want {
			t.Errorf("durablePrefix(%d, %d) = %d, want %d", tc.size, c, got, tc.want)
		}
	}
}

// A temp file is resumed by who wrote it: one the relay's receiver marked
// (every chunk fdatasynced before the next) up to the chunk holding its
// last byte, by the chunk size its mark gives; an unmarked one, this
// engine's, up to the chunk before its last two. The mark is dropped before
// this engine writes on, so the staged file carries none.
func TestResumeTrustsATempFileByItsWriter(t *testing.T) {
	defer SetChunkSize(256 << 10)()
	c := chunkSize
	for _, tc := range []struct {
		name string
		mark int64 // 0: none
		want int64 // bytes kept
	}{
		{"a receiver's", c, 3 * c},
		{"this engine's", 0, 2 * c},
		{"marked with a larger chunk", 2 * c, 2 * c},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			big := testData(43, 6*int(c)+123)
			sum := f.repo.blob(big, false)
			f.repo.link(rev1, "big.bin", sum)
			tmp := tmpName(filepath.Join(f.dst, "hub", "models--org--model", "blobs", sum))
			must(t, os.MkdirAll(filepath.Dir(tmp), 0o755))
			must(t, os.WriteFile(tmp, big[:3*c+c/2], 0o600))
			if tc.mark > 0 {
				must(t, unix.Setxattr(tmp, SyncedChunkXattr, []byte(strconv.FormatInt(tc.mark, 10)), 0))
			}
			res, err := Stage(context.Background(), f.spec(), staging.Options{Parallel: 1})
			must(t, err)
			staged := filepath.Join(f.mirrorRepo(), "snapshots", rev1, "big.bin")
			fileEquals(t, staged, big)
			// Every file of the repo is copied but for the kept prefix.
			if want := res.TotalBytes - tc.want; res.CopiedBytes != want {
				t.Errorf("copied %d bytes of %d, want %d (all but the %d kept)", res.CopiedBytes, res.TotalBytes, want, tc.want)
			}
			if _, err := unix.Getxattr(staged, SyncedChunkXattr, nil); err == nil {
				t.Errorf("the staged file kept the temp file's mark %s", SyncedChunkXattr)
			}
		})
	}
}

// A failing flush fails the file: the error names the temp file, nothing
// is staged under the file's name and no temp file is left.
func TestFailedFlushStagesNothing(t *testing.T) {
	defer SetChunkSize(256 << 10)()
	f := newFixture(t, false)
	big := testData(47, 6*int(chunkSize)+123)
	sum := f.repo.blob(big, false)
	f.repo.link(rev1, "big.bin", sum)
	old := fdatasync
	calls := 0
	fdatasync = func(fd int) error {
		calls++
		if calls == 2 {
			return unix.EIO
		}
		return old(fd)
	}
	defer func() { fdatasync = old }()
	_, err := Stage(context.Background(), f.spec(), staging.Options{Parallel: 1})
	if err == nil || !strings.Contains(err.Error(), "fdatasync") || !strings.Contains(err.Error(), tmpBase(sum)) || !errors.Is(err, unix.EIO) {
		t.Fatalf("stage with a failing flush: %v; want an error naming the fdatasync of %s", err, tmpBase(sum))
	}
	blob := filepath.Join(f.mirrorRepo(), "blobs", sum)
	if _, err := os.Lstat(blob); err == nil {
		t.Errorf("%s was staged after its flush failed", blob)
	}
	if left := tmpLeft(t, f.dst); len(left) != 0 {
		t.Errorf("temp files left after a failed copy: %v", left)
	}
}
