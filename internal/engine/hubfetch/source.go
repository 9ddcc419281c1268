package hubfetch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
)

// source opens byte ranges of one blob: GET /{repo}/resolve/{commit}/{path}
// (the bytes themselves for a git file; for an LFS file a redirect whose
// Location, once known, is asked directly for the other ranges).
type source struct {
	h      *hub
	b      *blob
	commit string

	mu  sync.Mutex
	loc *url.URL // an LFS file's content URL, after the first resolve
}

// resolveURL is the file's /resolve URL at the pinned commit.
func (s *source) resolveURL() *url.URL { return resolveURL(s.h.r, s.commit, s.b.path) }

// resolveURL is path's /resolve URL at commit, the path escaped segment
// by segment.
func resolveURL(r *Request, commit, path string) *url.URL {
	segs := strings.Split(path, "/")
	for i, p := range segs {
		segs[i] = url.PathEscape(p)
	}
	u, _ := url.Parse(fmt.Sprintf("%s/%s/resolve/%s/%s", r.Endpoint, r.Repo, commit, strings.Join(segs, "/")))
	return u
}

// open returns a reader of exactly the bytes [from, to) of the blob (it
// ends with io.ErrUnexpectedEOF if the connection does). Close it.
func (s *source) open(ctx context.Context, from, to int64) (io.ReadCloser, error) {
	rng := ""
	if from > 0 || to < s.b.size {
		rng = fmt.Sprintf("bytes=%d-%d", from, to-1)
	}
	s.mu.Lock()
	u := s.loc
	s.mu.Unlock()
	viaResolve := u == nil
	if viaResolve {
		u = s.resolveURL()
	}
	for range maxHops {
		rctx, cancel := context.WithCancel(ctx)
		resp, err := s.h.send(rctx, http.MethodGet, u, rng)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("GET %s of %s: %w", s.b.path, s.h.what(), err)
		}
		if viaResolve {
			if err := s.checkAnnounced(resp); err != nil {
				resp.Body.Close()
				cancel()
				return nil, err
			}
		}
		switch {
		case isRedirect(resp.StatusCode):
			lfsRedirect := resp.Header.Get("X-Linked-Etag") != ""
			next, err := redirectTarget(u, resp)
			cancel()
			if err != nil {
				return nil, err
			}
			if viaResolve && lfsRedirect {
				// From here on it is the blob's content URL (a CDN's).
				s.mu.Lock()
				s.loc = next
				s.mu.Unlock()
				viaResolve = false
			}
			u = next
			continue
		case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent:
			return s.body(resp, cancel, from, to)
		}
		defer cancel()
		defer resp.Body.Close()
		if !viaResolve && resp.StatusCode < 500 {
			// A CDN URL expires: the next try resolves again.
			s.mu.Lock()
			s.loc = nil
			s.mu.Unlock()
			if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone {
				return nil, fmt.Errorf("GET %s of %s: content URL answered HTTP %d (expired?); resolving again", s.b.path, s.h.what(), resp.StatusCode)
			}
		}
		return nil, s.h.statusError(resp, s.b.path)
	}
	return nil, fault.Permanent(HubBadResponse, fmt.Errorf("GET %s of %s: more than %d redirects", s.b.path, s.h.what(), maxHops))
}

// checkAnnounced compares what a /resolve answer announces (commit, etag,
// size) with the listing this fetch is pinned to.
func (s *source) checkAnnounced(resp *http.Response) error {
	if resp.StatusCode >= 400 {
		return nil
	}
	if c := resp.Header.Get("X-Repo-Commit"); c != "" && c != s.commit {
		return fault.Permanent(HubBadResponse, fmt.Errorf("GET %s of %s: the Hub answered for commit %s, not the pinned %s", s.b.path, s.h.what(), c, s.commit))
	}
	linked := resp.Header.Get("X-Linked-Etag")
	etag := linked
	if etag == "" && !isRedirect(resp.StatusCode) {
		etag = resp.Header.Get("ETag")
	}
	if etag == "" {
		return nil // a rename redirect, or a server without etags: the content hash decides
	}
	if got := normalizeETag(etag); got != s.b.etag {
		return fault.Permanent(HubContentMismatch, fmt.Errorf("%s, file %s: the Hub announces etag %s, its listing said %s: the repo changed under a pinned commit? retry; if it persists, report it to the endpoint's operator", s.h.what(), s.b.path, got, s.b.etag))
	}
	if ls := resp.Header.Get("X-Linked-Size"); linked != "" && ls != "" && ls != strconv.FormatInt(s.b.size, 10) {
		return fault.Permanent(HubContentMismatch, fmt.Errorf("%s, file %s: the Hub announces %s bytes, its listing said %d", s.h.what(), s.b.path, ls, s.b.size))
	}
	return nil
}

// normalizeETag strips a weak prefix and the quotes, as huggingface_hub's
// _normalize_etag: W/"abc" and "abc" are abc.
func normalizeETag(e string) string {
	return strings.Trim(strings.TrimPrefix(strings.TrimSpace(e), "W/"), `"`)
}

// body checks a 200/206 against the range asked and returns a reader of
// exactly [from, to): a server that ignored the Range (200) has its
// first from bytes skipped.
func (s *source) body(resp *http.Response, cancel context.CancelFunc, from, to int64) (io.ReadCloser, error) {
	rc := &idleBody{rc: resp.Body, cancel: cancel, idle: s.h.r.ReadIdle}
	rc.t = time.AfterFunc(rc.idle, func() {
		rc.stalled.Store(true)
		cancel()
	})
	if resp.StatusCode == http.StatusPartialContent {
		var a, b, total int64
		if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-%d/%d", &a, &b, &total); err != nil || a != from || b < to-1 || total != s.b.size {
			rc.Close()
			return nil, fault.Permanent(HubBadResponse, fmt.Errorf("GET %s of %s: asked bytes %d-%d of %d, got Content-Range %q", s.b.path, s.h.what(), from, to-1, s.b.size, resp.Header.Get("Content-Range")))
		}
	} else if from > 0 {
		if _, err := io.CopyN(io.Discard, rc, from); err != nil {
			rc.Close()
			return nil, fmt.Errorf("GET %s of %s: skipping to byte %d of a whole answer: %w", s.b.path, s.h.what(), from, err)
		}
	}
	return &exactReader{r: rc, c: rc, left: to - from}, nil
}

// idleBody cancels its request when no byte arrives for idle
// (Request.ReadIdle).
type idleBody struct {
	rc      io.ReadCloser
	t       *time.Timer
	idle    time.Duration
	cancel  context.CancelFunc
	stalled atomic.Bool // the timer aborted the request
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.t.Reset(b.idle)
	}
	if err != nil && err != io.EOF && b.stalled.Load() {
		err = fmt.Errorf("no byte for %s, the connection stalled: aborted to resume from the bytes on disk (%w)", b.idle, err)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.t.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}

// exactReader yields left bytes, then EOF; an earlier EOF is
// io.ErrUnexpectedEOF.
type exactReader struct {
	r    io.Reader
	c    io.Closer
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (e *exactReader) Close() error { return e.c.Close() }
