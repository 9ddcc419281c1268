package staging

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/fault"
)

// The node's roots are a boundary: staging writes only beneath them, and a
// path check on text is not enough (dst = /srv/x/hf with /srv/x a link to
// /tmp/elsewhere would land in /tmp/elsewhere). A Tree is one root opened
// once; every destination directory is opened beneath it with openat2
// RESOLVE_BENEATH, so the kernel refuses any component (a symlink, "..")
// that leaves it; files are then made and replaced with *at calls on the
// directory's descriptor and O_NOFOLLOW, so no later path walk can be
// redirected either. Links inside a root that stay inside it work;
// absolute links are refused (RESOLVE_BENEATH cannot tell where they land).

// Tree is one of the node's roots opened for staging writes.
type Tree struct {
	// Root is the root's path (as configured, fs_root applied).
	Root string
	fd   int
}

// Dir is a directory opened beneath a Tree's root. Engines act on files in
// it by single names through its descriptor.
type Dir struct {
	// Path is the directory's path, for messages.
	Path string
	fd   int
}

// RootFor returns the longest root among roots holding path (cleaned), the
// one a Tree for path opens; outside every root it fails like UnderRoots.
func RootFor(path string, roots []string) (string, error) {
	if err := UnderRoots(path, roots); err != nil {
		return "", err
	}
	c, best := filepath.Clean(path), ""
	for _, r := range roots {
		r = filepath.Clean(r)
		if (c == r || strings.HasPrefix(c, r+string(filepath.Separator)) || r == "/") && len(r) > len(best) {
			best = r
		}
	}
	return best, nil
}

// OpenTree opens the root among roots that holds path. With create a
// missing root is made (it is configuration, trusted like any config path).
// Close it when done.
func OpenTree(path string, roots []string, create bool) (*Tree, error) {
	root, err := RootFor(path, roots)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && create {
		if err = os.MkdirAll(root, 0o755); err != nil {
			return nil, ClassifyWrite(root, err)
		}
		fd, err = unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, ClassifyWrite(root, &fs.PathError{Op: "open root", Path: root, Err: err})
	}
	return &Tree{Root: root, fd: fd}, nil
}

// closeFD closes *fd once, leaving -1 behind (a closed or never opened
// descriptor is nothing to close).
func closeFD(fd *int) error {
	if *fd < 0 {
		return nil
	}
	err := unix.Close(*fd)
	*fd = -1
	return err
}

// Close releases the root's descriptor.
func (t *Tree) Close() error {
	if t == nil {
		return nil
	}
	return closeFD(&t.fd)
}

func (t *Tree) beneath(rel string) (int, error) {
	for {
		fd, err := unix.Openat2(t.fd, rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// Dir opens the directory path (absolute, under t.Root) beneath the root.
// With create, missing components are made one by one (mode 0755), each
// with mkdirat in its parent already opened beneath the root. Without
// create a missing directory is an error satisfying errors.Is(err,
// fs.ErrNotExist). A component leaving the root is a permanent LinkEscape
// fault naming the path and the component.
func (t *Tree) Dir(path string, create bool) (*Dir, error) {
	path = filepath.Clean(path)
	rel, err := filepath.Rel(t.Root, path)
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s is outside the node's root %s: add a root in the node's config or change dst", path, t.Root))
	}
	fd, err := t.beneath(rel)
	if err == nil {
		return &Dir{Path: path, fd: fd}, nil
	}
	if errors.Is(err, unix.ENOENT) && create {
		return t.mkdirs(path, rel)
	}
	return nil, t.openErr(path, rel, err)
}

// mkdirs makes the missing components of rel, each beneath the root.
func (t *Tree) mkdirs(path, rel string) (*Dir, error) {
	parent, err := unix.Dup(t.fd)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(rel, string(filepath.Separator))
	for i := range parts {
		prefix := filepath.Join(parts[:i+1]...)
		fd, err := t.beneath(prefix)
		if errors.Is(err, unix.ENOENT) {
			merr := unix.Mkdirat(parent, parts[i], 0o755)
			if merr != nil && !errors.Is(merr, unix.EEXIST) {
				unix.Close(parent)
				return nil, ClassifyWrite(filepath.Join(t.Root, prefix), &fs.PathError{Op: "mkdir", Path: filepath.Join(t.Root, prefix), Err: merr})
			}
			fd, err = t.beneath(prefix)
		}
		unix.Close(parent)
		if err != nil {
			return nil, t.openErr(filepath.Join(t.Root, prefix), prefix, err)
		}
		parent = fd
	}
	return &Dir{Path: path, fd: parent}, nil
}

// openErr explains a failed open of rel beneath the root: an escape names
// the offending component and its link text.
func (t *Tree) openErr(path, rel string, err error) error {
	if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
		parts := strings.Split(rel, string(filepath.Separator))
		for i := range parts {
			prefix := filepath.Join(parts[:i+1]...)
			fd, perr := unix.Openat2(t.fd, prefix, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
			if perr == nil {
				unix.Close(fd)
				continue
			}
			if errors.Is(perr, unix.EXDEV) || errors.Is(perr, unix.ELOOP) {
				comp := filepath.Join(t.Root, prefix)
				what := "leaves it"
				if target, lerr := os.Readlink(comp); lerr == nil {
					what = fmt.Sprintf("is a symlink to %q, which leaves it", target)
					if filepath.IsAbs(target) {
						what = fmt.Sprintf("is an absolute symlink to %q (refused: only relative links that stay inside are followed)", target)
					}
				}
				return fault.Permanent(fault.LinkEscape, fmt.Errorf("%s: component %s %s; staging writes only beneath the node's root %s: replace the link with a directory or change dst", path, comp, what, t.Root))
			}
			break
		}
		return fault.Permanent(fault.LinkEscape, fmt.Errorf("%s resolves outside the node's root %s (%v): replace the links on the way with directories or change dst", path, t.Root, err))
	}
	return ClassifyWrite(path, &fs.PathError{Op: "open", Path: path, Err: err})
}

// Close releases the directory's descriptor.
func (d *Dir) Close() error {
	if d == nil {
		return nil
	}
	return closeFD(&d.fd)
}

// Fd is the directory's O_PATH descriptor, for *at calls.
func (d *Dir) Fd() int { return d.fd }

// Join is the path of name in d, for messages.
func (d *Dir) Join(name string) string { return filepath.Join(d.Path, name) }

func (d *Dir) perr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: d.Join(name), Err: err}
}

// OpenFile opens name in d, never following a symlink in its place.
func (d *Dir) OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	fd, err := openat(d.fd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, d.perr("open", name, err)
	}
	return os.NewFile(uintptr(fd), d.Join(name)), nil
}

func openat(dirfd int, name string, flag int, perm uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flag, perm)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// OpenRaw is OpenFile returning the raw descriptor (no *os.File), for the
// small-file fast path.
func (d *Dir) OpenRaw(name string, flag int, perm uint32) (int, error) {
	fd, err := openat(d.fd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return -1, d.perr("open", name, err)
	}
	return fd, nil
}

// Lstat stats name in d without following it.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, d.perr("lstat", name, err)
	}
	return st, nil
}

// Readlink reads the link name in d.
func (d *Dir) Readlink(name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(d.fd, name, buf)
		if err != nil {
			return "", d.perr("readlink", name, err)
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Remove unlinks the file or link name in d (not a directory); a missing
// name is not an error.
func (d *Dir) Remove(name string) error {
	if err := unix.Unlinkat(d.fd, name, 0); err != nil && err != unix.ENOENT {
		return d.perr("remove", name, err)
	}
	return nil
}

// Rename renames oldname to newname, both in d (atomic replace).
func (d *Dir) Rename(oldname, newname string) error {
	if err := unix.Renameat(d.fd, oldname, d.fd, newname); err != nil {
		return &os.LinkError{Op: "rename", Old: d.Join(oldname), New: d.Join(newname), Err: err}
	}
	return nil
}

// Symlink makes name in d a symlink with the given target text.
func (d *Dir) Symlink(target, name string) error {
	if err := unix.Symlinkat(target, d.fd, name); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: d.Join(name), Err: err}
	}
	return nil
}

// Link makes name in d a hard link to srcName in src (not following links).
func (d *Dir) Link(src *Dir, srcName, name string) error {
	if err := unix.Linkat(src.fd, srcName, d.fd, name, 0); err != nil {
		return &os.LinkError{Op: "link", Old: src.Join(srcName), New: d.Join(name), Err: err}
	}
	return nil
}

// ReadFile reads the regular file name in d whole (not following a link).
func (d *Dir) ReadFile(name string) ([]byte, error) {
	f, err := d.OpenFile(name, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if n == len(b) {
		return b, nil
	}
	return nil, d.perr("read", name, err)
}

// Names lists the names in d (not . and ..), in directory order, so a
// caller can learn which of many names exist with one getdents pass
// instead of one failing syscall per name.
func (d *Dir) Names() ([]string, error) {
	fd, err := openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.perr("open", ".", err)
	}
	f := os.NewFile(uintptr(fd), d.Path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, d.perr("readdir", ".", err)
	}
	return names, nil
}

// Sync fsyncs the directory itself, so names made in it are durable.
func (d *Dir) Sync() error { return d.syncWith("fsync", unix.Fsync) }

// Syncfs syncs the whole filesystem holding d.
func (d *Dir) Syncfs() error { return d.syncWith("syncfs", unix.Syncfs) }

// syncWith opens d itself again and calls sync (named op in errors) on it.
func (d *Dir) syncWith(op string, sync func(fd int) error) error {
	fd, err := openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return d.perr("open", ".", err)
	}
	defer unix.Close(fd)
	if err := sync(fd); err != nil {
		return d.perr(op, ".", err)
	}
	return nil
}

// RemoveAll removes the directory path (absolute, under t.Root) and
// everything in it, beneath the root: its parent is opened with openat2
// RESOLVE_BENEATH, each subdirectory with O_NOFOLLOW on its parent's
// descriptor, and links are unlinked, never followed, so nothing outside
// the root is touched whatever a symlink says. The root itself is never
// removed. A missing path is not an error.
func (t *Tree) RemoveAll(path string) error {
	path = filepath.Clean(path)
	if path == filepath.Clean(t.Root) {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s is the node's root itself: refusing to remove it", path))
	}
	parent, err := t.Dir(filepath.Dir(path), false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer parent.Close()
	return removeAt(parent.fd, filepath.Base(path), path)
}

// removeAt removes name in the directory dirfd (path for messages).
func removeAt(dirfd int, name, path string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return &fs.PathError{Op: "remove", Path: path, Err: err}
		}
		return nil
	}
	fd, err := openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return &fs.PathError{Op: "readdir", Path: path, Err: err}
	}
	for _, n := range names {
		if err := removeAt(fd, n, filepath.Join(path, n)); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &fs.PathError{Op: "remove", Path: path, Err: err}
	}
	return nil
}
