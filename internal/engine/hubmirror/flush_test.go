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

	"github.com/sparklane/sparklane/internal/engine/staging"
)

// The flush trails the copy by exactly one flush interval: while interval
// k's fdatasync is held, interval k+1 is written (the copy goes on) and
// interval k+2 is not begun. So at every held flush, what a resume after a
// reboot would trust of the temp file (durablePrefix) is durable already:
// the resumed prefix and the flushes released. That holds too when the
// copy resumed a receiver's temp file at an offset off Stage's chunk grid:
// the first chunk then ends on the grid, and so the flushes on theirs. The
// double of fdatasync holds each flush until the test has looked at the
// temp file; in a synctest bubble, synctest.Wait returns once the copier is
// blocked on that flush.
func TestFlushTrailsTheCopyByOneInterval(t *testing.T) {
	defer SetChunkSize(256 << 10)() // the file must be over smallMax
	c := chunkSize
	for _, tc := range []struct {
		name  string
		every int64 // flush interval in chunks
		// resumed: the receiver's temp file (marked with c/2) holds this
		// many bytes, of which 1.5 chunks are kept; 0: a fresh copy.
		resumed int64
		// ends are the temp file's sizes at each held flush.
		ends []int64
	}{
		{"fresh", 1, 0, []int64{2 * c, 3 * c, 4 * c, 5 * c, 6 * c, 6*c + 123, 6*c + 123}},
		{"resumed off the grid", 1, c + 3*c/4, []int64{3 * c, 4 * c, 5 * c, 6 * c, 6*c + 123, 6*c + 123}},
		{"fresh, two chunks a flush", 2, 0, []int64{4 * c, 6 * c, 6*c + 123, 6*c + 123}},
		{"resumed off the grid, two chunks a flush", 2, c + 3*c/4, []int64{4 * c, 6 * c, 6*c + 123, 6*c + 123}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer SetFlushChunks(tc.every)()
			f := newFixture(t, false)
			big := testData(41, 6*int(c)+123) // 7 chunks, the last short
			sum := f.repo.blob(big, false)
			f.repo.link(rev1, "big.bin", sum)
			durable := int64(0)
			if tc.resumed > 0 {
				tmp := tmpName(filepath.Join(f.dst, "hub", "models--org--model", "blobs", sum))
				must(t, os.MkdirAll(filepath.Dir(tmp), 0o755))
				must(t, os.WriteFile(tmp, big[:tc.resumed], 0o600))
				must(t, unix.Setxattr(tmp, SyncedChunkXattr, []byte(strconv.FormatInt(c/2, 10)), 0))
				durable = (tc.resumed - 1) / (c / 2) * (c / 2)
			}
			flushes := 0
			holdEveryFlush(t, f.spec(), func(n int, end, size int64) {
				flushes = n
				if n > len(tc.ends) || size != tc.ends[n-1] {
					t.Errorf("flush %d held (through byte %d): the temp file holds %d bytes, want %v[%d] (the next chunk written, nothing after it)", n, end, size, tc.ends, n-1)
				}
				if dp := durablePrefix(size, flushSize()); dp > durable {
					t.Errorf("flush %d held: a resume would trust %d bytes of the temp file's %d, but only %d are flushed", n, dp, size, durable)
				}
				durable = end
			})
			fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, "big.bin"), big)
			if durable != int64(len(big)) {
				t.Errorf("the last flush ended at %d, want %d", durable, len(big))
			}
			if flushes != len(tc.ends) {
				t.Errorf("%d flushes, want %d (one per interval copied, one at the end)", flushes, len(tc.ends))
			}
		})
	}
}

// holdEveryFlush stages sp in a synctest bubble, holding each fdatasync of
// the chunked copy until the copier is blocked on it, then calls held with
// the flush's count, the bytes it makes durable (the temp file's size when
// it began) and the temp file's size now; then releases it.
func holdEveryFlush(t *testing.T, sp Spec, held func(n int, end, size int64)) {
	type flush struct {
		end     int64
		fd      int
		release chan error
	}
	synctest.Test(t, func(t *testing.T) {
		calls := make(chan flush)
		old := fdatasync
		fdatasync = func(fd int) error {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return err
			}
			c := flush{st.Size, fd, make(chan error)}
			calls <- c
			return <-c.release
		}
		defer func() { fdatasync = old }()
		done := make(chan error, 1)
		go func() {
			_, err := Stage(context.Background(), sp, staging.Options{Parallel: 1})
			done <- err
		}()
		for n := 1; ; n++ {
			select {
			case c := <-calls:
				synctest.Wait()
				// Errors are reported and the flush released all the same,
				// so the Stage ends and the bubble with it.
				var st unix.Stat_t
				if err := unix.Fstat(c.fd, &st); err != nil {
					t.Errorf("flush %d: fstat: %v", n, err)
				} else {
					held(n, c.end, st.Size)
				}
				c.release <- nil
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
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

// A temp file is resumed by when and by whom it was written. Written in
// this boot (BootXattr): all of it, whoever wrote it. Else (a reboot since,
// which the test stands in for with another boot id, or no boot mark): one
// the relay's receiver marked (every chunk fdatasynced before the next) up
// to the chunk holding its last byte, by the chunk size its mark gives; an
// unmarked one, this engine's, up to the flush interval before its last
// two. The marks are dropped before the file is staged, so the staged file
// carries none.
func TestResumeTrustsATempFileByItsWriter(t *testing.T) {
	defer SetChunkSize(256 << 10)()
	defer SetFlushChunks(1)()
	c := chunkSize
	if bootID() == "" {
		t.Fatal("no boot id from /proc/sys/kernel/random/boot_id: the same-boot resume cannot be tested")
	}
	for _, tc := range []struct {
		name string
		mark int64  // 0: none
		boot string // the boot mark: "" none, "this", or another boot's id
		want int64  // bytes kept
	}{
		{"a receiver's", c, "", 3 * c},
		{"this engine's", 0, "", 2 * c},
		{"marked with a larger chunk", 2 * c, "", 2 * c},
		{"this engine's, this boot", 0, "this", 3*c + c/2},
		{"a receiver's, this boot", c, "this", 3*c + c/2},
		{"this engine's, before a reboot", 0, otherBoot, 2 * c},
		{"a receiver's, before a reboot", c, otherBoot, 3 * c},
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
			switch tc.boot {
			case "":
			case "this":
				must(t, unix.Setxattr(tmp, BootXattr, []byte(bootID()), 0))
			default:
				must(t, unix.Setxattr(tmp, BootXattr, []byte(tc.boot), 0))
			}
			res, err := Stage(context.Background(), f.spec(), staging.Options{Parallel: 1})
			must(t, err)
			staged := filepath.Join(f.mirrorRepo(), "snapshots", rev1, "big.bin")
			fileEquals(t, staged, big)
			// Every file of the repo is copied but for the kept prefix.
			if want := res.TotalBytes - tc.want; res.CopiedBytes != want {
				t.Errorf("copied %d bytes of %d, want %d (all but the %d kept)", res.CopiedBytes, res.TotalBytes, want, tc.want)
			}
			for _, x := range []string{SyncedChunkXattr, BootXattr} {
				if _, err := unix.Getxattr(staged, x, nil); err == nil {
					t.Errorf("the staged file kept the temp file's mark %s", x)
				}
			}
		})
	}
}

// A failing flush fails the file: the error names the temp file, nothing
// is staged under the file's name and no temp file is left.
func TestFailedFlushStagesNothing(t *testing.T) {
	defer SetChunkSize(256 << 10)()
	defer SetFlushChunks(1)()
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

// Every chunk of the temp file is handed to writeback (sync_file_range,
// SYNC_FILE_RANGE_WRITE) as soon as it is copied, once, in order, from
// where the copy starts (after a resumed prefix too) to the end; with the
// write-behind off, none is.
func TestEveryChunkIsHandedToWritebackAsItIsCopied(t *testing.T) {
	defer SetChunkSize(256 << 10)() // the file must be over smallMax
	c := chunkSize
	type call struct {
		path   string
		off, n int64
		flags  int
	}
	for _, tc := range []struct {
		name    string
		on      bool
		resumed int64 // bytes of a temp file left by a killed writer in this boot
		want    []int64
	}{
		{"fresh", true, 0, []int64{0, c, 2 * c, 3 * c, 4 * c, 5 * c, 5*c + 77}},
		{"resumed off the grid", true, c + c/3, []int64{c + c/3, 2 * c, 3 * c, 4 * c, 5 * c, 5*c + 77}},
		{"off", false, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer SetWriteBehind(tc.on)()
			var calls []call
			old := syncFileRange
			syncFileRange = func(fd int, off, n int64, flags int) error {
				p, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
				calls = append(calls, call{p, off, n, flags})
				return old(fd, off, n, flags)
			}
			defer func() { syncFileRange = old }()
			f := newFixture(t, false)
			big := testData(43, 5*int(c)+77) // over smallMax: copied in chunks
			sum := f.repo.blob(big, false)
			f.repo.link(rev1, "big.bin", sum)
			tmp := tmpName(filepath.Join(f.dst, "hub", "models--org--model", "blobs", sum))
			if tc.resumed > 0 {
				must(t, os.MkdirAll(filepath.Dir(tmp), 0o755))
				must(t, os.WriteFile(tmp, big[:tc.resumed], 0o600))
				f2, err := os.OpenFile(tmp, os.O_RDWR, 0)
				must(t, err)
				MarkBoot(f2)
				f2.Close()
			}
			_, err := Stage(context.Background(), f.spec(), staging.Options{Parallel: 1})
			must(t, err)
			fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, "big.bin"), big)
			if len(calls) != max(len(tc.want)-1, 0) {
				t.Fatalf("%d ranges handed to writeback, want %d: %+v", len(calls), max(len(tc.want)-1, 0), calls)
			}
			for i, cl := range calls {
				if cl.path != tmp || cl.off != tc.want[i] || cl.off+cl.n != tc.want[i+1] || cl.flags != unix.SYNC_FILE_RANGE_WRITE {
					t.Errorf("writeback %d: %s [%d, %d) flags %d, want %s [%d, %d) SYNC_FILE_RANGE_WRITE", i, cl.path, cl.off, cl.off+cl.n, cl.flags, tmp, tc.want[i], tc.want[i+1])
				}
			}
		})
	}
}
