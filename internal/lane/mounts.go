package lane

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// checkMountSource says why src may not be bound on node n: not absolute,
// a ".." in it, outside the node's roots and shared_roots (compared after
// the node's fs_root mapping, as the node worker binds it), or on a shared
// root without read_only.
func checkMountSource(cfg *config.Config, n *config.Node, src string, readOnly bool) error {
	if !filepath.IsAbs(src) {
		return fmt.Errorf("%q is not absolute", src)
	}
	if hasDotDot(src) {
		return fmt.Errorf("%s contains \"..\": write the source without it", src)
	}
	local := n.LocalPath(src, cfg.SharedRoots)
	for _, root := range n.Roots {
		lr := n.LocalPath(root, cfg.SharedRoots)
		if local == filepath.Clean(lr) || isUnder(local, filepath.Clean(lr)) {
			return nil
		}
	}
	c := filepath.Clean(src)
	for _, sr := range cfg.SharedRoots {
		sr = filepath.Clean(sr)
		if c == sr || isUnder(c, sr) {
			if !readOnly {
				return fmt.Errorf("%s is on shared root %s, which containers may only read: set read_only = true", src, sr)
			}
			return nil
		}
	}
	return fmt.Errorf("%s is outside node %s's roots %v and shared_roots %v: bind a path under them, or set host = true on the mount if it is a host path on purpose (recipe check lists host mounts)", src, n.Name, n.Roots, cfg.SharedRoots)
}

// checkCreateSource refuses create = true on a source the serve step must
// not make: a host path, or one on a shared root (the NAS), or outside the
// node's roots.
func checkCreateSource(cfg *config.Config, n *config.Node, src string, host bool) error {
	if host {
		return fmt.Errorf("%s is a host path (host = true): sparklane creates mount sources only under the node's roots; drop create or host", src)
	}
	local := n.LocalPath(src, cfg.SharedRoots)
	for _, root := range n.Roots {
		lr := filepath.Clean(n.LocalPath(root, cfg.SharedRoots))
		if local != lr && isUnder(local, lr) {
			return nil
		}
	}
	return fmt.Errorf("%s is not strictly under one of node %s's roots %v: a created source must be (not a shared root, not a root itself)", src, n.Name, n.Roots)
}

// checkSkipBindOverlap refuses a recipe mount whose container path is one
// the staging manifest binds: a file of an export that the block's skip
// globs keep on the NAS is bound read-only, file by file, from the export's
// bind manifest at serve time (page15 on exl3). A hand-written mount of the
// same path would make Docker refuse the container at start, on every node;
// here it is a render error naming both.
func checkSkipBindOverlap(r *contract.Recipe, i int, dst string) error {
	d := filepath.Clean(dst)
	for si, s := range r.Staging {
		if s.Kind != "hub-mirror" || len(s.Skip) == 0 {
			continue
		}
		for ei, e := range s.Exports {
			if e.Mount == "" {
				continue
			}
			m := filepath.Clean(e.Mount)
			if !isUnder(d, m) {
				continue
			}
			rel, err := filepath.Rel(m, d)
			if err != nil {
				continue
			}
			for _, g := range s.Skip {
				if ok, _ := doublestar.Match(g, filepath.ToSlash(rel)); ok {
					return recipeErr(r, fmt.Sprintf("mounts[%d].dst", i), "%s is also bound by staging[%d] (export of %s at %s): %s matches its skip glob %q, so the staging manifest binds that NAS file there read-only at serve time; remove this [[mounts]] entry (two binds at one path are refused by Docker)", dst, si, s.Exports[ei].Repo, e.Mount, rel, g)
				}
			}
		}
	}
	return nil
}

// renderMounts binds the recipe's mounts and the staged data: sparse-rows
// dst at its mount (read-only, EnvVar pointing at it); a hub mirror's
// DST/hub where the recipe bound hf_cache_dir (HF_HUB_CACHE set, offline);
// export trees read-only at their mounts.
//
// A recipe mount's source must lie inside one of node n's roots or a
// shared root (read-only there, as node workers bind the NAS) unless the
// mount says host = true: a recipe cannot bind /etc by accident.
func renderMounts(cfg *config.Config, r *contract.Recipe, v *vars, n *config.Node, env map[string]string, rank, tp int, hfMount *contract.Mount) ([]contract.Mount, error) {
	var hub *contract.Staging
	for i := range r.Staging {
		if r.Staging[i].Kind == "hub-mirror" {
			hub = &r.Staging[i]
			break
		}
	}
	hfRoot := ""
	if cfg.HFCacheDir != "" {
		hfRoot = filepath.Clean(cfg.HFCacheDir)
	}
	var mounts []contract.Mount
	hubBound := false
	hubMount := ""
	if hub != nil && hub.Mount != "" {
		hubMount = hub.Mount
	}
	if hfMount != nil {
		mounts = append(mounts, *hfMount)
	}
	for i, m := range r.Mounts {
		src, err := v.render(fmt.Sprintf("mounts[%d].src", i), m.Src)
		if err != nil {
			return nil, err
		}
		dst, err := v.render(fmt.Sprintf("mounts[%d].dst", i), m.Dst)
		if err != nil {
			return nil, err
		}
		// The recipe's bind of the NAS hub cache is replaced by the node's
		// staged mirror: serving from the NAS is what staging exists to avoid.
		// Deeper per-file binds (kept on the NAS on purpose) stay.
		if hub != nil && hfRoot != "" && !hubBound && (filepath.Clean(src) == hfRoot || filepath.Clean(src) == filepath.Join(hfRoot, "hub")) {
			if hubMount == "" {
				hubMount = dst
			}
			mounts = append(mounts, contract.Mount{Src: hub.HubDir(), Dst: hubMount, ReadOnly: true})
			hubBound = true
			continue
		}
		if !m.Host {
			if err := checkMountSource(cfg, n, src, m.ReadOnly); err != nil {
				return nil, recipeErr(r, fmt.Sprintf("mounts[%d].src", i), "%v", err)
			}
		}
		if m.Create {
			if err := checkCreateSource(cfg, n, src, m.Host); err != nil {
				return nil, recipeErr(r, fmt.Sprintf("mounts[%d].create", i), "%v", err)
			}
		}
		if err := checkSkipBindOverlap(r, i, dst); err != nil {
			return nil, err
		}
		mounts = append(mounts, contract.Mount{Src: src, Dst: dst, ReadOnly: m.ReadOnly, Host: m.Host, Create: m.Create})
	}
	for i, s := range r.Staging {
		switch s.Kind {
		case "hub-mirror":
			if &r.Staging[i] == hub {
				if !hubBound {
					if hubMount == "" {
						hubMount = DefaultHubCacheMount
					}
					mounts = append(mounts, contract.Mount{Src: s.HubDir(), Dst: hubMount, ReadOnly: true})
				}
				env["HF_HUB_CACHE"] = hubMount
				env["HF_HUB_OFFLINE"] = "1"
			} else if s.Mount != "" {
				mounts = append(mounts, contract.Mount{Src: s.HubDir(), Dst: s.Mount, ReadOnly: true})
			}
			for _, e := range s.Exports {
				if e.Mount != "" {
					mounts = append(mounts, contract.Mount{Src: s.ExportPath(e), Dst: e.Mount, ReadOnly: true})
				}
			}
		case "sparse-rows":
			if s.Mount != "" {
				mounts = append(mounts, contract.Mount{Src: s.Dst, Dst: s.Mount, ReadOnly: true})
				if s.EnvVar != "" {
					env[s.EnvVar] = s.Mount
				}
			}
			if s.RowsEnv != "" && s.Rows > 0 {
				// The table's total (the runtime tiles it itself); the
				// rank must own rows of it.
				if _, err := tileCount(s.Rows, tp, rank); err != nil {
					return nil, recipeErr(r, fmt.Sprintf("staging[%d].rows", i), "%v", err)
				}
				env[s.RowsEnv] = strconv.FormatInt(s.Rows, 10)
			}
		}
	}
	seen := map[string]string{}
	for _, m := range mounts {
		d := filepath.Clean(m.Dst)
		if prev, dup := seen[d]; dup {
			return nil, recipeErr(r, "mounts", "two binds land at %s (%s and %s): Docker refuses duplicate mount points; change one dst", d, prev, m.Src)
		}
		seen[d] = m.Src
	}
	// Parents before children (an export at /model before per-file binds
	// under /model/...), whatever order the recipe listed them in.
	sort.SliceStable(mounts, func(i, j int) bool { return depth(mounts[i].Dst) < depth(mounts[j].Dst) })
	return mounts, nil
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// tileCount is the number of rows rank owns of rows split over tp ranks,
// the same split as sparserows.Tile (kept here so lane does not import an
// engine): base = rows/tp, plus one for ranks below rows%tp.
func tileCount(rows int64, tp, rank int) (int64, error) {
	if rank >= tp {
		// Ranks beyond the TP group (tensor_parallel < nnodes) hold the
		// same split as their rank modulo tp.
		rank %= tp
	}
	if rows < int64(tp) {
		return 0, fmt.Errorf("table has %d rows, fewer than tp=%d ranks", rows, tp)
	}
	count := rows / int64(tp)
	if int64(rank) < rows%int64(tp) {
		count++
	}
	return count, nil
}

// isUnder says whether p lies strictly below dir (both clean).
func isUnder(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

func hasDotDot(p string) bool {
	for _, seg := range strings.Split(filepath.ToSlash(p), "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}
