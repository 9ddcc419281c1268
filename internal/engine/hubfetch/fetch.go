package hubfetch

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"
)

// Fetch downloads Repo at Revision into CacheDir in the Hugging Face hub
// cache layout (blobs/<etag>, snapshots/<commit>/<path> as relative
// symlinks, refs/<revision>), so hf, transformers, vLLM and hub-mirror
// read it as their own. It pins the revision to one commit first, never
// requests a skipped file, refuses before writing when the filesystem is
// read-only or lacks the announced bytes, verifies every blob's hash while
// it streams, and keeps partial files so that calling it again with the
// same Request resumes. Calling it on a complete snapshot downloads
// nothing and writes nothing.
//
// Permanent failures carry a fault type (HubNotFound, HubUnauthorized,
// HubGated, HubContentMismatch, HubBadResponse, NASFull, NASReadOnly,
// NASPermissionDenied, fault.InvalidSpec); any other error is transient.
func Fetch(ctx context.Context, req Request) (Result, error) {
	r, h, p, res, err := planned(ctx, req)
	if err != nil {
		return res, err
	}
	if p.needWrite {
		if err := p.checkWritable(r); err != nil {
			return res, err
		}
		// A snapshot dir even when every file is skipped: hf's cache scan
		// wants one for each commit a ref names.
		if err := os.MkdirAll(p.snapDir, 0o755); err != nil {
			return res, classifyWrite(p.snapDir, err)
		}
	}
	f := &fetcher{r: r, h: h, p: p, res: &res, rep: h.rep}
	f.rep.mu.Lock()
	f.rep.p.Files, f.rep.p.Bytes = p.files, p.bytes
	f.rep.mu.Unlock()
	err = forEach(ctx, r.ParallelFiles, p.blobs, f.fetchBlob)
	if err == nil && p.ref != "" {
		res.RefWritten, err = writeRef(p.ref, p.commit, &f.dirs)
	}
	if serr := f.dirs.sync(); err == nil {
		err = serr
	}
	f.rep.emit(true)
	return res, err
}

// Plan lists Repo at Revision and says what Fetch would do: the commit,
// the files and bytes after the skip globs, and the files and bytes the
// cache lacks (Result.MissingFiles, MissingBytes). It only reads (the
// Hub's listing, and the cache with stat): a dry run.
func Plan(ctx context.Context, req Request) (Result, error) {
	_, _, _, res, err := planned(ctx, req)
	return res, err
}

// planned is what Fetch and Plan share: the request with its defaults,
// the Hub's listing of the revision, and the plan, filled into res.
func planned(ctx context.Context, req Request) (*Request, *hub, *plan, Result, error) {
	r, err := req.withDefaults()
	if err != nil {
		return nil, nil, nil, Result{}, err
	}
	res := Result{Repo: r.Repo, Revision: r.Revision, Endpoint: r.Endpoint}
	h, err := newHub(&r)
	if err != nil {
		return nil, nil, nil, res, err
	}
	l, err := h.revision(ctx)
	if err != nil {
		return nil, nil, nil, res, err
	}
	if res.HeadFiles, err = h.fillMetadata(ctx, l); err != nil {
		return nil, nil, nil, res, err
	}
	p, err := makePlan(&r, l)
	if err != nil {
		return nil, nil, nil, res, err
	}
	p.fill(&res)
	return &r, h, p, res, nil
}

// fill copies what the plan found into res.
func (p *plan) fill(res *Result) {
	res.Commit, res.SnapshotDir = p.commit, p.snapDir
	res.Files, res.Bytes, res.SkippedFiles, res.SkippedBytes = p.files, p.bytes, p.skippedFiles, p.skippedBytes
	res.MissingBytes = p.needBytes
	for _, b := range p.blobs {
		if !b.present {
			res.MissingFiles += len(b.paths)
		}
	}
}

// forEach runs fn on every item, at most n at once, largest first (the
// order of items). A failure does not stop the others (what they download
// is kept for the retry); all failures are returned, in item order. A
// cancelled context starts nothing more.
func forEach(ctx context.Context, n int, items []*blob, fn func(context.Context, *blob) error) error {
	errs := make([]error, len(items))
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, b := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		if err := ctx.Err(); err != nil {
			<-sem
			errs[i] = err
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = fn(ctx, b)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fetcher carries one Fetch's state between its goroutines. Its counts
// and res are guarded by rep.mu, so a Progress call sees them as one.
type fetcher struct {
	r    *Request
	h    *hub
	p    *plan
	dirs dirSet
	rep  *reporter
	res  *Result
}

// add counts n bytes put in place (downloaded: received over HTTP) and
// reports progress each time another chunk is done. Bytes landing clear
// the last retry's reason: the fetch moves again.
func (f *fetcher) add(n int64, downloaded bool) {
	f.rep.mu.Lock()
	defer f.rep.mu.Unlock()
	f.rep.p.BytesDone += n
	if downloaded {
		f.rep.p.Downloaded += n
		f.res.DownloadedBytes += n
		f.rep.p.Retry = ""
	}
	f.rep.emitLocked(false)
}

func (f *fetcher) resumedBytes(n int64) {
	f.rep.mu.Lock()
	f.res.ResumedBytes += n
	f.rep.mu.Unlock()
	f.add(n, false)
}

// unprogress takes back a blob's bytes when its download is thrown away
// (hash mismatch): the only time progress goes backwards.
func (f *fetcher) unprogress(b *blob) {
	f.rep.mu.Lock()
	defer f.rep.mu.Unlock()
	f.rep.p.BytesDone -= b.size
	f.rep.p.BytesDone = max(f.rep.p.BytesDone, 0)
}

func (f *fetcher) reused(b *blob) {
	f.rep.mu.Lock()
	f.res.ReusedFiles++
	f.rep.mu.Unlock()
	f.add(b.size, false)
}

func (f *fetcher) downloaded(b *blob) {
	f.rep.mu.Lock()
	defer f.rep.mu.Unlock()
	f.res.DownloadedFiles++
}

// fileDone counts the files of a blob in place (a blob several files
// share counts once per file).
func (f *fetcher) fileDone(b *blob) {
	f.rep.mu.Lock()
	defer f.rep.mu.Unlock()
	f.rep.p.FilesDone += len(b.paths)
	f.rep.p.BytesDone += int64(len(b.paths)-1) * b.size
	f.rep.emitLocked(true)
}

// reporter calls Request.Progress one call at a time, in order, with the
// running totals: the planning (HEADs, retries of the listing) and the
// downloads report through the same one.
type reporter struct {
	fn    func(Progress)
	chunk int64

	mu       sync.Mutex
	p        Progress
	lastEmit int64
	lastAt   time.Time
}

// emitEvery is how often bytes landing are reported even when less than a
// chunk landed: on a slow link a heartbeat (and a wrapper's stall watch)
// hears of every byte within a second, not once per 64 MiB.
var emitEvery = time.Second

// emit reports now (force) or once another chunk is done.
func (r *reporter) emit(force bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emitLocked(force)
}

// emitLocked calls Progress (under r.mu: one call at a time, in order).
func (r *reporter) emitLocked(force bool) {
	if r.fn == nil {
		return
	}
	now := time.Now()
	due := r.p.BytesDone-r.lastEmit >= r.chunk || r.p.BytesDone != r.lastEmit && now.Sub(r.lastAt) >= emitEvery
	if !force && !due {
		return
	}
	r.lastEmit, r.lastAt = r.p.BytesDone, now
	r.fn(r.p)
}

// retrying reports why a request is tried again (a transient failure),
// at once: a fetch that retries for minutes says why while it does.
func (r *reporter) retrying(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.Retry = why
	r.emitLocked(true)
}

// headed reports one more file whose metadata a HEAD read.
func (r *reporter) headed(total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.HeadFiles = total
	r.p.HeadDone++
	r.emitLocked(true)
}
