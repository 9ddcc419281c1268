package hubfetch

import (
	"context"
	"errors"
	"os"
	"sync"
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
	f := &fetcher{r: r, h: h, p: p, res: &res}
	f.prog.Files, f.prog.Bytes = p.files, p.bytes
	err = forEach(ctx, r.ParallelFiles, p.blobs, f.fetchBlob)
	if err == nil && p.ref != "" {
		res.RefWritten, err = writeRef(p.ref, p.commit, &f.dirs)
	}
	if serr := f.dirs.sync(); err == nil {
		err = serr
	}
	f.emit(true)
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
	res := Result{Repo: r.Repo, Revision: r.Revision}
	h, err := newHub(&r)
	if err != nil {
		return nil, nil, nil, res, err
	}
	l, err := h.revision(ctx)
	if err != nil {
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

// fetcher carries one Fetch's state between its goroutines.
type fetcher struct {
	r    *Request
	h    *hub
	p    *plan
	dirs dirSet

	mu       sync.Mutex
	res      *Result
	prog     Progress
	lastEmit int64
}

// add counts n bytes put in place (downloaded: received over HTTP) and
// reports progress each time another chunk is done.
func (f *fetcher) add(n int64, downloaded bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prog.BytesDone += n
	if downloaded {
		f.prog.Downloaded += n
		f.res.DownloadedBytes += n
	}
	f.emitLocked(false)
}

func (f *fetcher) resumedBytes(n int64) {
	f.mu.Lock()
	f.res.ResumedBytes += n
	f.mu.Unlock()
	f.add(n, false)
}

// unprogress takes back a blob's bytes when its download is thrown away
// (hash mismatch): the only time progress goes backwards.
func (f *fetcher) unprogress(b *blob) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prog.BytesDone -= b.size
	f.prog.BytesDone = max(f.prog.BytesDone, 0)
}

func (f *fetcher) reused(b *blob) {
	f.mu.Lock()
	f.res.ReusedFiles++
	f.mu.Unlock()
	f.add(b.size, false)
}

func (f *fetcher) downloaded(b *blob) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.res.DownloadedFiles++
}

// fileDone counts the files of a blob in place (a blob several files
// share counts once per file).
func (f *fetcher) fileDone(b *blob) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prog.FilesDone += len(b.paths)
	f.prog.BytesDone += int64(len(b.paths)-1) * b.size
	f.emitLocked(true)
}

func (f *fetcher) emit(force bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.emitLocked(force)
}

// emitLocked calls Progress (under f.mu: one call at a time, in order).
func (f *fetcher) emitLocked(force bool) {
	if f.r.Progress == nil || !force && f.prog.BytesDone-f.lastEmit < f.r.ChunkSize {
		return
	}
	f.lastEmit = f.prog.BytesDone
	f.r.Progress(f.prog)
}
