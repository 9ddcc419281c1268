package staging

import (
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Dirs opens destination directories beneath the node's roots once
// each (openat2 RESOLVE_BENEATH, see Tree) and keeps them open for
// the pass, so every file operation is one *at call by name on a directory
// already proven to lie inside a root: as cheap as a path call, and no
// component can be a symlink out of the roots.
type Dirs struct {
	roots []string
	mu    sync.Mutex
	trees map[string]*Tree // by root
	dirs  map[string]*Dir  // by directory path
}

// NewDirs returns an empty cache over the node's roots (fs_root applied);
// Close it at the end of the pass.
func NewDirs(roots []string) *Dirs {
	return &Dirs{roots: roots, trees: map[string]*Tree{}, dirs: map[string]*Dir{}}
}

// Dir opens path (a directory under a root); with create, missing
// components are made. Without create a missing directory fails with an
// error satisfying errors.Is(err, fs.ErrNotExist).
func (c *Dirs) Dir(path string, create bool) (*Dir, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.dirs[path]; ok {
		return d, nil
	}
	root, err := RootFor(path, c.roots)
	if err != nil {
		return nil, err
	}
	t, ok := c.trees[root]
	if !ok {
		if t, err = OpenTree(path, c.roots, create); err != nil {
			return nil, err
		}
		c.trees[root] = t
	}
	d, err := t.Dir(path, create)
	if err != nil {
		return nil, err
	}
	c.dirs[path] = d
	return d, nil
}

// Parent opens the directory of path and returns it with path's base name.
func (c *Dirs) Parent(path string, create bool) (*Dir, string, error) {
	d, err := c.Dir(filepath.Dir(path), create)
	return d, filepath.Base(path), err
}

// Lstat is Lstat of path through its parent opened beneath the roots.
func (c *Dirs) Lstat(path string) (unix.Stat_t, error) {
	d, name, err := c.Parent(path, false)
	if err != nil {
		return unix.Stat_t{}, err
	}
	return d.Lstat(name)
}

// Open opens the regular file path read-only through its parent (a link
// in its place is not followed).
func (c *Dirs) Open(path string) (*os.File, error) {
	d, name, err := c.Parent(path, false)
	if err != nil {
		return nil, err
	}
	return d.OpenFile(name, unix.O_RDONLY, 0)
}

// Close closes every directory and root the cache opened.
func (c *Dirs) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, d := range c.dirs {
		d.Close()
		delete(c.dirs, k)
	}
	for k, t := range c.trees {
		t.Close()
		delete(c.trees, k)
	}
}
