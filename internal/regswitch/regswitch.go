// Package regswitch keeps which recipe registries are turned off
// (`starter registry disable NAME`, as sparkrun's `registry disable`): a
// list of names in STATE_DIR/registries/.disabled. A disabled registry's
// recipes are neither listed nor resolved; its clone stays, so enabling
// it again costs nothing.
//
// It imports nothing of the project: internal/config applies it when it
// loads a fleet config, internal/registry and the starter change it.
package regswitch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	if err := os.WriteFile(p+".tmp", []byte(body), 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(p+".tmp", p)
}

// Apply takes the disabled registries out of regs (name → clone path)
// and drops the recipes directories that lie in their clones, so that
// nothing of them is listed or resolved. It returns the registries it
// took out (name → path) and the recipes directories kept.
func Apply(stateDir string, regs map[string]string, dirs []string) (map[string]string, []string) {
	names := Disabled(stateDir)
	if len(names) == 0 {
		return nil, dirs
	}
	off := map[string]string{}
	for _, n := range names {
		if p, ok := regs[n]; ok {
			off[n] = p
			delete(regs, n)
		}
	}
	var kept []string
	for _, d := range dirs {
		in := false
		for _, p := range off {
			if rel, err := filepath.Rel(p, d); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				in = true
			}
		}
		if !in {
			kept = append(kept, d)
		}
	}
	if len(off) == 0 {
		return nil, kept
	}
	return off, kept
}
