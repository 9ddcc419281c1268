package hubtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// statusWriter records the request in the log as its status is decided,
// before any byte of the response leaves: a client that has read a
// response finds its request in the log (logging when the handler returns
// raced with the client's next step).
type statusWriter struct {
	http.ResponseWriter
	status int
	logged func(status int)
}

func (w *statusWriter) decide(code int) {
	if w.status == 0 {
		w.status = code
		w.logged(code)
	}
}

func (w *statusWriter) WriteHeader(code int) {
	w.decide(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.decide(http.StatusOK)
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// serve routes a request of the Hub's server, or of the CDN's (only the
// blob route lives there).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, cdn bool) {
	entry := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Range: r.Header.Get("Range"), Auth: r.Header.Get("Authorization") != "", CDN: cdn}
	sw := &statusWriter{ResponseWriter: w, logged: func(status int) {
		entry.Status = status
		s.logMu.Lock()
		s.log = append(s.log, entry)
		s.logMu.Unlock()
	}}
	defer sw.decide(http.StatusOK) // a handler that wrote nothing answered 200
	s.mu.Lock()
	fail := 0
	if len(s.fails) > 0 {
		fail, s.fails = s.fails[0], s.fails[1:]
	}
	s.mu.Unlock()
	if fail != 0 {
		hubError(sw, fail, "", "injected failure")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hubError(sw, http.StatusMethodNotAllowed, "", "method not allowed")
		return
	}
	p := r.URL.EscapedPath()
	switch {
	case cdn && !strings.HasPrefix(p, "/lfs/"):
		hubError(sw, http.StatusNotFound, "", "not found")
	case strings.HasPrefix(p, "/api/models/"):
		s.serveRevision(sw, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, "/lfs/"):
		s.serveBlob(sw, r, strings.TrimPrefix(p, "/lfs/"))
	case strings.Contains(p, "/resolve/"):
		s.serveResolve(sw, r, p)
	default:
		hubError(sw, http.StatusNotFound, "", "Sorry, we can't find the page you are looking for.")
	}
}

// hubError answers as the Hub does: X-Error-Code, X-Error-Message and a
// JSON {"error"} body.
func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// authorize answers for a repo that needs a token and returns false when
// the request may not read it.
func authorize(w http.ResponseWriter, r *http.Request, rp *repo, id string) bool {
	if rp.def.Token == "" {
		return true
	}
	auth := r.Header.Get("Authorization")
	switch {
	case auth == "Bearer "+rp.def.Token:
		return true
	case auth == "" && rp.def.Gated:
		hubError(w, http.StatusUnauthorized, "GatedRepo", fmt.Sprintf("Access to model %s is restricted. You must have access to it and be authenticated to access it. Please log in.", id))
	case auth == "":
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
	case rp.def.Gated:
		hubError(w, http.StatusForbidden, "GatedRepo", fmt.Sprintf("Access to model %s is restricted and you are not in the authorized list. Visit https://huggingface.co/%s to ask for access.", id, id))
	default:
		hubError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
	}
	return false
}

// lookup finds repo id and resolves rev (a ref name or a full commit sha),
// answering the error itself when either is unknown or unreadable.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, id, rev string) *commit {
	s.mu.Lock()
	rp := s.repos[id]
	s.mu.Unlock()
	if rp == nil {
		if r.Header.Get("Authorization") == "" {
			// The Hub cannot tell a missing repo from a private one here.
			hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
		} else {
			hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		}
		return nil
	}
	if !authorize(w, r, rp, id) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sha, ok := rp.refs[rev]
	if !ok {
		sha = rev
	}
	c := rp.commits[sha]
	if c == nil {
		hubError(w, http.StatusNotFound, "RevisionNotFound", fmt.Sprintf("Invalid rev id: %s", rev))
	}
	return c
}

type sibling struct {
	RFilename string   `json:"rfilename"`
	Size      *int64   `json:"size,omitempty"`
	BlobID    string   `json:"blobId,omitempty"`
	LFS       *lfsInfo `json:"lfs,omitempty"`
}

type lfsInfo struct {
	SHA256      string `json:"sha256"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

// serveRevision is GET /api/models/{repo}/revision/{rev}[?blobs=true].
func (s *Server) serveRevision(w http.ResponseWriter, r *http.Request, rest string) {
	idEsc, revEsc, ok := strings.Cut(rest, "/revision/")
	id, err1 := url.PathUnescape(idEsc)
	rev, err2 := url.PathUnescape(revEsc)
	if !ok || err1 != nil || err2 != nil || rev == "" {
		hubError(w, http.StatusNotFound, "", "Sorry, we can't find the page you are looking for.")
		return
	}
	c := s.lookup(w, r, id, rev)
	if c == nil {
		return
	}
	blobs := r.URL.Query().Get("blobs") == "true" || r.URL.Query().Get("blobs") == "True"
	s.mu.Lock()
	mode := s.listing
	if s.holding > 0 {
		s.heldOverlaps++
	}
	s.mu.Unlock()
	switch {
	case mode == ListingHTML:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!DOCTYPE html>\n<html><head><title>Sign in to the proxy</title></head><body>Sign in to continue.</body></html>\n")
		return
	case mode == ListingRefuseBlobs && r.URL.Query().Has("blobs"):
		hubError(w, http.StatusBadRequest, "", `unknown query parameter "blobs"`)
		return
	case mode != ListingHub:
		blobs = false
	}
	sib := make([]sibling, 0, len(c.order))
	for _, p := range c.order {
		e := sibling{RFilename: p}
		if blobs {
			ct := c.files[p]
			size := ct.size
			e.Size, e.BlobID = &size, ct.gitSHA1
			if ct.lfs {
				e.LFS = &lfsInfo{SHA256: ct.sha256, Size: ct.size, PointerSize: len(ct.pointer)}
			}
		}
		sib = append(sib, e)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"_id": c.sha[:24], "id": id, "modelId": id, "sha": c.sha, "private": false, "siblings": sib})
}

// serveResolve is HEAD/GET /{repo}/resolve/{rev}/{path}.
func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request, p string) {
	i := strings.Index(p, "/resolve/")
	id, err1 := url.PathUnescape(p[1:i])
	revEsc, fileEsc, ok := strings.Cut(p[i+len("/resolve/"):], "/")
	rev, err2 := url.PathUnescape(revEsc)
	file, err3 := url.PathUnescape(fileEsc)
	if !ok || err1 != nil || err2 != nil || err3 != nil {
		hubError(w, http.StatusNotFound, "", "Sorry, we can't find the page you are looking for.")
		return
	}
	c := s.lookup(w, r, id, rev)
	if c == nil {
		return
	}
	ct := c.files[file]
	s.mu.Lock()
	gone := s.vanish[id+"\x00"+file]
	s.mu.Unlock()
	if ct == nil || gone {
		w.Header().Set("X-Repo-Commit", c.sha)
		hubError(w, http.StatusNotFound, "EntryNotFound", fmt.Sprintf("%s does not exist on %q", file, rev))
		return
	}
	s.mu.Lock()
	wrong := s.wrongETag[id+"\x00"+file]
	s.mu.Unlock()
	gitSHA1, sha := ct.gitSHA1, ct.sha256
	if wrong {
		gitSHA1, sha = flipHex(gitSHA1), flipHex(sha)
	}
	h := w.Header()
	h.Set("X-Repo-Commit", c.sha)
	h.Set("Accept-Ranges", "bytes")
	if ct.lfs {
		h.Set("ETag", strconv.Quote(gitSHA1))
		h.Set("X-Linked-Etag", strconv.Quote(sha))
		h.Set("X-Linked-Size", strconv.FormatInt(ct.size, 10))
		h.Set("Location", s.CDNURL+"/lfs/"+ct.sha256)
		w.WriteHeader(http.StatusFound)
		return
	}
	h.Set("ETag", strconv.Quote(gitSHA1))
	s.serveContent(w, r, ct)
}

// flipHex changes a hex digest's first digit (a wrong etag of the right
// shape).
func flipHex(h string) string {
	if h == "" {
		return h
	}
	d := "1"
	if h[0] == '1' {
		d = "2"
	}
	return d + h[1:]
}

// serveBlob is HEAD/GET /lfs/{sha256}, the CDN's side of an LFS file.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, key string) {
	s.mu.Lock()
	ct := s.blobs[key]
	s.mu.Unlock()
	if ct == nil {
		hubError(w, http.StatusNotFound, "", "not found")
		return
	}
	w.Header().Set("ETag", strconv.Quote(ct.sha256))
	w.Header().Set("Accept-Ranges", "bytes")
	s.serveContent(w, r, ct)
}

// parseRange reads a single "bytes=a-b", "bytes=a-" or "bytes=-n".
func parseRange(h string, size int64) (start, end int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, found := strings.Cut(spec, "-")
	if !found {
		return 0, 0, false
	}
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, false
		}
		return max(0, size-n), size, true
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 || start >= size {
		return 0, 0, false
	}
	end = size
	if b != "" {
		e, err := strconv.ParseInt(b, 10, 64)
		if err != nil || e < start {
			return 0, 0, false
		}
		end = min(size, e+1)
	}
	return start, end, true
}

func (s *Server) serveContent(w http.ResponseWriter, r *http.Request, ct *content) {
	start, end := int64(0), ct.size
	h := w.Header()
	if rg := r.Header.Get("Range"); rg != "" {
		var ok bool
		if start, end, ok = parseRange(rg, ct.size); !ok {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", ct.size))
			hubError(w, http.StatusRequestedRangeNotSatisfiable, "", "Requested Range Not Satisfiable")
			return
		}
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end-1, ct.size))
	}
	h.Set("Content-Length", strconv.FormatInt(end-start, 10))
	h.Set("Content-Type", "application/octet-stream")
	if r.Header.Get("Range") != "" {
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if r.Method == http.MethodHead {
		return
	}
	s.writeBody(w, r, ct, start, end)
}

// writeBody sends [start, end) of ct, counting, corrupting and cutting as
// the hooks say. An abort closes the connection mid-body.
func (s *Server) writeBody(w http.ResponseWriter, r *http.Request, ct *content, start, end int64) {
	key := ct.key()
	s.mu.Lock()
	ch := s.cuts[key]
	s.mu.Unlock()
	buf := make([]byte, 256<<10)
	for off := start; off < end; {
		n := min(int64(len(buf)), end-off)
		ct.readAt(buf[:n], off)
		s.mu.Lock()
		for o := range s.corrupt[key] {
			if o >= off && o < off+n {
				buf[o-off] ^= 0xff
			}
		}
		held := s.holdAt(key, off, n)
		if held != nil {
			n = max(0, held.at-off)
		}
		abort := false
		if ch != nil {
			if ch.tripped {
				n, abort = 0, true
			} else if left := ch.limit - ch.count; n > left || (n == left && off+n < end) {
				n, abort, ch.tripped = left, true, true
				if s.cuts[key] == ch {
					delete(s.cuts, key)
				}
			}
			ch.count += n
		}
		s.served[key] += n
		s.mu.Unlock()
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
		}
		if abort {
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		if held != nil && !s.wait(r.Context(), w, held) {
			return
		}
		off += n
	}
}
