package hubtest

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strings"
	"sync"
)

// DefaultLFSThreshold is the size from which a file is stored in LFS when
// its repo sets no threshold: the Hub refuses git files over 10 MB.
const DefaultLFSThreshold = 10 << 20

// Options tune the whole server.
type Options struct {
	// RateLimit caps the bytes per second each connection sends (0: no
	// cap), as a CDN does per TCP stream, so a benchmark can show what
	// parallel connections buy.
	RateLimit int64
	// SeparateCDN serves LFS bytes from a second server (another port, so
	// another host for a client), redirected to by an absolute Location,
	// as the public Hub redirects to its CDN. Without it the Location is a
	// relative path on this server. huggingface_hub follows only relative
	// redirects when it reads a file's headers (HEAD), taking them for a
	// renamed repo, so it needs SeparateCDN to read an LFS file's headers
	// from the 302 as on the real Hub.
	SeparateCDN bool
}

// File is one file of a repo revision.
type File struct {
	// Path is the file's path in the repo, with forward slashes.
	Path string
	// Data is the content. When nil, Size bytes are generated from Seed
	// instead, so a multi-GiB bench repo costs no memory.
	Data []byte
	Size int64
	Seed uint64
	// LFS stores the file in LFS whatever its size; otherwise it is in
	// LFS when its size reaches the repo's LFSThreshold.
	LFS bool
}

// Repo is one commit of a model repo, published under Branch (and Tags).
type Repo struct {
	// ID is "org/name" (or a bare "name", as the Hub's oldest repos).
	ID string
	// Branch the commit is published under; "main" when empty. Adding the
	// same ID again adds a new commit and moves the branch: the older
	// commit stays reachable by its sha.
	Branch string
	// Tags are more refs naming the same commit.
	Tags  []string
	Files []File
	// Token, when set, is the one token that may read the repo: without
	// one (or with another), requests get 401, or 403 GatedRepo when the
	// repo is Gated and a token was sent.
	Token string
	Gated bool
	// LFSThreshold: files of at least this size are LFS (0: 10 MiB).
	LFSThreshold int64
}

// Request is one logged request. The Authorization value is never kept.
type Request struct {
	Method string
	Path   string // unescaped
	Query  string
	Range  string
	Auth   bool // an Authorization header was sent
	Status int
	CDN    bool // served by the separate CDN server (Options.SeparateCDN)
}

// Server is the running double; URL is its endpoint (http://127.0.0.1:PORT).
type Server struct {
	URL string
	// CDNURL is the CDN server's base URL with Options.SeparateCDN, else "".
	CDNURL string
	ts     *httptest.Server
	cdn    *httptest.Server

	mu      sync.Mutex
	repos   map[string]*repo
	blobs   map[string]*content // LFS content by sha256, for the blob route
	served  map[string]int64    // content bytes served, by content key
	cuts    map[string]*cut
	corrupt map[string]map[int64]bool
	vanish  map[string]bool // repo + "\x00" + path
	fails   []int
	commits int

	listing      ListingMode
	holds        map[string]*hold // by content key
	holding      int              // responses held open now
	heldOverlaps int              // listings that arrived while one was held
	wrongETag    map[string]bool  // repo + "\x00" + path

	// logMu guards log apart from mu: a request is logged as its status
	// is written, which some handlers do while holding mu.
	logMu sync.Mutex
	log   []Request
}

type repo struct {
	def     Repo
	refs    map[string]string // ref name -> commit
	commits map[string]*commit
	latest  *commit
}

type commit struct {
	sha   string
	files map[string]*content
	order []string
}

// cut aborts a content's responses once limit bytes of it were served
// since it was armed; responses begun before it tripped abort too.
type cut struct {
	limit, count int64
	tripped      bool
}

// New starts a double on 127.0.0.1. Close it when done.
func New(o Options) *Server {
	s := &Server{
		repos: map[string]*repo{}, blobs: map[string]*content{}, served: map[string]int64{},
		cuts: map[string]*cut{}, corrupt: map[string]map[int64]bool{}, vanish: map[string]bool{},
		holds: map[string]*hold{}, wrongETag: map[string]bool{},
	}
	start := func(h http.HandlerFunc) *httptest.Server {
		ts := httptest.NewUnstartedServer(h)
		if o.RateLimit > 0 {
			ts.Listener = &rateListener{Listener: ts.Listener, rate: o.RateLimit}
		}
		ts.Start()
		return ts
	}
	s.ts = start(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, false) })
	s.URL = s.ts.URL
	if o.SeparateCDN {
		s.cdn = start(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, true) })
		s.CDNURL = s.cdn.URL
	}
	return s
}

// Close stops the servers and closes their connections.
func (s *Server) Close() {
	s.ts.Close()
	if s.cdn != nil {
		s.cdn.Close()
	}
}

// AddRepo publishes a commit of r and returns its sha. A malformed
// definition (no ID, a duplicate or unsafe path) is a bug in the test
// and panics.
func (s *Server) AddRepo(r Repo) string {
	if r.ID == "" || strings.Count(r.ID, "/") > 1 {
		panic(fmt.Sprintf("hubtest: repo id %q: want org/name", r.ID))
	}
	if r.Branch == "" {
		r.Branch = "main"
	}
	thr := r.LFSThreshold
	if thr <= 0 {
		thr = DefaultLFSThreshold
	}
	c := &commit{files: map[string]*content{}}
	for _, f := range r.Files {
		if f.Path == "" || path.Clean(f.Path) != f.Path || strings.HasPrefix(f.Path, "/") || strings.HasPrefix(f.Path, "../") {
			panic(fmt.Sprintf("hubtest: repo %s: bad file path %q", r.ID, f.Path))
		}
		if c.files[f.Path] != nil {
			panic(fmt.Sprintf("hubtest: repo %s: file %q listed twice", r.ID, f.Path))
		}
		size := f.Size
		if f.Data != nil {
			size = int64(len(f.Data))
		}
		c.files[f.Path] = newContent(f, f.LFS || size >= thr)
		c.order = append(c.order, f.Path)
	}
	sort.Strings(c.order)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits++
	h := sha1.New()
	fmt.Fprintf(h, "%s\x00%d\x00", r.ID, s.commits)
	for _, p := range c.order {
		fmt.Fprintf(h, "%s\x00%s\x00", p, c.files[p].key())
	}
	c.sha = hex.EncodeToString(h.Sum(nil))
	rp := s.repos[r.ID]
	if rp == nil {
		rp = &repo{refs: map[string]string{}, commits: map[string]*commit{}}
		s.repos[r.ID] = rp
	}
	rp.def = r
	rp.commits[c.sha] = c
	rp.latest = c
	for _, ref := range append([]string{r.Branch}, r.Tags...) {
		rp.refs[ref] = c.sha
	}
	for _, ct := range c.files {
		if ct.lfs {
			s.blobs[ct.sha256] = ct
		}
	}
	return c.sha
}

// find returns the content of path in repo's latest commit.
func (s *Server) find(repoID, p string) *content {
	rp := s.repos[repoID]
	if rp == nil || rp.latest.files[p] == nil {
		panic(fmt.Sprintf("hubtest: no file %s in repo %s", p, repoID))
	}
	return rp.latest.files[p]
}

// ETag returns the etag the Hub announces for path in repo's latest commit
// (sha256 for LFS files, git blob sha1 otherwise): the blob's name in a
// hub cache.
func (s *Server) ETag(repoID, p string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.find(repoID, p).key()
}

// Served returns the content bytes of path (in repo's latest commit) served
// so far, over every route and range.
func (s *Server) Served(repoID, p string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[s.find(repoID, p).key()]
}

// TotalServed returns all content bytes served so far.
func (s *Server) TotalServed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, v := range s.served {
		n += v
	}
	return n
}

// Requests returns a copy of the request log.
func (s *Server) Requests() []Request {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return append([]Request(nil), s.log...)
}

// ResetLog clears the request log and the served counters.
func (s *Server) ResetLog() {
	s.logMu.Lock()
	s.log = nil
	s.logMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served = map[string]int64{}
}

// Corrupt flips the byte at off of path's content in every response from
// now on; the announced hashes stay those of the true content, as when a
// CDN or a proxy damages a transfer.
func (s *Server) Corrupt(repoID, p string, off int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.find(repoID, p).key()
	if s.corrupt[k] == nil {
		s.corrupt[k] = map[int64]bool{}
	}
	s.corrupt[k][off] = true
}

// CutAfter lets n more bytes of path's content be served, then aborts the
// response that reaches n and every other response of that content
// already under way (their connections are closed mid-body), as a dropped
// link or a killed worker would leave them. Responses begun afterwards are
// served in full: the cut trips once.
func (s *Server) CutAfter(repoID, p string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cuts[s.find(repoID, p).key()] = &cut{limit: n}
}

// Vanish makes /resolve answer 404 EntryNotFound for path of repo while
// the listing still names it, as when the Hub's listing and its storage
// disagree.
func (s *Server) Vanish(repoID, p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.find(repoID, p)
	s.vanish[repoID+"\x00"+p] = true
}

// FailNext answers the next n requests, whatever their route, with status
// (a 503 to see a client retry, say).
func (s *Server) FailNext(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fails = append(s.fails, status)
	}
}
