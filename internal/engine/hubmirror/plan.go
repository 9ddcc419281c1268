package hubmirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/bmatcuk/doublestar/v4"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/hubcache"
)

// fileItem is one regular file the mirror holds: a blob, a real file inside
// a snapshot, or a ref.
type fileItem struct {
	Rel    string // mirror-relative path, the ledger key
	Src    string // source file (links resolved syntactically)
	SrcRel string // Src relative to spec.Src (absolute when outside it)
	Size   int64
	Mode   fs.FileMode
	// WantSHA is the blob name when it is an LFS sha256 name.
	WantSHA string
	// ino orders small files by inode: near-disk order on a cold tree.
	ino uint64
	// known: planned from the ledger, not from the source (see known);
	// Mode is then unknown until the file must be copied (needSource).
	known bool
}

// linkItem is one snapshot entry that becomes a relative symlink to a blob.
type linkItem struct {
	Rel    string // mirror-relative path of the entry
	Target string // relative link text, ../../blobs/SHA
}

// entry is one snapshot entry of a repo's revision, as exports need it.
type entry struct {
	Path    string // relative to snapshots/REV/
	Skipped bool
	Src     string // resolved source file (bind source when skipped)
	File    string // mirror-relative path of the file holding its content
}

type repoPlan struct {
	Repo    string
	Dir     string // models--org--name
	Revs    map[string][]entry
	MainRev string // refs/main when it names a snapshot
}

// plan is everything a pass will touch, computed read-only from the source.
type plan struct {
	Files        []*fileItem
	Links        []linkItem
	Repos        map[string]*repoPlan
	SkippedFiles int
	SkippedBytes int64
	TotalBytes   int64
}

// join resolves a link target syntactically, relative to the link's dir.
func join(link, target string) string {
	if filepath.IsAbs(target) {
		return filepath.Clean(target)
	}
	return filepath.Clean(filepath.Join(filepath.Dir(link), target))
}

// resolve follows a chain of links from p syntactically and returns the
// final path and its Lstat info. The kernel still walks intermediate path
// components (a src reached through a symlink works); we never compare
// realpaths.
func resolve(p string) (string, fs.FileInfo, error) {
	for i := 0; i < 40; i++ {
		fi, err := os.Lstat(p)
		if err != nil {
			return p, nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return p, fi, nil
		}
		t, err := os.Readlink(p)
		if err != nil {
			return p, nil, err
		}
		p = join(p, t)
	}
	return p, nil, fmt.Errorf("%s: more than 40 links in a chain", p)
}

func (s *spec) srcRel(p string) string {
	if within(p, s.Src) {
		if r, err := filepath.Rel(s.Src, p); err == nil {
			return r
		}
	}
	return p
}

func (s *spec) skipped(rel string) bool {
	rel = filepath.ToSlash(rel)
	for _, g := range s.Skip {
		if ok, _ := doublestar.Match(g, rel); ok {
			return true
		}
	}
	return false
}

// checkReadable opens a source file once, so an unreadable file fails the
// pass before anything is written.
func checkReadable(path, what string) error {
	// One faccessat with the effective ids (what open would check) instead
	// of an open and a close: it shows on trees of many small files.
	if err := unix.Faccessat2(unix.AT_FDCWD, path, unix.R_OK, unix.AT_EACCESS); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return checkReadableOpen(path, what)
		}
		err = &fs.PathError{Op: "access", Path: path, Err: err}
		if errors.Is(err, fs.ErrPermission) {
			return fault.Permanent(fault.SourceMissing, fmt.Errorf("%s: cannot read source file %s (%v): give the worker's user read access on the NAS", what, path, err))
		}
		return fmt.Errorf("%s: open source file %s: %w", what, path, err)
	}
	return nil
}

// checkReadableOpen is checkReadable by opening the file, for kernels
// without faccessat2.
func checkReadableOpen(path, what string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		err = &fs.PathError{Op: "open", Path: path, Err: err}
		if errors.Is(err, fs.ErrPermission) {
			return fault.Permanent(fault.SourceMissing, fmt.Errorf("%s: cannot read source file %s (%v): give the worker's user read access on the NAS", what, path, err))
		}
		return fmt.Errorf("%s: open source file %s: %w", what, path, err)
	}
	return unix.Close(fd)
}

// realPath is the kernel's resolution of p (every component, every link
// followed), read back from the descriptor of an O_PATH open: three
// syscalls, no read of the file's content.
func realPath(p string) (string, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
}

// readRoots are the real paths source links may resolve into: src and the
// shared roots (those that exist).
func (s *spec) readRoots() []string {
	var out []string
	for _, r := range append([]string{s.Src}, s.SharedRoots...) {
		if rp, err := filepath.EvalSymlinks(filepath.Clean(r)); err == nil {
			out = append(out, rp)
		}
	}
	return out
}

// checkInside refuses a source path whose real location is outside every
// read root: a link (or a directory link on its way) out of the NAS would
// otherwise copy host files into the mirror or bind them into a container.
// what names the entry for the message.
func (s *spec) checkInside(p, what string, roots []string) error {
	real, err := realPath(p)
	if err != nil {
		return nil // the caller's own resolution reports missing or unreadable paths
	}
	for _, r := range roots {
		if within(real, r) {
			return nil
		}
	}
	how := "resolves to " + real
	if t, err := os.Readlink(p); err == nil {
		how = fmt.Sprintf("links to %q, which resolves to %s", t, real)
	}
	return fault.Permanent(fault.LinkEscape, fmt.Errorf("%s %s %s, outside src %s and the shared roots %v: a source link may only point inside them; fix the link on the NAS or skip the entry", what, p, how, s.Src, s.SharedRoots))
}

// realDirs caches the kernel's resolution of source directories, so the
// entries of one snapshot directory pay for it once, not once each.
type realDirs struct {
	mu sync.Mutex
	m  map[string]realDir
}

type realDir struct {
	real string
	err  error
}

func (r *realDirs) get(dir string) (string, error) {
	r.mu.Lock()
	v, ok := r.m[dir]
	r.mu.Unlock()
	if ok {
		return v.real, v.err
	}
	real, err := realPath(dir)
	r.mu.Lock()
	r.m[dir] = realDir{real, err}
	r.mu.Unlock()
	return real, err
}

// checkLinkInside is checkInside for the snapshot link p whose text is
// target, first being target joined to p's directory and final the end of
// its chain. When the chain is one hop, p's directory has no link on its
// way (its real path is itself) and target climbs only with leading ".."
// (or is absolute and clean), the kernel's resolution of p is final's
// directory resolved plus final's name, so cached directory resolutions
// answer it; any other shape asks the kernel for p itself.
func (s *spec) checkLinkInside(p, target, first, final string, roots []string, dirs *realDirs) error {
	if first == final && plainClimb(target) {
		if dr, err := dirs.get(filepath.Dir(p)); err == nil && (dr == filepath.Dir(p) || filepath.IsAbs(target)) {
			if fr, err := dirs.get(filepath.Dir(final)); err == nil {
				real := filepath.Join(fr, filepath.Base(final))
				for _, r := range roots {
					if within(real, r) {
						return nil
					}
				}
			}
		}
	}
	return s.checkInside(p, "source entry", roots)
}

// plainClimb reports whether a link's text is clean and uses ".." only as
// leading components (or none, when absolute): then lexical and kernel
// resolution agree once the link's own directory is real.
func plainClimb(target string) bool {
	if target == "" || filepath.Clean(target) != target {
		return false
	}
	parts := strings.Split(target, string(filepath.Separator))
	if filepath.IsAbs(target) {
		parts = parts[1:]
	}
	climbing := !filepath.IsAbs(target)
	for _, part := range parts {
		switch {
		case part == "..":
			if !climbing {
				return false
			}
		case part == "." || part == "":
			return false
		default:
			climbing = false
		}
	}
	return true
}

// buildPlan walks the repos of s read-only. Dangling links, missing repos
// and unreadable files fail here, before any write.
// kn, when not nil, gives what the ledger proved; it is called once the
// snapshots are listed, so a ledger read beside the walk overlaps it.
func buildPlan(ctx context.Context, s *spec, kn func() *known) (*plan, error) {
	pl := &planner{s: s, kn: kn, p: &plan{Repos: map[string]*repoPlan{}}, files: map[string]*fileItem{}, roots: s.readRoots()}
	for _, repo := range s.Repos {
		if err := pl.repo(ctx, repo); err != nil {
			return nil, err
		}
	}
	return pl.finish(), nil
}

// planner is a plan being built: the files placed so far by mirror path,
// and the real roots source links may resolve into.
type planner struct {
	s     *spec
	kn    func() *known // nil, or returning nil: every entry is read on the NAS
	p     *plan
	files map[string]*fileItem
	roots []string
}

// repoSrc is one repo on the NAS as the planner walks it.
type repoSrc struct {
	repo string // org/name
	dir  string // models--org--name
	root string // src/models--org--name
}

// repo plans one repo: its refs, then its snapshots' entries.
func (pl *planner) repo(ctx context.Context, repo string) error {
	r := repoSrc{repo: repo, dir: hubcache.RepoDir(repo)}
	r.root = filepath.Join(pl.s.Src, r.dir)
	if err := pl.checkRepoDirs(r); err != nil {
		return err
	}
	// blobs/ is listed (for partial downloads) while the snapshots are
	// walked and resolved: on a cold NAS both wait on the server.
	partial := listPartial(filepath.Join(r.root, hubcache.Blobs))
	rp := &repoPlan{Repo: repo, Dir: r.dir, Revs: map[string][]entry{}}
	pl.p.Repos[repo] = rp
	if err := pl.refs(r, rp); err != nil {
		return err
	}
	snaps := filepath.Join(r.root, hubcache.Snapshots)
	if fi, err := os.Stat(snaps); err != nil || !fi.IsDir() {
		return fault.Permanent(fault.SourceMissing, fmt.Errorf("repo %s: %s has no snapshots/ (%v): the download on the NAS is incomplete", repo, r.root, errOr(err, "not a directory")))
	}
	cands, err := pl.walkSnapshots(ctx, r, snaps)
	if err != nil {
		return err
	}
	pl.takeKnown(r, cands)
	if err := pl.resolveAll(ctx, r, cands); err != nil {
		return err
	}
	// A download still under way, or one that stopped half-way, is
	// refused before anything is written (naming what is missing).
	if err := checkComplete(repo, r.root, revFiles(cands), partial()); err != nil {
		return err
	}
	for _, c := range cands {
		if err := pl.place(r, rp, c); err != nil {
			return err
		}
	}
	return nil
}

// checkRepoDirs refuses a repo missing on the NAS, and one whose own
// directories lead out of src and the shared roots. They are checked
// first: a snapshots/ linking to / would otherwise be walked whole before
// its entries are refused.
func (pl *planner) checkRepoDirs(r repoSrc) error {
	fi, err := os.Stat(r.root)
	if err != nil || !fi.IsDir() {
		return fault.Permanent(fault.SourceMissing, fmt.Errorf("repo %s: %s is not in src (%v): download it on the NAS or fix repos/src", r.repo, r.root, errOr(err, "not a directory")))
	}
	for _, d := range []string{r.root, filepath.Join(r.root, hubcache.Refs), filepath.Join(r.root, hubcache.Snapshots), filepath.Join(r.root, hubcache.Blobs)} {
		if err := pl.s.checkInside(d, "repo "+r.repo+" directory", pl.roots); err != nil {
			return err
		}
	}
	return nil
}

// addFile places it in the mirror, once: a second source for the same
// mirror path is refused. what, when set, names it for the readability
// check of its source.
func (pl *planner) addFile(it *fileItem, what string) error {
	if old, ok := pl.files[it.Rel]; ok {
		if old.Src != it.Src {
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("mirror file %s would come from both %s and %s: fix the source repo's links", it.Rel, old.Src, it.Src))
		}
		return nil
	}
	if what != "" {
		if err := checkReadable(it.Src, what); err != nil {
			return err
		}
	}
	pl.files[it.Rel] = it
	return nil
}

// refs plans the repo's refs/ (small files, copied as they are) and reads
// refs/main, the revision exports mirror.
func (pl *planner) refs(r repoSrc, rp *repoPlan) error {
	refs := filepath.Join(r.root, hubcache.Refs)
	if _, err := os.Stat(refs); err != nil {
		return nil
	}
	err := filepath.WalkDir(refs+string(filepath.Separator), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("repo %s: walk %s: %w", r.repo, path, err)
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(r.root, path)
		final, fi, err := resolve(path)
		if err != nil {
			return dangling(path, final, err)
		}
		if err := pl.s.checkInside(path, "ref", pl.roots); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("repo %s: ref %s is not a regular file", r.repo, path)
		}
		return pl.addFile(&fileItem{Rel: filepath.Join(r.dir, rel), Src: final, SrcRel: pl.s.srcRel(final), Size: fi.Size(), Mode: fi.Mode().Perm()}, "repo "+r.repo)
	})
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(refs, "main")); err == nil {
		rp.MainRev = strings.TrimSpace(string(b))
	}
	return nil
}

// cand is one snapshot entry: found by the walk, then resolved.
type cand struct {
	path, rel, rev, inRev string
	link, skip            bool
	final, first          string
	fi                    fs.FileInfo
	err                   error
	// from the ledger (known.entry): the link's text and its blob
	kt   string
	kent ledger.Entry
	kok  bool
}

// walkSnapshots lists the entries of the repo's snapshots (snaps) in
// order, cheaply: they are resolved afterwards, in parallel, since cold
// lstat/readlink/open on a NAS is latency-bound.
func (pl *planner) walkSnapshots(ctx context.Context, r repoSrc, snaps string) ([]*cand, error) {
	var cands []*cand
	err := filepath.WalkDir(snaps+string(filepath.Separator), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("repo %s: walk %s: %w", r.repo, path, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			return nil
		}
		rel, ok := strings.CutPrefix(path, snaps+string(filepath.Separator)) // REV/path
		if !ok {
			rel, _ = filepath.Rel(snaps, path)
		}
		rev, inRev, ok := strings.Cut(rel, string(filepath.Separator))
		if !ok {
			return nil // a stray file directly in snapshots/
		}
		cands = append(cands, &cand{path: path, rel: rel, rev: rev, inRev: inRev, link: d.Type()&fs.ModeSymlink != 0, skip: pl.s.skipped(inRev)})
		return nil
	})
	return cands, err
}

// takeKnown plans from the ledger (pl.kn) the link entries it proved:
// they are not read on the NAS.
func (pl *planner) takeKnown(r repoSrc, cands []*cand) {
	if pl.kn == nil {
		return
	}
	kn := pl.kn()
	if kn == nil {
		return
	}
	for _, c := range cands {
		if c.link && !c.skip {
			c.kt, c.kent, c.kok = kn.entry(r.dir, c.rev, filepath.Join(r.dir, hubcache.Snapshots, c.rel))
		}
	}
}

// resolveAll resolves the entries in parallel. Each entry's error is kept
// and reported in plan order (place), so the message does not depend on
// scheduling.
func (pl *planner) resolveAll(ctx context.Context, r repoSrc, cands []*cand) error {
	dirReal := &realDirs{m: map[string]realDir{}}
	return forEach(ctx, len(cands), metaWorkers, func(_ context.Context, i int) error {
		if c := cands[i]; !c.kok { // planned from the ledger: nothing to read
			c.resolve(pl.s, r.repo, pl.roots, dirReal)
		}
		return nil
	})
}

// resolve follows the entry's links to the file that holds its content
// and checks, as the entry's error, that it stays inside the read roots
// (skipped entries too: their targets are bound into the container from
// the bind manifest) and, unless skipped, is a readable regular file.
func (c *cand) resolve(s *spec, repo string, roots []string, dirReal *realDirs) {
	var rerr error
	var target string
	if c.link {
		t, err := os.Readlink(c.path)
		if err != nil {
			c.err = fmt.Errorf("repo %s: readlink %s: %w", repo, c.path, err)
			return
		}
		target = t
		c.first = join(c.path, t)
		// The walk's own link is read once: resolution goes on from its
		// target.
		c.final, c.fi, rerr = resolve(c.first)
	} else {
		c.final, c.fi, rerr = resolve(c.path)
	}
	if c.link && rerr == nil {
		if c.err = s.checkLinkInside(c.path, target, c.first, c.final, roots, dirReal); c.err != nil {
			return
		}
	}
	switch {
	case c.skip:
	case rerr != nil:
		c.err = dangling(c.path, c.final, rerr)
	case !c.fi.Mode().IsRegular():
		c.err = fault.Permanent(fault.InvalidSpec, fmt.Errorf("repo %s: snapshot entry %s resolves to %s, which is not a regular file: skip it or fix the source", repo, c.path, c.final))
	default:
		c.err = checkReadable(c.final, fmt.Sprintf("repo %s entry %s", repo, c.path))
	}
}

// revFiles maps each revision of cands that holds a shard index to the
// slash paths of its entries, skipped ones included (they exist, they are
// bound), for checkComplete; a revision without one has nothing to check,
// and a pass over thousands of entries builds no map of them.
func revFiles(cands []*cand) map[string]map[string]bool {
	indexed := map[string]bool{}
	for _, c := range cands {
		if strings.HasSuffix(c.inRev, shardIndexSuffix) {
			indexed[c.rev] = true
		}
	}
	out := map[string]map[string]bool{}
	for _, c := range cands {
		if !indexed[c.rev] {
			continue
		}
		if out[c.rev] == nil {
			out[c.rev] = map[string]bool{}
		}
		out[c.rev][filepath.ToSlash(c.inRev)] = true
	}
	return out
}

// place adds a resolved entry to the plan: a skipped entry is counted (and
// bound in exports), an entry known from the ledger takes its link and
// blob from it, any other becomes a file and, when it names a repo blob, a
// link to it.
func (pl *planner) place(r repoSrc, rp *repoPlan, c *cand) error {
	switch {
	case c.err != nil:
		return c.err
	case c.skip:
		var size int64
		if c.fi != nil {
			size = c.fi.Size()
		}
		pl.p.SkippedFiles++
		pl.p.SkippedBytes += size
		rp.Revs[c.rev] = append(rp.Revs[c.rev], entry{Path: c.inRev, Skipped: true, Src: c.final})
		return nil
	case c.kok:
		return pl.placeKnown(r, rp, c)
	}
	mirrorEntry := filepath.Join(r.dir, hubcache.Snapshots, c.rel)
	it := &fileItem{Src: c.final, SrcRel: pl.s.srcRel(c.final), Size: c.fi.Size(), Mode: c.fi.Mode().Perm(), ino: inodeOf(c.fi)}
	// A repo blob: blobs/NAME directly under this repo, judged
	// syntactically (or by shape for absolute links that spell the repo
	// another way).
	if first := c.first; first != "" && (filepath.Dir(first) == filepath.Join(r.root, hubcache.Blobs) || (filepath.Base(filepath.Dir(first)) == hubcache.Blobs && filepath.Base(filepath.Dir(filepath.Dir(first))) == r.dir)) {
		name := filepath.Base(first)
		it.Rel = filepath.Join(r.dir, hubcache.Blobs, name)
		if hubcache.IsSHA256(name) {
			it.WantSHA = name
		}
		target, _ := filepath.Rel(filepath.Dir(mirrorEntry), it.Rel)
		pl.p.Links = append(pl.p.Links, linkItem{Rel: mirrorEntry, Target: target})
	} else {
		it.Rel = mirrorEntry // a real file (or a link out of the repo): copied in place
	}
	if err := pl.addFile(it, ""); err != nil {
		return err
	}
	rp.Revs[c.rev] = append(rp.Revs[c.rev], entry{Path: c.inRev, Src: c.final, File: it.Rel})
	return nil
}

// placeKnown adds an entry planned from the ledger (known): its link's
// text and its blob, whose source is resolved only if it must be copied.
func (pl *planner) placeKnown(r repoSrc, rp *repoPlan, c *cand) error {
	mirrorEntry := filepath.Join(r.dir, hubcache.Snapshots, c.rel)
	it := &fileItem{Rel: c.kent.Source, Src: filepath.Join(pl.s.Src, c.kent.Source), SrcRel: c.kent.Source, Size: c.kent.Size, known: true}
	if hubcache.IsSHA256(filepath.Base(it.Rel)) {
		it.WantSHA = filepath.Base(it.Rel)
	}
	pl.p.Links = append(pl.p.Links, linkItem{Rel: mirrorEntry, Target: c.kt})
	if err := pl.addFile(it, ""); err != nil {
		return err
	}
	rp.Revs[c.rev] = append(rp.Revs[c.rev], entry{Path: c.inRev, Src: it.Src, File: it.Rel})
	return nil
}

// finish lists the placed files in copy order: large files largest first,
// which keeps the parallel copies busy to the end, and small ones in inode
// order (close to disk order on a cold tree); links by path.
func (pl *planner) finish() *plan {
	p := pl.p
	for _, it := range pl.files {
		p.Files = append(p.Files, it)
		p.TotalBytes += it.Size
	}
	sort.Slice(p.Files, func(i, j int) bool {
		a, b := p.Files[i], p.Files[j]
		if (a.Size > smallMax) != (b.Size > smallMax) {
			return a.Size > smallMax
		}
		if a.Size > smallMax && a.Size != b.Size {
			return a.Size > b.Size
		}
		if a.Size <= smallMax && a.ino != b.ino {
			return a.ino < b.ino
		}
		return a.Rel < b.Rel
	})
	sort.Slice(p.Links, func(i, j int) bool { return p.Links[i].Rel < p.Links[j].Rel })
	return p
}

// File is one regular file a Stage of a Spec would bring onto the node.
// Every node of a lane lists the same NAS and so lists the same files,
// which lets a caller that fills the mirror before Stage (internal/engine/relay,
// through OpenTemp) derive the same work on every node without it
// travelling through workflow history.
type File struct {
	// Rel is the mirror-relative path (the ledger key).
	Rel string
	// Src is the NAS file (links resolved syntactically, checked inside
	// src and the shared roots).
	Src string
	// Size is the source's size when listed.
	Size int64
	// Mode is the permission bits the staged file gets (0: 0644).
	Mode fs.FileMode
	// WantSHA is the blob's LFS sha256 name, or empty.
	WantSHA string
}

// Files validates in and lists, read-only, the regular files Stage would
// bring into the mirror, sorted by Rel, with the mirror directory
// (Dst/hub) they land in. Nothing is written.
func Files(ctx context.Context, in Spec) (mirror string, files []File, err error) {
	s, err := validate(in)
	if err != nil {
		return "", nil, err
	}
	p, err := buildPlan(ctx, s, nil)
	if err != nil {
		return "", nil, err
	}
	files = make([]File, 0, len(p.Files))
	for _, it := range p.Files {
		files = append(files, File{Rel: it.Rel, Src: it.Src, Size: it.Size, Mode: it.Mode, WantSHA: it.WantSHA})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Rel < files[j].Rel })
	return s.mirror, files, nil
}

// SourceIncomplete is the permanent fault type of a hub repo whose download
// is not finished: *.incomplete files in its blobs/ (huggingface_hub's
// partial downloads), or a shard index naming shards its snapshot lacks.
// Staging it would give the node a model that fails to load hours later.
const SourceIncomplete = fault.SourceIncomplete

// shardIndexSuffix ends the name of a sharded checkpoint's index
// (model.safetensors.index.json, also in subfolders or for other prefixes).
const shardIndexSuffix = ".safetensors.index.json"

// listPartial lists, in the background, the *.incomplete files
// (huggingface_hub's partial downloads) in the repo's blobs directory;
// the func it returns waits for the list.
func listPartial(blobs string) func() []string {
	ch := make(chan []string, 1)
	go func() {
		var partial []string
		if d, err := os.Open(blobs); err == nil {
			// Names only, in batches: a repo of thousands of blobs is
			// listed without a directory entry each, nor a sort.
			for {
				names, err := d.Readdirnames(1024)
				for _, n := range names {
					if strings.HasSuffix(n, ".incomplete") {
						partial = append(partial, n)
					}
				}
				if err != nil {
					break
				}
			}
			d.Close()
		}
		ch <- partial
	}()
	return sync.OnceValue(func() []string { return <-ch })
}

// checkComplete refuses repo (at root on the NAS) when its blobs/ holds
// *.incomplete files (partial, from listPartial) or when an index in one
// of its snapshots names shards that snapshot lacks. revFiles maps each
// revision to the slash paths of its entries (skipped ones included: they
// exist, they are bound).
func checkComplete(repo, root string, revFiles map[string]map[string]bool, partial []string) error {
	blobs := filepath.Join(root, hubcache.Blobs)
	if len(partial) > 0 {
		sort.Strings(partial)
		return fault.Permanent(SourceIncomplete, fmt.Errorf("repo %s: the download is incomplete: %s holds %d partial file(s) (%s): finish the download on the NAS (hf download %s) and stage again", repo, blobs, len(partial), listSome(partial, 5), repo))
	}
	revs := make([]string, 0, len(revFiles))
	for r := range revFiles {
		revs = append(revs, r)
	}
	sort.Strings(revs)
	for _, rev := range revs {
		files := revFiles[rev]
		idxs := make([]string, 0)
		for f := range files {
			if strings.HasSuffix(f, shardIndexSuffix) {
				idxs = append(idxs, f)
			}
		}
		sort.Strings(idxs)
		for _, idx := range idxs {
			p := filepath.Join(root, hubcache.Snapshots, rev, filepath.FromSlash(idx))
			b, err := os.ReadFile(p)
			if err != nil {
				// Unreadable or dangling: the entry's own resolution says so.
				continue
			}
			var ix struct {
				WeightMap map[string]string `json:"weight_map"`
			}
			if err := json.Unmarshal(b, &ix); err != nil {
				return fault.Permanent(SourceIncomplete, fmt.Errorf("repo %s: shard index %s is not valid JSON (%v): the download is incomplete or corrupt; download it again on the NAS", repo, p, err))
			}
			dir := path.Dir(idx)
			seen := map[string]bool{}
			var missing []string
			for _, shard := range ix.WeightMap {
				rel := path.Clean(path.Join(dir, shard))
				if seen[rel] {
					continue
				}
				seen[rel] = true
				if !files[rel] {
					missing = append(missing, rel)
				}
			}
			if len(missing) > 0 {
				sort.Strings(missing)
				return fault.Permanent(SourceIncomplete, fmt.Errorf("repo %s: snapshot %s is incomplete: its index %s names %d shard(s) the snapshot lacks (%s): finish the download on the NAS (hf download %s --revision %s) and stage again", repo, rev, idx, len(missing), listSome(missing, 5), repo, rev))
			}
		}
	}
	return nil
}

// listSome joins up to n names and says how many more there are.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

func errOr(err error, s string) any {
	if err != nil {
		return err
	}
	return s
}

func dangling(entryPath, target string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		t, _ := os.Readlink(entryPath)
		return fault.Permanent(fault.DanglingLink, fmt.Errorf("source entry %s links to %q (resolved %s), which does not exist: re-download the repo on the NAS or skip the entry", entryPath, t, target))
	}
	if errors.Is(err, fs.ErrPermission) {
		return fault.Permanent(fault.SourceMissing, fmt.Errorf("source entry %s: cannot read %s (%v): give the worker's user read access", entryPath, target, err))
	}
	return fmt.Errorf("source entry %s: resolve %s: %w", entryPath, target, err)
}

// exportRev picks the revision an export mirrors: refs/main when it names a
// snapshot, else the only snapshot.
func (rp *repoPlan) exportRev() (string, error) {
	if _, ok := rp.Revs[rp.MainRev]; ok && rp.MainRev != "" {
		return rp.MainRev, nil
	}
	if len(rp.Revs) == 1 {
		for r := range rp.Revs {
			return r, nil
		}
	}
	revs := make([]string, 0, len(rp.Revs))
	for r := range rp.Revs {
		revs = append(revs, r)
	}
	sort.Strings(revs)
	return "", fault.Permanent(fault.InvalidSpec, fmt.Errorf("export of repo %s: refs/main does not name one of its snapshots %v: fix refs/main on the NAS", rp.Repo, revs))
}

func inodeOf(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
