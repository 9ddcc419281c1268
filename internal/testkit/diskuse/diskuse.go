package diskuse

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// WrittenBytes is the data on disk under dir: the data extents
// (SEEK_DATA/SEEK_HOLE) of every regular file but ledgers, less header
// bytes per file (packed outputs' header, written before any row).
func WrittenBytes(t *testing.T, dir string, header int64) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() || strings.Contains(d.Name(), "ledger") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		var data int64
		for off := int64(0); off < st.Size(); {
			start, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
			if err != nil {
				break // ENXIO: no data past off
			}
			end, err := unix.Seek(int(f.Fd()), start, unix.SEEK_HOLE)
			if err != nil {
				return fmt.Errorf("SEEK_HOLE %s: %w", p, err)
			}
			data += end - start
			off = end
		}
		n += max(0, data-header)
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return n
}
