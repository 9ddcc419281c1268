package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// noRedirect is a client that shows each 3xx as it is, as the Hub's own
// client does for HEAD /resolve.
// noRedirect is the tests' client: no redirects followed, and a new
// connection per request, so the transport never resends a request on
// its own (it does when a reused keep-alive connection turns out closed)
// and the double's request log holds exactly the requests a test made.
var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport:     &http.Transport{DisableKeepAlives: true},
}

func do(t *testing.T, method, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func gitSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestRevisionListing(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	cfg := []byte(`{"a":1}`)
	sha := s.AddRepo(Repo{ID: "org/m", Tags: []string{"v1"}, LFSThreshold: 100, Files: []File{
		{Path: "config.json", Data: cfg},
		{Path: "w/model.safetensors", Size: 1000, Seed: 7},
	}})
	for _, rev := range []string{"main", "v1", sha} {
		resp, body := do(t, "GET", s.URL+"/api/models/org/m/revision/"+rev+"?blobs=true", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", rev, resp.StatusCode, body)
		}
		var info struct {
			SHA      string    `json:"sha"`
			Siblings []sibling `json:"siblings"`
		}
		if err := json.Unmarshal(body, &info); err != nil {
			t.Fatal(err)
		}
		if info.SHA != sha || len(info.Siblings) != 2 {
			t.Fatalf("%s: %+v", rev, info)
		}
		c, m := info.Siblings[0], info.Siblings[1]
		if c.RFilename != "config.json" || *c.Size != int64(len(cfg)) || c.BlobID != gitSHA1(cfg) || c.LFS != nil {
			t.Fatalf("config sibling %+v", c)
		}
		if m.RFilename != "w/model.safetensors" || m.LFS == nil || m.LFS.Size != 1000 || m.LFS.SHA256 != s.ETag("org/m", "w/model.safetensors") {
			t.Fatalf("model sibling %+v", m)
		}
	}
	_, body := do(t, "GET", s.URL+"/api/models/org/m/revision/main", nil)
	if bytes.Contains(body, []byte("blobId")) || bytes.Contains(body, []byte(`"size"`)) {
		t.Fatalf("listing without blobs=true carries blob info: %s", body)
	}
}

func TestResolveHeadersAndRanges(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	small := bytes.Repeat([]byte("tok"), 100)
	sha := s.AddRepo(Repo{ID: "org/m", LFSThreshold: 1 << 10, Files: []File{
		{Path: "tokenizer.json", Data: small},
		{Path: "model.safetensors", Size: 5000, Seed: 3},
	}})

	resp, _ := do(t, "HEAD", s.URL+"/org/m/resolve/main/tokenizer.json", nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Repo-Commit") != sha || resp.Header.Get("ETag") != strconv.Quote(gitSHA1(small)) || resp.ContentLength != int64(len(small)) {
		t.Fatalf("HEAD git file: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body := do(t, "GET", s.URL+"/org/m/resolve/main/tokenizer.json", map[string]string{"Range": "bytes=10-"})
	if resp.StatusCode != 206 || !bytes.Equal(body, small[10:]) || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 10-%d/%d", len(small)-1, len(small)) {
		t.Fatalf("ranged GET git file: %d %v", resp.StatusCode, resp.Header)
	}

	resp, _ = do(t, "HEAD", s.URL+"/org/m/resolve/"+sha+"/model.safetensors", nil)
	etag := s.ETag("org/m", "model.safetensors")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 302 || resp.Header.Get("X-Linked-Etag") != strconv.Quote(etag) || resp.Header.Get("X-Linked-Size") != "5000" || resp.Header.Get("X-Repo-Commit") != sha || len(loc) == 0 || loc[0] != '/' {
		t.Fatalf("HEAD LFS file: %d %v", resp.StatusCode, resp.Header)
	}
	_, full := do(t, "GET", s.URL+loc, nil)
	if len(full) != 5000 || sha256hex(full) != etag {
		t.Fatalf("LFS bytes: %d bytes, sha256 %s, want %s", len(full), sha256hex(full), etag)
	}
	resp, part := do(t, "GET", s.URL+loc, map[string]string{"Range": "bytes=4000-4099"})
	if resp.StatusCode != 206 || !bytes.Equal(part, full[4000:4100]) {
		t.Fatalf("ranged LFS GET: %d, %d bytes", resp.StatusCode, len(part))
	}
	if got := s.Served("org/m", "model.safetensors"); got != 5100 {
		t.Fatalf("served %d bytes of the LFS file, want 5100", got)
	}
	resp, _ = do(t, "GET", s.URL+loc, map[string]string{"Range": "bytes=6000-"})
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("range past the end: %d", resp.StatusCode)
	}
}

func TestErrorsAndAuth(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	s.AddRepo(Repo{ID: "org/private", Token: "hf_ok", Files: []File{{Path: "a", Data: []byte("a")}}})
	s.AddRepo(Repo{ID: "org/gated", Token: "hf_ok", Gated: true, Files: []File{{Path: "a", Data: []byte("a")}}})
	cases := []struct {
		url, token string
		status     int
		code       string
	}{
		{"/api/models/org/nope/revision/main", "", 401, "RepoNotFound"},
		{"/api/models/org/nope/revision/main", "hf_ok", 404, "RepoNotFound"},
		{"/api/models/org/private/revision/main", "", 401, "RepoNotFound"},
		{"/api/models/org/private/revision/main", "hf_bad", 401, ""},
		{"/api/models/org/private/revision/main", "hf_ok", 200, ""},
		{"/api/models/org/private/revision/nobranch", "hf_ok", 404, "RevisionNotFound"},
		{"/org/private/resolve/main/missing", "hf_ok", 404, "EntryNotFound"},
		{"/org/gated/resolve/main/a", "", 401, "GatedRepo"},
		{"/org/gated/resolve/main/a", "hf_other", 403, "GatedRepo"},
		{"/org/gated/resolve/main/a", "hf_ok", 200, ""},
	}
	for _, c := range cases {
		hdr := map[string]string{}
		if c.token != "" {
			hdr["Authorization"] = "Bearer " + c.token
		}
		resp, body := do(t, "GET", s.URL+c.url, hdr)
		if resp.StatusCode != c.status || resp.Header.Get("X-Error-Code") != c.code {
			t.Errorf("%s (token %q): %d %q, want %d %q", c.url, c.token, resp.StatusCode, resp.Header.Get("X-Error-Code"), c.status, c.code)
		}
		if c.status >= 400 {
			var e struct{ Error string }
			if json.Unmarshal(body, &e) != nil || e.Error == "" || e.Error != resp.Header.Get("X-Error-Message") {
				t.Errorf("%s: error body %q, X-Error-Message %q", c.url, body, resp.Header.Get("X-Error-Message"))
			}
		}
	}
	for _, r := range s.Requests() {
		if r.Auth && r.Path == "" {
			t.Fatal("log entry without a path")
		}
	}
}

func TestHooks(t *testing.T) {
	s := New(Options{RateLimit: 64 << 20})
	defer s.Close()
	s.AddRepo(Repo{ID: "org/m", LFSThreshold: 1, Files: []File{{Path: "big", Size: 1 << 20, Seed: 1}}})
	etag := s.ETag("org/m", "big")
	url := s.URL + "/lfs/" + etag

	s.Corrupt("org/m", "big", 12345)
	_, b := do(t, "GET", url, nil)
	if sha256hex(b) == etag || len(b) != 1<<20 {
		t.Fatal("corrupted content still matches its etag")
	}

	s.ResetLog()
	s.CutAfter("org/m", "big", 300<<10)
	resp, err := noRedirect.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n != 300<<10 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut response: %d bytes, %v; want %d bytes and an unexpected EOF", n, err, 300<<10)
	}
	if got := s.Served("org/m", "big"); got != 300<<10 {
		t.Fatalf("served %d, want %d", got, 300<<10)
	}
	// The cut trips once: the next response is whole.
	_, b = do(t, "GET", url, nil)
	if len(b) != 1<<20 {
		t.Fatalf("after the cut: %d bytes", len(b))
	}

	s.FailNext(1, 503)
	resp, _ = do(t, "GET", url, nil)
	if resp.StatusCode != 503 {
		t.Fatalf("FailNext: %d", resp.StatusCode)
	}
	log := s.Requests()
	if len(log) != 3 || log[2].Status != 503 || log[0].Path != "/lfs/"+etag {
		t.Fatalf("log %+v", log)
	}
}

func TestGeneratedContentIsRandomAccess(t *testing.T) {
	whole := make([]byte, 1000)
	generate(42, whole, 0)
	for _, off := range []int64{0, 1, 7, 8, 9, 500, 993} {
		for _, n := range []int{1, 3, 8, 15, 7} {
			if off+int64(n) > 1000 {
				continue
			}
			p := make([]byte, n)
			generate(42, p, off)
			if !bytes.Equal(p, whole[off:off+int64(n)]) {
				t.Fatalf("generate at %d len %d differs from the whole stream", off, n)
			}
		}
	}
}

func TestSeparateCDN(t *testing.T) {
	s := New(Options{SeparateCDN: true})
	defer s.Close()
	s.AddRepo(Repo{ID: "org/m", LFSThreshold: 1, Files: []File{{Path: "w.bin", Size: 4096, Seed: 5}}})
	resp, _ := do(t, "HEAD", s.URL+"/org/m/resolve/main/w.bin", nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 302 || s.CDNURL == "" || s.CDNURL == s.URL || loc != s.CDNURL+"/lfs/"+s.ETag("org/m", "w.bin") {
		t.Fatalf("LFS redirect with a CDN: %d Location %q (CDN %q)", resp.StatusCode, loc, s.CDNURL)
	}
	if resp, b := do(t, "GET", loc, nil); resp.StatusCode != 200 || len(b) != 4096 {
		t.Fatalf("CDN GET: %d, %d bytes", resp.StatusCode, len(b))
	}
	if resp, _ := do(t, "GET", s.CDNURL+"/api/models/org/m/revision/main", nil); resp.StatusCode != 404 {
		t.Fatalf("the CDN answers the Hub's API: %d", resp.StatusCode)
	}
	if log := s.Requests(); !log[1].CDN || log[0].CDN {
		t.Fatalf("log does not tell the CDN's requests: %+v", log)
	}
}
