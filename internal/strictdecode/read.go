package strictdecode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	toml "github.com/pelletier/go-toml/v2"
	"gopkg.in/yaml.v3"
)

// Limits on a file, checked before it is parsed: the TOML parser's work
// grows with the square of the key count (140,000 keys took 37 s), and no
// file an operator writes by hand needs more than a few hundred.
const (
	MaxFileBytes = 1 << 20
	MaxFileKeys  = 4096
)

// ReadFile reads the file at path without ever blocking on a FIFO or
// device (it is opened non-blocking and must be a regular file) and
// refuses one over MaxFileBytes before reading it. what names the kind of
// file in messages ("config", "recipe"). A failure to open it wraps the
// *fs.PathError with Op "open", so a caller can add where the path came
// from.
func ReadFile(path, what string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	defer f.Close()
	return readOpened(f, path, what)
}

// OutsideRootError is ReadFileIn's refusal of a file whose path leaves its
// root through a symlink: nothing outside the root was opened, so nothing
// of what lies there can reach a message.
type OutsideRootError struct {
	// Path is the file asked for, Root the tree it must lie in.
	Path, Root string
	// Link is the symlink on the way out (Path itself or a directory
	// above it) and Target its text.
	Link, Target string
}

func (e *OutsideRootError) Error() string {
	if filepath.IsAbs(e.Target) {
		return fmt.Sprintf("%s: %s is an absolute symlink to %q (only relative links that stay inside %s are followed)", e.Path, e.Link, e.Target, e.Root)
	}
	return fmt.Sprintf("%s: %s is a symlink to %q, which leads outside %s", e.Path, e.Link, e.Target, e.Root)
}

// ReadFileIn is ReadFile for a file that must lie inside root (a tree
// someone else wrote, such as a registry clone): it is opened through
// os.Root, so a symlink on the way — the file itself or a directory above
// it — is followed only while it stays inside root, and an absolute one
// not at all. A path leaving root is an *OutsideRootError, and the file
// it leads to is never opened.
func ReadFileIn(root, path, what string) ([]byte, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%s: not inside %s: a %s here is read only from inside it", path, root, what)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	defer r.Close()
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if out := linkOut(root, rel); out != nil {
			out.Path = path
			return nil, out
		}
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	defer f.Close()
	return readOpened(f, path, what)
}

// linkOut finds the first symlink on rel's way below root that leads out
// of it (or is absolute), for ReadFileIn's message; nil when none does.
func linkOut(root, rel string) *OutsideRootError {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		realRoot = root
	}
	p := root
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, c)
		st, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(p)
		if err != nil {
			return nil
		}
		out := &OutsideRootError{Root: root, Link: p, Target: target}
		if filepath.IsAbs(target) {
			return out
		}
		dest, base := "", realRoot
		if dest, err = filepath.EvalSymlinks(p); err != nil {
			dest, base = filepath.Join(filepath.Dir(p), target), root // dangling: where its text points
		}
		if r, err := filepath.Rel(base, dest); err != nil || !filepath.IsLocal(r) {
			return out
		}
	}
	return nil
}

// readOpened is ReadFile's checks and read on f, opened from path.
func readOpened(f *os.File, path, what string) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s): a %s must be a regular file", path, FileKind(st.Mode()), what)
	}
	if st.Size() > MaxFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, over the %d-byte (1 MiB) limit for a %s file: split it or remove what it does not need", path, st.Size(), MaxFileBytes, what)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: over the %d-byte (1 MiB) limit for a %s file: split it or remove what it does not need", path, MaxFileBytes, what)
	}
	return data, nil
}

// FileKind names a non-regular file's type for messages ("named pipe"),
// so a caller skipping such a file can say what it was.
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return m.Type().String()
}

// tooManyKeys is the error for a file over MaxFileKeys.
func tooManyKeys(file string) error {
	return fmt.Errorf("%s: more than %d keys, the limit for a config or recipe file: split it or remove keys", file, MaxFileKeys)
}

// ParseTOML parses data, the contents of file, into a tree with keys
// exactly as written (for Decode to check); syntax errors carry
// file:line:column. A file with more than MaxFileKeys keys is refused
// before the parser sees it.
func ParseTOML(file string, data []byte) (map[string]any, error) {
	if n := countTOMLKeys(data, MaxFileKeys+1); n > MaxFileKeys {
		return nil, tooManyKeys(file)
	}
	var tree map[string]any
	if err := toml.Unmarshal(data, &tree); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("%s:%d:%d: %s: fix the TOML syntax", file, row, col, de.Error())
		}
		return nil, fmt.Errorf("%s: %w: fix the TOML syntax", file, err)
	}
	if tree == nil {
		tree = map[string]any{}
	}
	return tree, nil
}

// countTOMLKeys counts, up to limit, the key/value pairs ('=' outside
// strings and comments) and table headers ('[' opening a line) of a TOML
// document: an upper bound on its keys that costs one pass.
func countTOMLKeys(data []byte, limit int) int {
	n := 0
	lineStart := true
	for i := 0; i < len(data) && n < limit; i++ {
		c := data[i]
		switch {
		case c == '\n':
			lineStart = true
			continue
		case c == ' ' || c == '\t' || c == '\r':
			continue
		case c == '#':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			i--
		case c == '"' || c == '\'':
			q := string(c)
			if i+2 < len(data) && data[i+1] == c && data[i+2] == c {
				q = strings.Repeat(q, 3)
			}
			j := i + len(q)
			for j < len(data) && !bytes.HasPrefix(data[j:], []byte(q)) {
				if c == '"' && data[j] == '\\' {
					j++
				}
				j++
			}
			i = j + len(q) - 1
		case c == '=':
			n++
		case c == '[' && lineStart:
			n++
		}
		lineStart = false
	}
	return n
}

// ParseYAML parses data, the contents of file, into a document. An empty
// document is an empty table. A table comes back as map[string]any, keys
// exactly as written and numbers as int64 (so a tree's values do not
// depend on the format it came from), refused over MaxFileKeys; anything
// else (a list, a scalar) comes back as parsed, for the caller to say what
// it expected instead (Describe names it).
func ParseYAML(file string, data []byte) (any, error) {
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w: fix the YAML syntax", file, err)
	}
	switch raw.(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any, map[any]any:
	default:
		return raw, nil
	}
	tree := normalize(raw).(map[string]any)
	if n := countKeys(tree, MaxFileKeys+1); n > MaxFileKeys {
		return nil, tooManyKeys(file)
	}
	return tree, nil
}

// countKeys counts the keys of a decoded tree, stopping at limit.
func countKeys(v any, limit int) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, e := range x {
				if n >= limit {
					return
				}
				n++
				walk(e)
			}
		case []any:
			for _, e := range x {
				if n >= limit {
					return
				}
				walk(e)
			}
		}
	}
	walk(v)
	return n
}
