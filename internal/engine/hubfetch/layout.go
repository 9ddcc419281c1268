package hubfetch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// linkTarget is the relative symlink text of snapshots/<commit>/<file>:
// ../../blobs/<etag>, one more ../ per directory of file, as
// huggingface_hub's _create_symlink makes it (so the cache can move).
func linkTarget(file, etag string) string {
	return strings.Repeat("../", 2+strings.Count(file, "/")) + "blobs/" + etag
}

// dirSet collects the directories whose entries changed, to fsync each
// once at the end (a rename or a symlink is durable when its directory is).
type dirSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (d *dirSet) add(dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]bool{}
	}
	d.m[dir] = true
}

func (d *dirSet) sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for dir := range d.m {
		f, err := os.Open(dir)
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			errs = append(errs, classifyWrite(dir, fmt.Errorf("fsync %s: %w", dir, err)))
		}
	}
	d.m = nil
	return errors.Join(errs...)
}

// ensureLink makes link a symlink to target, leaving a correct one alone
// and replacing anything else by a temp link and a rename (never a
// moment without an entry). It reports whether it wrote.
func ensureLink(link, target string, dirs *dirSet) (bool, error) {
	if t, err := os.Readlink(link); err == nil && t == target {
		return false, nil
	}
	dir := filepath.Dir(link)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, classifyWrite(dir, err)
	}
	tmp := link + ".sparklane-tmp"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return false, classifyWrite(tmp, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return false, classifyWrite(link, err)
	}
	dirs.add(dir)
	return true, nil
}

// writeRef writes commit into ref (refs/<revision>), without a newline as
// huggingface_hub does, through a temp file, fsync and rename; a ref that
// holds it already is left alone. It reports whether it wrote.
func writeRef(ref, commit string, dirs *dirSet) (bool, error) {
	if b, err := os.ReadFile(ref); err == nil && string(b) == commit {
		return false, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, classifyWrite(ref, err)
	}
	dir := filepath.Dir(ref)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, classifyWrite(dir, err)
	}
	tmp := ref + ".sparklane-tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return false, classifyWrite(tmp, err)
	}
	_, err = f.WriteString(commit)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, ref)
	}
	if err != nil {
		os.Remove(tmp)
		return false, classifyWrite(ref, err)
	}
	dirs.add(dir)
	return true, nil
}
