package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// MountRefused is the permanent error type of a bind mount whose source
// lies outside the node's roots and shared roots (lexically or through a
// symlink) without host = true: a container must not see host paths the
// recipe did not declare as host paths.
const MountRefused = "MountRefused"

// CheckMountSources refuses, before any container exists, every mount of
// node whose source (fs_root already applied) is not, both as written and
// with every symlink in it resolved, beneath (or equal to) one of roots, or
// one of shared for a read-only mount: /srv/sparklane/ok -> /etc is refused.
// Mounts marked Host are left as they are. It returns the mounts with each
// checked source replaced by its resolved path, so Docker binds what was
// checked rather than resolving the links again.
func CheckMountSources(node string, mounts []contract.Mount, roots, shared []string) ([]contract.Mount, error) {
	rroots, rshared := resolveAll(roots), resolveAll(shared)
	out := make([]contract.Mount, 0, len(mounts))
	for _, m := range mounts {
		if m.Host {
			out = append(out, m)
			continue
		}
		refuse := func(format string, args ...any) ([]contract.Mount, error) {
			msg := fmt.Sprintf(format, args...)
			return nil, fault.Permanent(MountRefused, fmt.Errorf("node %s: mount %s -> %s: %s (node roots %v, shared roots %v): move the source beneath a root, or mark the mount host = true if it is a host path on purpose", node, m.Src, m.Dst, msg, roots, shared))
		}
		if !filepath.IsAbs(m.Src) {
			return refuse("source is not an absolute path")
		}
		clean := filepath.Clean(m.Src)
		resolved, err := resolveExisting(clean)
		var pe *pathError
		if errors.As(err, &pe) {
			return refuse("%s", pe.msg)
		}
		if err != nil {
			return nil, fmt.Errorf("node %s: mount %s -> %s: resolve source: %w", node, m.Src, m.Dst, err)
		}
		switch {
		case !beneathAny(clean, roots) && !beneathAny(clean, shared):
			return refuse("source is outside the node's roots and shared roots")
		case beneathAny(resolved, rroots):
		case beneathAny(resolved, rshared) && m.ReadOnly:
		case beneathAny(resolved, rshared):
			return refuse("source is on a shared root (resolved %s), which containers see read-only: set read_only = true", resolved)
		default:
			return refuse("source resolves through a symlink to %s, outside the roots", resolved)
		}
		m.Src = resolved
		out = append(out, m)
	}
	return out, nil
}

// resolveExisting resolves every symlink of p's longest existing prefix
// and appends the rest (a source StartRank may still create).
func resolveExisting(p string) (string, error) {
	rest := ""
	for cur := p; ; {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if _, lerr := os.Lstat(cur); lerr == nil {
			// cur exists but does not resolve: a dangling link, whose
			// target Docker or MkdirAll would follow anywhere.
			return "", &pathError{fmt.Sprintf("%s is a dangling symlink", cur)}
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

func resolveAll(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			continue
		}
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			r = filepath.Clean(p)
		}
		out = append(out, r)
	}
	return out
}

// beneathAny reports whether p (clean, absolute) is one of dirs or lies
// beneath one.
func beneathAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		if p == d || within(p, d) {
			return true
		}
	}
	return false
}
