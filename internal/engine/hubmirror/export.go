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

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
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
// placeholders for skipped entries, and the bind manifest. Every directory
// is opened beneath the node's roots.
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
		dirs := map[*staging.Dir]bool{}
		for _, en := range rp.Revs[rev] {
			target := filepath.Join(root, en.Path)
			td, name, err := st.dc.Parent(target, true)
			if err != nil {
				return classifyWrite(target, err)
			}
			dirs[td] = true
			if en.Skipped {
				if err := placeholder(td, name); err != nil {
					return err
				}
				m.Binds = append(m.Binds, Bind{Source: en.Src, Target: en.Path, ReadOnly: true})
				continue
			}
			file := filepath.Join(st.s.mirror, en.File)
			fd, fname, err := st.dc.Parent(file, false)
			if err != nil {
				return fmt.Errorf("export %s: mirror file %s: %w", target, file, err)
			}
			if err := hardLink(fd, fname, td, name); err != nil {
				return err
			}
		}
		for d := range dirs {
			d.Sync()
		}
		sort.Slice(m.Binds, func(i, j int) bool { return m.Binds[i].Target < m.Binds[j].Target })
		b, err := json.MarshalIndent(m, "", " ")
		if err != nil {
			return err
		}
		mp := BindManifestPath(root)
		md, mname, err := st.dc.Parent(mp, true)
		if err != nil {
			return classifyWrite(mp, err)
		}
		if err := ledger.WriteFileAtomicIn(md, mname, b, 0o644); err != nil {
			return classifyWrite(mp, err)
		}
	}
	return nil
}

// hardLink makes name in td a hard link to the mirror file fname in fd,
// atomically; a target that already is that inode is left alone.
func hardLink(fd *staging.Dir, fname string, td *staging.Dir, name string) error {
	file, target := fd.Join(fname), td.Join(name)
	fi, err := fd.Lstat(fname)
	if err != nil {
		return fmt.Errorf("export %s: mirror file %s: %w", target, file, err)
	}
	if !isReg(fi) {
		return fmt.Errorf("export %s: mirror file %s is not a regular file", target, file)
	}
	if ti, err := td.Lstat(name); err == nil && ti.Dev == fi.Dev && ti.Ino == fi.Ino {
		return nil
	}
	tmp := tmpBase(name)
	td.Remove(tmp)
	if err := td.Link(fd, fname, tmp); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("export %s is on another filesystem than the mirror file %s: hard links need one filesystem, move the export beside dst", target, file))
		}
		return classifyWrite(target, err)
	}
	if err := td.Rename(tmp, name); err != nil {
		td.Remove(tmp)
		return classifyWrite(target, err)
	}
	return nil
}

// placeholder makes name in d an empty regular file (a bind mountpoint).
func placeholder(d *staging.Dir, name string) error {
	target := d.Join(name)
	if ti, err := d.Lstat(name); err == nil && isReg(ti) && ti.Size == 0 {
		return nil
	}
	tmp := tmpBase(name)
	f, err := d.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return classifyWrite(target, fmt.Errorf("create placeholder: %w", err))
	}
	if err := f.Close(); err != nil {
		d.Remove(tmp)
		return classifyWrite(target, err)
	}
	if err := d.Rename(tmp, name); err != nil {
		d.Remove(tmp)
		return classifyWrite(target, err)
	}
	return nil
}
