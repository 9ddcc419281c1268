package hubfetch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	units "github.com/docker/go-units"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/hubcache"
)

// blob is one content of the snapshot, named by its etag in blobs/; one
// or more of the repo's files (paths) link to it.
type blob struct {
	etag  string
	size  int64
	lfs   bool
	path  string   // the first file holding it: its URL and its name in messages
	paths []string // every file holding it

	present bool  // blobs/<etag> is there with the right size
	have    int64 // bytes allocated to its .incomplete (for the space check)
}

// plan is what a fetch will do, worked out before any write.
type plan struct {
	commit                          string
	repoDir, blobsDir, snapDir, ref string // ref: refs/<revision>, "" for a commit

	blobs        []*blob // every blob of the snapshot, largest first
	files        int
	bytes        int64
	skippedFiles int
	skippedBytes int64

	needBytes int64 // to write: sizes of missing blobs less their .incomplete
	needWrite bool  // a blob, a link or the ref is missing or wrong
}

var ()

// makePlan checks the listing (nothing the Hub says becomes a path
// unchecked), applies the skip globs, groups files by blob, and looks at
// what the cache already holds.
func makePlan(r *Request, l *listing) (*plan, error) {
	bad := func(format string, a ...any) (*plan, error) {
		return nil, fault.Permanent(HubBadResponse, fmt.Errorf("listing of repo %s at revision %s on %s: "+format, append([]any{r.Repo, r.Revision, r.Endpoint}, a...)...))
	}
	if !hubcache.IsCommit(l.SHA) {
		return bad("commit %q is not a 40-hex sha", l.SHA)
	}
	if hubcache.IsCommit(r.Revision) && r.Revision != l.SHA {
		return bad("asked for commit %s, the Hub answered %s", r.Revision, l.SHA)
	}
	p := &plan{commit: l.SHA, repoDir: hubcache.RepoPath(r.CacheDir, r.Repo)}
	p.blobsDir = filepath.Join(p.repoDir, hubcache.Blobs)
	p.snapDir = filepath.Join(p.repoDir, hubcache.Snapshots, p.commit)
	if r.Revision != p.commit {
		p.ref = filepath.Join(p.repoDir, hubcache.Refs, filepath.FromSlash(r.Revision))
	}
	byEtag := map[string]*blob{}
	seen := map[string]bool{}
	for _, f := range l.Siblings {
		if err := checkRelPath(f.RFilename); err != nil {
			return bad("file name %q: %v", f.RFilename, err)
		}
		if seen[f.RFilename] {
			return bad("file %s listed twice", f.RFilename)
		}
		seen[f.RFilename] = true
		if r.skipped(f.RFilename) {
			p.skippedFiles++
			if f.LFS != nil {
				p.skippedBytes += f.LFS.Size
			} else if f.Size != nil {
				p.skippedBytes += *f.Size // unknown (not asked) without ?blobs=true
			}
			continue
		}
		if f.Size == nil || f.BlobID == "" {
			return bad("file %s has no size or blobId, and no HEAD was made for it", f.RFilename)
		}
		etag, size, lfs := f.BlobID, *f.Size, false
		if f.LFS != nil {
			etag, size, lfs = f.LFS.SHA256, f.LFS.Size, true
		}
		if lfs && !hubcache.IsSHA256(etag) || !lfs && !hubcache.IsCommit(etag) || size < 0 {
			return bad("file %s: etag %q / size %d is not a sha256 (LFS) or git sha1", f.RFilename, etag, size)
		}
		p.files++
		p.bytes += size
		if b := byEtag[etag]; b != nil {
			if b.size != size {
				return bad("files %s and %s share etag %s with sizes %d and %d", b.path, f.RFilename, etag, b.size, size)
			}
			b.paths = append(b.paths, f.RFilename)
			continue
		}
		b := &blob{etag: etag, size: size, lfs: lfs, path: f.RFilename, paths: []string{f.RFilename}}
		byEtag[etag] = b
		p.blobs = append(p.blobs, b)
	}
	sort.SliceStable(p.blobs, func(i, j int) bool { return p.blobs[i].size > p.blobs[j].size })
	if err := p.look(); err != nil {
		return nil, err
	}
	return p, nil
}

// look notes what the cache holds already: complete blobs (by size),
// the space partial ones hold, and whether any link or the ref must be
// written. It only reads.
func (p *plan) look() error {
	for _, b := range p.blobs {
		final := filepath.Join(p.blobsDir, b.etag)
		if fi, err := os.Lstat(final); err == nil && fi.Mode().IsRegular() && fi.Size() == b.size {
			b.present = true
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("look at %s: %w", final, err)
		}
		if !b.present {
			p.needWrite = true
			var st unix.Stat_t
			if unix.Lstat(final+".incomplete", &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				b.have = min(b.size, st.Blocks*512)
			}
			p.needBytes += b.size - b.have
		}
		for _, f := range b.paths {
			if t, err := os.Readlink(filepath.Join(p.snapDir, filepath.FromSlash(f))); err != nil || t != linkTarget(f, b.etag) {
				p.needWrite = true
			}
		}
	}
	if p.ref != "" {
		if c, err := os.ReadFile(p.ref); err != nil || string(c) != p.commit {
			p.needWrite = true
		}
	}
	return nil
}

// checkWritable refuses, before any write, a read-only cache dir and one
// without room for the bytes the Hub announces (less what partial
// downloads already hold).
func (p *plan) checkWritable(r *Request) error {
	dir := r.CacheDir
	var st unix.Statfs_t
	for {
		err := unix.Statfs(dir, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, unix.ENOENT) || parent == dir {
			return fmt.Errorf("statfs %s: %w", dir, err)
		}
		dir = parent
	}
	if st.Flags&unix.ST_RDONLY != 0 {
		fs := ""
		if dir != r.CacheDir {
			fs = " (at " + dir + ")"
		}
		return fault.Permanent(NASReadOnly, fmt.Errorf("cache dir %s: its filesystem%s is mounted read-only, so repo %s cannot be downloaded there: remount it read-write, or fetch on a host that mounts it so", r.CacheDir, fs, r.Repo))
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < p.needBytes {
		return fault.Permanent(NASFull, fmt.Errorf("cache dir %s: repo %s at %s needs %s (%d bytes) more, the filesystem has %s (%d bytes) free: free space on the NAS or skip files (skip globs)",
			r.CacheDir, r.Repo, r.Revision, units.BytesSize(float64(p.needBytes)), p.needBytes, units.BytesSize(float64(free)), free))
	}
	return nil
}

// classifyWrite types the write errors a retry cannot fix.
func classifyWrite(path string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := fault.TypeOf(err); ok {
		return err
	}
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == path {
		err = fmt.Errorf("%s: %w", pe.Op, pe.Err) // path is named once
	}
	switch {
	case errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT):
		return fault.Permanent(NASFull, fmt.Errorf("%s: no space left: %w: free space on the NAS and retry (the partial download is kept and resumes)", path, err))
	case errors.Is(err, unix.EROFS):
		return fault.Permanent(NASReadOnly, fmt.Errorf("%s: the filesystem is read-only: %w: remount it read-write", path, err))
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return fault.Permanent(NASPermissionDenied, fmt.Errorf("%s: permission denied: %w: give the worker's user write access to the cache dir", path, err))
	}
	return err
}
