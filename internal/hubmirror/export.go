package hubmirror

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/ledger"
)

// bindManifest is the file beside an export listing the NAS files the serve
// step bind-mounts over the export's placeholders.
type bindManifest struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	Export   string `json:"export"`
	Binds    []Bind `json:"binds"`
}

// BindManifestPath is where the bind manifest of an export lives: beside
// it, so the runtime reading the export never sees it.
func BindManifestPath(exportPath string) string {
	return filepath.Clean(exportPath) + ".binds.json"
}

// ReadBindManifest returns the per-file binds (NAS path → path relative to
// the export root, read-only) that Stage wrote beside exportPath; the serve
// step turns them into container mounts over the empty placeholders.
func ReadBindManifest(exportPath string) ([]Bind, error) {
	path := BindManifestPath(exportPath)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("export %s has no bind manifest %s: stage the lane first", exportPath, path)
		}
		return nil, fmt.Errorf("read bind manifest %s: %w", path, err)
	}
	var m bindManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("bind manifest %s is not valid JSON (%v): re-run staging to rewrite it", path, err)
	}
	return m.Binds, nil
}

// exports builds each export tree: hard links to mirror files, empty
// placeholders for skipped entries, and the bind manifest.
func (st *stager) exports() error {
	for _, e := range st.s.Exports {
		root := filepath.Clean(e.Path)
		st.res.Exports = append(st.res.Exports, root)
		if st.opts.DryRun {
			continue
		}
		rp := st.p.Repos[e.Repo]
		rev, err := rp.exportRev()
		if err != nil {
			return err
		}
		m := bindManifest{Repo: e.Repo, Revision: rev, Export: root, Binds: []Bind{}}
		dirs := map[string]bool{}
		for _, en := range rp.Revs[rev] {
			target := filepath.Join(root, en.Path)
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return classifyWrite(target, err)
			}
			dirs[filepath.Dir(target)] = true
			if en.Skipped {
				if err := placeholder(target); err != nil {
					return err
				}
				m.Binds = append(m.Binds, Bind{Source: en.Src, Target: en.Path, ReadOnly: true})
				continue
			}
			if err := hardLink(filepath.Join(st.s.mirror, en.File), target); err != nil {
				return err
			}
		}
		for d := range dirs {
			syncDir(d)
		}
		sort.Slice(m.Binds, func(i, j int) bool { return m.Binds[i].Target < m.Binds[j].Target })
		b, err := json.MarshalIndent(m, "", " ")
		if err != nil {
			return err
		}
		if err := ledger.WriteFileAtomic(BindManifestPath(root), b, 0o644); err != nil {
			return classifyWrite(BindManifestPath(root), err)
		}
	}
	return nil
}

// hardLink makes target a hard link to file, atomically; a target that
// already is that inode is left alone.
func hardLink(file, target string) error {
	fi, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("export %s: mirror file %s: %w", target, file, err)
	}
	if ti, err := os.Lstat(target); err == nil && os.SameFile(fi, ti) {
		return nil
	}
	tmp := tmpName(target)
	os.Remove(tmp)
	if err := os.Link(file, tmp); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("export %s is on another filesystem than the mirror file %s: hard links need one filesystem, move the export beside dst", target, file))
		}
		return classifyWrite(target, fmt.Errorf("link %s to %s: %w", file, tmp, err))
	}
	if err := os.Rename(tmp, target); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s to %s: %w", tmp, target, err)
	}
	return nil
}

// placeholder makes target an empty regular file (a bind mountpoint).
func placeholder(target string) error {
	if ti, err := os.Lstat(target); err == nil && ti.Mode().IsRegular() && ti.Size() == 0 {
		return nil
	}
	tmp := tmpName(target)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return classifyWrite(target, fmt.Errorf("create placeholder %s: %w", tmp, err))
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return classifyWrite(target, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s to %s: %w", tmp, target, err)
	}
	return nil
}
