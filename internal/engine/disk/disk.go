package disk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// ServedName is the file in each root recording when a serve last used a
// path beneath it: the ledgers say when data was verified, not when it was
// used, and LRU pruning needs the latter.
const ServedName = ".sparklane-served.json"

// Block is one [[staging]] block as the control side knows it from the
// recipes: the lanes that stage it (two lanes may share a dst) and where.
type Block struct {
	// Lanes are every lane whose recipe stages this dst on the node.
	Lanes []string `json:"lanes"`
	// ID is the block's id in the (first) lane's recipe.
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Dst is the block's dst as configured; Local is the same path as the
	// node's worker sees it (fs_root applied).
	Dst   string `json:"dst"`
	Local string `json:"local"`
	// Exports are a hub-mirror block's export trees (links into the
	// mirror), as configured and local: a serve mounts them, so they
	// count as the block's use, and they go with the block (left behind
	// they would be dangling links).
	Exports      []string `json:"exports,omitempty"`
	LocalExports []string `json:"local_exports,omitempty"`
}

// Usage is what the node's disk says of one block.
type Usage struct {
	Block
	// Root is the node root holding the block (local path).
	Root string `json:"root"`
	// Present is false when nothing is staged at dst.
	Present bool `json:"present"`
	// Bytes are the bytes the block occupies on disk (allocated blocks,
	// each inode counted once): what a prune frees.
	Bytes int64 `json:"bytes"`
	// VerifiedAt is the newest verification in the block's ledger (zero:
	// no ledger); LastServed the last time a serve mounted it (zero:
	// never since sparklane began recording).
	VerifiedAt time.Time `json:"verified_at,omitempty"`
	LastServed time.Time `json:"last_served,omitempty"`
	// Error is why the block could not be read (its dst is outside the
	// roots, a link escapes them, ...); the block is then never pruned.
	Error string `json:"error,omitempty"`
	// inodes are the block's inodes (dst and exports), with how many of
	// their links the block holds: what removing it frees (frees).
	inodes map[[2]uint64]*inodeUse
}

// inodeUse is one inode met in a block.
type inodeUse struct {
	links uint64 // its links met in the block
	nlink uint64 // its link count
	bytes int64  // its allocated bytes
	dir   bool
}

// Root is one node root: its free space and the blocks beneath it.
type Root struct {
	Root   string  `json:"root"`
	Free   int64   `json:"free"`
	Error  string  `json:"error,omitempty"`
	Blocks []Usage `json:"blocks"`
}

// Scan reads every block's usage on this node. roots are the node's local
// root paths; a block outside all of them is listed with an error.
func Scan(roots []string, blocks []Block) []Root {
	out := make([]Root, 0, len(roots))
	idx := map[string]int{}
	for _, r := range roots {
		r = filepath.Clean(r)
		rr := Root{Root: r}
		free, err := staging.FreeBytes(r)
		if err != nil {
			rr.Error = err.Error()
		}
		rr.Free = free
		idx[r] = len(out)
		out = append(out, rr)
	}
	served := map[string]map[string]time.Time{}
	for _, b := range blocks {
		u := Usage{Block: b}
		root, err := staging.RootFor(b.Local, roots)
		if err != nil {
			u.Error = err.Error()
			out = append(out, Root{Root: b.Local, Error: "not under any root", Blocks: []Usage{u}})
			continue
		}
		u.Root = filepath.Clean(root)
		if _, ok := served[u.Root]; !ok {
			served[u.Root], _ = loadServed(u.Root)
		}
		scanBlock(&u, roots)
		for p, at := range served[u.Root] {
			if b.owns(p) && at.After(u.LastServed) {
				u.LastServed = at
			}
		}
		i := idx[u.Root]
		out[i].Blocks = append(out[i].Blocks, u)
	}
	for i := range out {
		sort.Slice(out[i].Blocks, func(a, b int) bool { return out[i].Blocks[a].Local < out[i].Blocks[b].Local })
	}
	return out
}

// owns reports whether path p is the block's dst or one of its exports, or
// beneath them.
func (b Block) owns(p string) bool {
	if within(p, b.Local) {
		return true
	}
	for _, e := range b.LocalExports {
		if within(p, e) {
			return true
		}
	}
	return false
}

func within(p, dir string) bool {
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// scanBlock fills u's size and ledger time, reading beneath the root only.
func scanBlock(u *Usage, roots []string) {
	t, err := staging.OpenTree(u.Local, roots, false)
	if err != nil {
		u.Error = err.Error()
		return
	}
	defer t.Close()
	d, err := t.Dir(u.Local, false)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		u.Error = err.Error()
		return
	}
	defer d.Close()
	u.Present = true
	seen := map[[2]uint64]*inodeUse{}
	u.inodes = seen
	n, err := duAt(d.Fd(), ".", u.Local, seen)
	u.Bytes = n
	if err != nil {
		u.Error = err.Error()
	}
	for _, e := range u.LocalExports {
		ed, err := t.Dir(e, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			u.Error = err.Error()
			continue
		}
		n, err := duAt(ed.Fd(), ".", e, seen)
		ed.Close()
		u.Bytes += n
		if err != nil {
			u.Error = err.Error()
		}
	}
	ledDir := d
	if u.Kind == hubmirror.Kind {
		hd, err := t.Dir(filepath.Join(u.Local, "hub"), false)
		if err != nil {
			return
		}
		defer hd.Close()
		ledDir = hd
	}
	name := sparserows.LedgerName
	if u.Kind == hubmirror.Kind {
		name = hubmirror.LedgerName
	}
	l, err := ledger.LoadIn(ledDir, name, u.Kind)
	if err != nil {
		return
	}
	for _, e := range l.Entries {
		if e.VerifiedAt.After(u.VerifiedAt) {
			u.VerifiedAt = e.VerifiedAt
		}
	}
}

// duAt sums the allocated bytes of name in dirfd and, for a directory,
// everything beneath it, never following a link; each inode counts once,
// and seen counts the links to it met.
func duAt(dirfd int, name, path string, seen map[[2]uint64]*inodeUse) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	key := [2]uint64{uint64(st.Dev), st.Ino}
	if in := seen[key]; in != nil {
		in.links++
		return 0, nil
	}
	total := st.Blocks * 512
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	seen[key] = &inodeUse{links: 1, nlink: uint64(st.Nlink), bytes: total, dir: isDir}
	if !isDir {
		return total, nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return total, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return total, &fs.PathError{Op: "readdir", Path: path, Err: err}
	}
	for _, n := range names {
		s, err := duAt(fd, n, filepath.Join(path, n), seen)
		total += s
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// servedFile is ServedName's content: path beneath the root → last serve.
type servedFile struct {
	Version int                  `json:"version"`
	Paths   map[string]time.Time `json:"paths"`
}

var servedMu sync.Mutex

func loadServed(root string) (map[string]time.Time, error) {
	b, err := os.ReadFile(filepath.Join(root, ServedName))
	if err != nil {
		return nil, err
	}
	var f servedFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %v: delete it (only last-served times are lost)", filepath.Join(root, ServedName), err)
	}
	return f.Paths, nil
}

// RecordServed notes that a serve mounted paths at at. Paths outside every
// root (the NAS, the hub cache) are ignored; each root's record is
// rewritten atomically beneath it.
func RecordServed(roots []string, paths []string, at time.Time) error {
	servedMu.Lock()
	defer servedMu.Unlock()
	byRoot := map[string][]string{}
	for _, p := range paths {
		if r, err := staging.RootFor(p, roots); err == nil {
			byRoot[filepath.Clean(r)] = append(byRoot[filepath.Clean(r)], filepath.Clean(p))
		}
	}
	var errs []error
	for root, ps := range byRoot {
		errs = append(errs, updateServed(root, roots, func(m map[string]time.Time) {
			for _, p := range ps {
				m[p] = at.UTC()
			}
		}))
	}
	return errors.Join(errs...)
}

func updateServed(root string, roots []string, edit func(map[string]time.Time)) error {
	t, err := staging.OpenTree(root, roots, false)
	if err != nil {
		return err
	}
	defer t.Close()
	d, err := t.Dir(root, false)
	if err != nil {
		return err
	}
	defer d.Close()
	m, err := loadServed(root)
	if err != nil || m == nil {
		m = map[string]time.Time{}
	}
	edit(m)
	b, err := json.MarshalIndent(servedFile{Version: 1, Paths: m}, "", " ")
	if err != nil {
		return err
	}
	return ledger.WriteFileAtomicIn(d, ServedName, b, 0o644)
}

// PruneSpec says which blocks to remove on this node.
type PruneSpec struct {
	// Lanes prunes every block of these lanes (a block another, kept lane
	// shares is kept too, and said so).
	Lanes []string `json:"lanes,omitempty"`
	// LRU prunes least recently served blocks first until every root
	// holding blocks has Free bytes free.
	LRU  bool  `json:"lru,omitempty"`
	Free int64 `json:"free,omitempty"`
	// Protected lanes are running (or serving) somewhere: their blocks are
	// never removed.
	Protected []string `json:"protected,omitempty"`
	// DryRun chooses and reports, removing nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Images: an LRU prune also removes the node's images that no lane
	// names and no container (running or not) uses, least recently used
	// first, until Docker's data root has Free bytes free.
	Images bool `json:"images,omitempty"`
}

// Removal is one block chosen for pruning (and, unless a dry run,
// removed).
type Removal struct {
	Usage
	// Removed is true once it is gone; Error when removing it failed.
	Removed bool   `json:"removed"`
	Error   string `json:"error,omitempty"`
}

// PruneResult is a node's prune: what was chosen, kept and why, and the
// free space per root before and after.
type PruneResult struct {
	Removals []Removal `json:"removals"`
	// Kept are the blocks a lane prune or LRU could not take, with why.
	Kept []string `json:"kept,omitempty"`
	// FreeBefore/FreeAfter per root; Enough is false when --free could not
	// be reached with the blocks allowed.
	FreeBefore map[string]int64 `json:"free_before"`
	FreeAfter  map[string]int64 `json:"free_after"`
	Enough     bool             `json:"enough"`
}

// Choose picks the blocks spec removes from a Scan, in order, and what it
// keeps and why. LRU takes, per root, never-served blocks first, then by
// last serve, then by verification time, until the root's free space plus
// what removing what it took frees there (frees: a block whose files are
// all linked from blocks that stay, or on another filesystem, frees
// nothing and is kept) reaches spec.Free.
func Choose(scan []Root, spec PruneSpec) (take []Usage, kept []string, enough bool) {
	protected := map[string]bool{}
	for _, l := range spec.Protected {
		protected[l] = true
	}
	prune := map[string]bool{}
	for _, l := range spec.Lanes {
		prune[l] = true
	}
	enough = true
	for _, r := range scan {
		var cands []Usage
		for _, u := range r.Blocks {
			if len(spec.Lanes) > 0 {
				ours := false
				for _, l := range u.Lanes {
					ours = ours || prune[l]
				}
				if !ours {
					continue
				}
			}
			if u.Error != "" {
				kept = append(kept, fmt.Sprintf("%s (%s): unreadable, not pruned: %s", u.Local, strings.Join(u.Lanes, ","), u.Error))
				continue
			}
			if !u.Present {
				continue
			}
			var hold []string
			for _, l := range u.Lanes {
				if protected[l] {
					hold = append(hold, l+" is running")
				} else if len(spec.Lanes) > 0 && !prune[l] {
					hold = append(hold, "lane "+l+" stages it too")
				}
			}
			if len(hold) > 0 {
				kept = append(kept, fmt.Sprintf("%s (%s): kept, %s", u.Local, strings.Join(u.Lanes, ","), strings.Join(hold, ", ")))
				continue
			}
			cands = append(cands, u)
		}
		if !spec.LRU {
			take = append(take, cands...)
			continue
		}
		sort.SliceStable(cands, func(a, b int) bool {
			x, y := cands[a], cands[b]
			if !x.LastServed.Equal(y.LastServed) {
				return x.LastServed.Before(y.LastServed)
			}
			return x.VerifiedAt.Before(y.VerifiedAt)
		})
		free := r.Free
		dev, derr := staging.DevOf(r.Root)
		var mine []Usage
		for _, u := range cands {
			if free >= spec.Free {
				break
			}
			if derr == nil && frees([]Usage{u}, dev) == 0 {
				kept = append(kept, fmt.Sprintf("%s (%s): kept, removing it would free nothing on %s's filesystem (its files are linked from blocks that stay, or lie on another filesystem)", u.Local, strings.Join(u.Lanes, ","), r.Root))
				continue
			}
			take, mine = append(take, u), append(mine, u)
			if derr == nil {
				free = r.Free + frees(mine, dev)
			} else {
				free += u.Bytes
			}
		}
		if free < spec.Free && r.Error == "" && len(r.Blocks) > 0 {
			enough = false
		}
	}
	return take, kept, enough
}

// Prune scans, chooses and (unless spec.DryRun) removes whole blocks, each
// with staging.Tree.RemoveAll beneath its root: a link inside a block is
// removed, never followed. Its last-served records go with it.
func Prune(roots []string, blocks []Block, spec PruneSpec) PruneResult {
	scan := Scan(roots, blocks)
	res := PruneResult{FreeBefore: map[string]int64{}, FreeAfter: map[string]int64{}}
	for _, r := range scan {
		if r.Error == "" {
			res.FreeBefore[r.Root] = r.Free
		}
	}
	take, kept, enough := Choose(scan, spec)
	res.Kept, res.Enough = kept, enough
	for _, u := range take {
		rm := Removal{Usage: u}
		if !spec.DryRun {
			if err := removeBlock(u, roots); err != nil {
				rm.Error = err.Error()
			} else {
				rm.Removed = true
			}
		}
		res.Removals = append(res.Removals, rm)
	}
	for root := range res.FreeBefore {
		if f, err := staging.FreeBytes(root); err == nil {
			res.FreeAfter[root] = f
		}
	}
	return res
}

func removeBlock(u Usage, roots []string) error {
	t, err := staging.OpenTree(u.Local, roots, false)
	if err != nil {
		return err
	}
	defer t.Close()
	for _, p := range append(append([]string(nil), u.LocalExports...), u.Local) {
		if staging.UnderRoots(p, []string{t.Root}) != nil {
			return fmt.Errorf("remove block %s (lanes %s): %s is not under the root %s: not removed", u.Local, strings.Join(u.Lanes, ","), p, t.Root)
		}
		if err := t.RemoveAll(p); err != nil {
			return fmt.Errorf("remove block %s (lanes %s): %w", u.Local, strings.Join(u.Lanes, ","), err)
		}
	}
	return updateServed(u.Root, roots, func(m map[string]time.Time) {
		for p := range m {
			if u.owns(p) {
				delete(m, p)
			}
		}
	})
}
