package hubfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/hubcache"
)

// fileMeta is what a HEAD of a file's /resolve URL announces about it.
type fileMeta struct {
	etag string
	size int64
	lfs  bool
}

// fillMetadata completes a listing that came without file metadata (an
// endpoint that ignores or refuses ?blobs=true): every listed file no skip
// glob matches gets its size and etag from a HEAD of its /resolve URL at
// the listed commit, read as huggingface_hub's get_hf_file_metadata reads
// them, several at once. It returns how many files it asked about. A file
// whose HEAD fails fails the fetch: a plan needs every size first.
func (h *hub) fillMetadata(ctx context.Context, l *listing) (int, error) {
	var todo []int
	for i, f := range l.Siblings {
		if (f.Size == nil || f.BlobID == "") && checkRelPath(f.RFilename) == nil && !h.r.skipped(f.RFilename) {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 || !hubcache.IsCommit(l.SHA) {
		return 0, nil // makePlan names a bad commit or file name
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(todo))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(max(4, 2*h.r.ParallelFiles), len(todo)) {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= len(todo) || ctx.Err() != nil {
					return
				}
				f := &l.Siblings[todo[k]]
				var m fileMeta
				err := h.retry(ctx, fmt.Sprintf("HEAD %s of %s", f.RFilename, h.what()), func() (bool, error) {
					var err error
					m, err = h.head(ctx, l.SHA, f.RFilename)
					return false, err
				})
				if err != nil {
					errs[k] = err
					cancel()
					return
				}
				size := m.size
				f.Size, f.BlobID = &size, m.etag
				if m.lfs {
					f.LFS = &lfsInfo{SHA256: m.etag, Size: m.size}
				}
				h.rep.headed(len(todo))
			}
		})
	}
	wg.Wait()
	return len(todo), firstCause(errs)
}

// firstCause is the first error that is not the cancellation the first
// failure caused in the others.
func firstCause(errs []error) error {
	var canceled error
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		if canceled == nil {
			canceled = err
		}
	}
	return canceled
}

// head reads one file's metadata: HEAD of /{repo}/resolve/{commit}/{path}
// with the redirects handled as huggingface_hub does — a relative one
// (a renamed repo) is followed, the content redirect of an LFS file (it
// carries X-Linked-Etag) is where the metadata is read. The etag is
// X-Linked-Etag, else ETag; the size X-Linked-Size, else Content-Length;
// an X-Repo-Commit must be the listed commit.
func (h *hub) head(ctx context.Context, commit, path string) (fileMeta, error) {
	u := resolveURL(h.r, commit, path)
	for range maxHops {
		resp, err := h.send(ctx, http.MethodHead, u, "")
		if err != nil {
			return fileMeta{}, fmt.Errorf("HEAD %s of %s: %w", path, h.what(), err)
		}
		if isRedirect(resp.StatusCode) && resp.Header.Get("X-Linked-Etag") == "" {
			loc := resp.Header.Get("Location")
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if next, err := url.Parse(loc); err == nil && loc != "" && next.Host == "" {
				u = u.ResolveReference(next)
				continue
			}
			return fileMeta{}, fault.Permanent(HubBadResponse, fmt.Errorf("HEAD %s of %s: HTTP %d to %q without X-Linked-Etag: the endpoint says neither the file's size nor its hash (huggingface_hub reads them from this answer too)", path, h.what(), resp.StatusCode, loc))
		}
		if !isRedirect(resp.StatusCode) && (resp.StatusCode < 200 || resp.StatusCode > 299) {
			defer resp.Body.Close()
			return fileMeta{}, h.statusError(resp, path)
		}
		resp.Body.Close()
		return h.metaOf(resp, commit, path)
	}
	return fileMeta{}, fault.Permanent(HubBadResponse, fmt.Errorf("HEAD %s of %s: more than %d redirects", path, h.what(), maxHops))
}

// metaOf reads a HEAD answer's etag, size and commit.
func (h *hub) metaOf(resp *http.Response, commit, path string) (fileMeta, error) {
	bad := func(format string, a ...any) (fileMeta, error) {
		return fileMeta{}, fault.Permanent(HubBadResponse, fmt.Errorf("HEAD %s of %s: "+format, append([]any{path, h.what()}, a...)...))
	}
	if c := resp.Header.Get("X-Repo-Commit"); c != "" && c != commit {
		return bad("the endpoint answered for commit %s, not the listed %s", c, commit)
	}
	etag := normalizeETag(resp.Header.Get("X-Linked-Etag"))
	if etag == "" {
		etag = normalizeETag(resp.Header.Get("ETag"))
	}
	size := int64(-1)
	if ls := resp.Header.Get("X-Linked-Size"); ls != "" {
		n, err := strconv.ParseInt(ls, 10, 64)
		if err != nil {
			return bad("X-Linked-Size %q is not a number", ls)
		}
		size = n
	} else if !isRedirect(resp.StatusCode) {
		size = resp.ContentLength
	}
	switch {
	case etag == "":
		return bad("no ETag or X-Linked-Etag: the endpoint does not name the file's content, so it cannot be verified")
	case size < 0:
		return bad("no X-Linked-Size or Content-Length: the endpoint does not say the file's size")
	}
	lfs := hubcache.IsSHA256(etag)
	if !lfs && !hubcache.IsCommit(etag) {
		return bad("etag %q is neither a sha256 (an LFS file) nor a git blob sha1: the endpoint's etags are not the Hub's content hashes, so the download cannot be verified", etag)
	}
	return fileMeta{etag: etag, size: size, lfs: lfs}, nil
}
