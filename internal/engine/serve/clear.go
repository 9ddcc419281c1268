package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/fault"
)

// ClearRefused is the permanent error type of a before_serve clear path
// that may not be removed: outside the node's roots, a root itself, an
// ancestor of staged data, or reached through a symlink. Workflows branch
// on it; retrying cannot help until the recipe or the node is fixed.
const ClearRefused = "ClearRefused"

// Cleared is one receipt root removed by a before_serve clear, with what it
// held, so a run's history shows what went away.
type Cleared struct {
	Path string `json:"path"`
	// Files and Bytes count the non-directory entries removed (what the
	// worker user could see; see Incomplete).
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
	// Absent says the path did not exist: nothing was removed.
	Absent bool `json:"absent,omitempty"`
	// Helper says the worker user could not remove it (EACCES/EPERM,
	// e.g. files a root container wrote) and the node's clear helper did.
	Helper bool `json:"helper,omitempty"`
	// Incomplete says some directories could not be read by the worker
	// user, so Files and Bytes undercount.
	Incomplete bool `json:"incomplete,omitempty"`
}

// stagingLedger is the ledger file both staging engines keep in a dst
// (hubmirror.LedgerName, sparserows.LedgerName): a tree holding one is
// staged data, never a receipt root, even when no protected path says so.
const stagingLedger = ".sparklane-ledger.json"

// removeFault, when set by a test, is called before each entry is removed
// as the worker user; a non-nil error stands for the kernel's answer (the
// way to make root see EACCES).
var removeFault func(path string) error

// clearPath removes one declared clear path beneath its root without
// following any symlink, or refuses it. roots and protected are node-local
// paths (fs_root applied).
func clearPath(ctx context.Context, path string, roots, protected, helper []string, timeout time.Duration) (Cleared, error) {
	res := Cleared{Path: path}
	refuse := func(format string, args ...any) (Cleared, error) {
		return res, fault.Permanent(ClearRefused, fmt.Errorf("before_serve clear %s: "+format, append([]any{path}, args...)...))
	}
	if !filepath.IsAbs(path) {
		return refuse("not an absolute path; name the receipt directory beneath one of the node's roots %v", roots)
	}
	clean := filepath.Clean(path)
	res.Path = clean
	root := ""
	for _, r := range roots {
		r = filepath.Clean(r)
		if clean == r {
			return refuse("is the node's root %s itself: clearing it would remove every lane's staged data; name the per-run receipt directory beneath it", r)
		}
		if within(clean, r) && len(r) > len(root) {
			root = r
		}
	}
	if root == "" {
		return refuse("is not beneath any of the node's roots %v: receipt roots must live inside a root (add one to the node's roots, or move the receipt directory)", roots)
	}
	for _, p := range protected {
		p = filepath.Clean(p)
		if clean == p || within(p, clean) {
			return refuse("would remove %s, the lane's staged data (a staging dst or export): name a receipt directory that holds no staged data", p)
		}
	}
	rel, _ := filepath.Rel(root, clean)
	parent, last, st, err := openParent(root, rel)
	if err != nil {
		var pe *pathError
		if errors.As(err, &pe) {
			return refuse("%s", pe.msg)
		}
		return res, fmt.Errorf("before_serve clear %s: %w", clean, err)
	}
	if parent == nil {
		res.Absent = true
		return res, nil
	}
	defer parent.Close()
	if st == nil {
		res.Absent = true
		return res, nil
	}
	pst, err := fstat(int(parent.Fd()))
	if err != nil {
		return res, fmt.Errorf("before_serve clear %s: %w", clean, err)
	}
	if st.Dev != pst.Dev {
		return refuse("is a mount point (another file system); unmount it or name a directory inside it")
	}
	// Look first: count what is there and refuse staged data.
	if err := inspect(int(parent.Fd()), last, clean, pst.Dev, st, &res); err != nil {
		var pe *pathError
		if errors.As(err, &pe) {
			return refuse("%s", pe.msg)
		}
		return res, fmt.Errorf("before_serve clear %s: %w", clean, err)
	}
	err = removeAt(int(parent.Fd()), last, clean, pst.Dev)
	if err != nil {
		var pe *pathError
		if errors.As(err, &pe) {
			return refuse("%s", pe.msg)
		}
		if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
			return res, fmt.Errorf("before_serve clear %s: %w", clean, err)
		}
		if len(helper) == 0 {
			return res, fmt.Errorf("before_serve clear %s: the worker user may not remove it (%w): files written by a root container need the node's clear_helper (e.g. [\"sudo\", \"-n\"] with a sudoers rule for rm), or fix their ownership", clean, err)
		}
		if err := runHelper(ctx, helper, root, rel, clean, timeout); err != nil {
			return res, err
		}
		res.Helper = true
	}
	if _, err := fstatat(int(parent.Fd()), last); err == nil {
		return res, fmt.Errorf("before_serve clear %s: still exists after removal", clean)
	} else if !errors.Is(err, unix.ENOENT) {
		return res, fmt.Errorf("before_serve clear %s: check removal: %w", clean, err)
	}
	return res, nil
}

// runHelper removes exactly the declared path with the node's helper
// (HELPER... rm -rf --one-file-system -- PATH), after checking again that
// no component of it is a symlink.
func runHelper(ctx context.Context, helper []string, root, rel, clean string, timeout time.Duration) error {
	parent, _, st, err := openParent(root, rel)
	if err != nil {
		var pe *pathError
		if errors.As(err, &pe) {
			return fault.Permanent(ClearRefused, fmt.Errorf("before_serve clear %s: %s", clean, pe.msg))
		}
		return fmt.Errorf("before_serve clear %s: %w", clean, err)
	}
	if parent != nil {
		parent.Close()
	}
	if st == nil {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := append(append([]string(nil), helper[1:]...), "rm", "-rf", "--one-file-system", "--", clean)
	cmd := exec.CommandContext(hctx, helper[0], argv...)
	tail := &tailBuffer{max: HookOutputLimit}
	cmd.Stdout, cmd.Stderr, cmd.Stdin = tail, tail, nil
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("before_serve clear %s: clear helper %q failed: %w; output:\n%s", clean, strings.Join(append(helper, "rm", "-rf", "--one-file-system", "--", clean), " "), err, tail.String())
	}
	return nil
}

// pathError is a refusal found while walking (a symlink, a non-directory
// component, staged data, another file system); its message names the
// component at fault.
type pathError struct{ msg string }

func (e *pathError) Error() string { return e.msg }

// openParent opens root, then each directory of rel but the last without
// following symlinks, and looks at the last component. It returns a nil
// parent when an intermediate directory is missing, a nil stat when the
// last component is missing.
func openParent(root, rel string) (*os.File, string, *unix.Stat_t, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, "", nil, nil // no root yet: nothing beneath it either
	}
	if err != nil {
		return nil, "", nil, fmt.Errorf("open root %s: %w", root, err)
	}
	comps := strings.Split(rel, string(filepath.Separator))
	at := root
	for i, c := range comps {
		at = filepath.Join(at, c)
		st, err := fstatat(fd, c)
		if errors.Is(err, unix.ENOENT) {
			if i == len(comps)-1 {
				return os.NewFile(uintptr(fd), root), c, nil, nil
			}
			unix.Close(fd)
			return nil, c, nil, nil
		}
		if err != nil {
			unix.Close(fd)
			return nil, "", nil, fmt.Errorf("%s: %w", at, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, _ := readlinkat(fd, c)
			unix.Close(fd)
			return nil, "", nil, &pathError{fmt.Sprintf("component %s is a symlink (-> %s): clear paths are never followed through links; name the real directory", at, target)}
		}
		if i == len(comps)-1 {
			return os.NewFile(uintptr(fd), filepath.Dir(at)), c, st, nil
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return nil, "", nil, &pathError{fmt.Sprintf("component %s is not a directory", at)}
		}
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, "", nil, &pathError{fmt.Sprintf("component %s changed into a symlink or file while being opened", at)}
		}
		if err != nil {
			return nil, "", nil, fmt.Errorf("%s: %w", at, err)
		}
		fd = next
	}
	unix.Close(fd)
	return nil, "", nil, fmt.Errorf("empty path beneath %s", root)
}

// inspect counts the files and bytes under name (in dirfd) and refuses a
// tree holding a staging ledger or crossing into another file system.
func inspect(dirfd int, name, path string, dev uint64, st *unix.Stat_t, res *Cleared) error {
	if st.Dev != dev {
		return &pathError{fmt.Sprintf("%s is on another file system (a mount point): unmount it first", path)}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if name == stagingLedger {
			return &pathError{fmt.Sprintf("%s is a staging ledger: the path holds staged data", path)}
		}
		res.Files++
		res.Bytes += st.Size
		return nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		res.Incomplete = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	defer dir.Close()
	for {
		names, err := dir.Readdirnames(256)
		for _, n := range names {
			cst, err := fstatat(fd, n)
			if err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(path, n), err)
			}
			if err := inspect(fd, n, filepath.Join(path, n), dev, cst, res); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(err, unix.EACCES) {
				res.Incomplete = true
				return nil
			}
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

// removeAt removes name (in dirfd) and everything beneath it, descending
// only through directories opened with O_NOFOLLOW and never into another
// file system.
func removeAt(dirfd int, name, path string, dev uint64) error {
	st, err := fstatat(dirfd, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Dev != dev {
		return &pathError{fmt.Sprintf("%s is on another file system (a mount point): unmount it first", path)}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		dir := os.NewFile(uintptr(fd), path)
		for {
			names, rerr := dir.Readdirnames(256)
			for _, n := range names {
				if err := removeAt(fd, n, filepath.Join(path, n), dev); err != nil {
					dir.Close()
					return err
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				dir.Close()
				return fmt.Errorf("read %s: %w", path, rerr)
			}
		}
		dir.Close()
	}
	if removeFault != nil {
		if err := removeFault(path); err != nil {
			return fmt.Errorf("remove %s: %w", path, err)
		}
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(dirfd, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

func fstatat(dirfd int, name string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	return &st, nil
}

func fstat(fd int) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// within reports whether p lies strictly beneath dir (both cleaned).
func within(p, dir string) bool {
	if dir == "/" {
		return p != "/" && strings.HasPrefix(p, "/")
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}
