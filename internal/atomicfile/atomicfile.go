package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to a temp name beside path, fsyncs it and
// renames it into place, so a crash leaves either the old or the new file.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	if op, err := Fill(f, data, perm); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s %s: %w", op, path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename into %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Fill writes data to the new temp file f, gives it perm, makes it durable
// and closes it (also when a step fails), for every atomic writer (Write,
// and the beneath-the-root ledger.WriteFileAtomicIn); op names the step that
// failed ("write" or "fsync") for their messages.
func Fill(f *os.File, data []byte, perm os.FileMode) (op string, err error) {
	defer f.Close() // a second close after the one below only errs
	if _, err := f.Write(data); err != nil {
		return "write", err
	}
	if err := f.Chmod(perm); err != nil {
		return "write", err
	}
	if err := f.Sync(); err != nil {
		return "fsync", err
	}
	if err := f.Close(); err != nil {
		return "write", err
	}
	return "", nil
}
