package regset

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sparklane/sparklane/internal/atomicfile"
)

// File is the list of disabled registries under state_dir.
func File(stateDir string) string { return filepath.Join(stateDir, "registries", ".disabled") }

// Disabled are the registries turned off, sorted.
func Disabled(stateDir string) []string {
	b, err := os.ReadFile(File(stateDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// Set turns registry name off (off) or on again, written to a temp name
// and renamed; it reports whether anything changed.
func Set(stateDir, name string, off bool) (bool, error) {
	names := Disabled(stateDir)
	i := slices.Index(names, name)
	switch {
	case off && i >= 0, !off && i < 0:
		return false, nil
	case off:
		names = append(names, name)
		slices.Sort(names)
	default:
		names = slices.Delete(names, i, i+1)
	}
	p := File(stateDir)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return false, err
	}
	body := strings.Join(names, "\n")
	if body != "" {
		body += "\n"
	}
	return true, atomicfile.Write(p, []byte(body), 0o644)
}

// Resolve is the registries a config sees: regs (the config's
// [registries], name → path; not changed) plus every clone under
// STATE_DIR/registries (a directory with .git, under a name valid
// accepts; a name regs gives keeps regs's path), minus the disabled ones,
// returned apart (off), with the recipes directories (dirs) that lie in
// their clones dropped (kept are the others). on is nil when there are
// none.
func Resolve(stateDir string, regs map[string]string, dirs []string, valid func(string) error) (on, off map[string]string, kept []string) {
	for n, p := range regs {
		on = add(on, n, p)
	}
	root := filepath.Join(stateDir, "registries")
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || valid(name) != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, name, ".git")); err != nil {
			continue
		}
		if _, set := on[name]; !set {
			on = add(on, name, filepath.Join(root, name))
		}
	}
	for _, n := range Disabled(stateDir) {
		if p, ok := on[n]; ok {
			off = add(off, n, p)
			delete(on, n)
		}
	}
	for _, d := range dirs {
		if !within(d, off) {
			kept = append(kept, d)
		}
	}
	return on, off, kept
}

func add(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// within says d lies in one of the clones of off.
func within(d string, off map[string]string) bool {
	for _, p := range off {
		if rel, err := filepath.Rel(p, d); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
