package hubtest

import (
	"context"
	"net/http"
	"sync"
)

// ListingMode is how GET /api/models/{repo}/revision/{rev} answers: as
// the Hub does, or as the mirrors and proxies found in the field do.
type ListingMode int

const (
	// ListingHub answers as the Hub: with ?blobs=true every sibling
	// carries size, blobId and lfs.
	ListingHub ListingMode = iota
	// ListingNoBlobs ignores ?blobs=true: siblings carry rfilename only,
	// as a mirror that implements just what huggingface_hub's
	// snapshot_download reads (it takes each file's size and etag from a
	// HEAD of its /resolve URL).
	ListingNoBlobs
	// ListingRefuseBlobs answers 400 to ?blobs=true (an endpoint that
	// validates its query) and lists without metadata without it.
	ListingRefuseBlobs
	// ListingHTML answers 200 with an HTML page, as a proxy's login page
	// or a misconfigured endpoint does.
	ListingHTML
)

// SetListing changes how the revision listing answers from now on.
func (s *Server) SetListing(m ListingMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listing = m
}

// Held is a response held open mid-body by Hold.
type Held struct {
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

// Reached is closed once the held response has sent its bytes and holds.
func (h *Held) Reached() <-chan struct{} { return h.reached }

// Release lets the held response send the rest of its body.
func (h *Held) Release() { h.once.Do(func() { close(h.release) }) }

// hold is an armed Hold: the content's offset past which the next
// response holds.
type hold struct {
	at      int64
	tripped bool
	h       *Held
}

// Hold makes the next response of path's content that reaches byte n of
// it send the bytes before n, then hold: headers and those bytes sent,
// the connection open, nothing more, until Release or until the client
// goes away — a stalled link, deterministic, no sleeps. It trips once;
// later responses are served in full. While a response is held, the
// double counts listings that arrive (HeldOverlaps): a new attempt of a
// fetch starting beside the stalled one.
func (s *Server) Hold(repoID, p string, n int64) *Held {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := &Held{reached: make(chan struct{}), release: make(chan struct{})}
	s.holds[s.find(repoID, p).key()] = &hold{at: n, h: h}
	return h
}

// HeldOverlaps is how many revision listings arrived while a response
// was held open by Hold: each is a fetch beginning while another one's
// stalled body is still open.
func (s *Server) HeldOverlaps() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldOverlaps
}

// Holding is how many responses are held open right now.
func (s *Server) Holding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holding
}

// WrongETag makes /resolve announce, for path of repo, an etag other
// than the one its listing gives (ETag, and X-Linked-Etag for an LFS
// file), as an endpoint whose listing and storage disagree does.
func (s *Server) WrongETag(repoID, p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.find(repoID, p)
	s.wrongETag[repoID+"\x00"+p] = true
}

// holdAt returns the armed hold of key when [off, off+n) passes its
// offset, tripping it.
func (s *Server) holdAt(key string, off, n int64) *hold {
	h := s.holds[key]
	if h == nil || h.tripped || off+n <= h.at {
		return nil
	}
	h.tripped = true
	delete(s.holds, key)
	return h
}

// wait holds a response (its bytes so far flushed) until Release or the
// client's disconnect; false when the client went away.
func (s *Server) wait(ctx context.Context, w http.ResponseWriter, h *hold) bool {
	w.(http.Flusher).Flush()
	s.mu.Lock()
	s.holding++
	s.mu.Unlock()
	close(h.h.reached)
	defer func() {
		s.mu.Lock()
		s.holding--
		s.mu.Unlock()
	}()
	select {
	case <-h.h.release:
		return true
	case <-ctx.Done():
		return false
	}
}
