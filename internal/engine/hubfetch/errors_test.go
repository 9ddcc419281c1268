package hubfetch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

// TestCorruptByteRefused: one flipped byte in a served LFS file and in a
// served git file: the fetch fails with HubContentMismatch naming repo,
// revision, file, expected and got; nothing of those files is in blobs/
// (no partial file either), their snapshot entries are absent, and the
// other files are in place.
func TestCorruptByteRefused(t *testing.T) {
	for _, file := range []string{bigFile, "tokenizer.json"} {
		t.Run(file, func(t *testing.T) {
			want := fixture()
			s, sha := serve(t, want)
			cache := t.TempDir()
			s.Corrupt(testRepo, file, int64(len(want[file])-100))
			_, err := fetch(t, request(s, cache))
			etag := s.ETag(testRepo, file)
			mustType(t, err, HubContentMismatch, testRepo, "revision main", sha, file, etag)
			algo := "sha256"
			if file == "tokenizer.json" {
				algo = "git blob sha1"
			}
			if !strings.Contains(err.Error(), "has "+algo+" ") {
				t.Fatalf("mismatch does not say which hash: %v", err)
			}
			for _, n := range blobFiles(t, cache) {
				if strings.HasPrefix(n, etag) {
					t.Fatalf("blobs/%s left for the corrupt file", n)
				}
			}
			if _, err := os.Lstat(filepath.Join(cache, "models--acme--tiny-llm", "snapshots", sha, file)); !os.IsNotExist(err) {
				t.Fatalf("snapshot entry of the corrupt file: %v", err)
			}
			rest := map[string][]byte{}
			for p, d := range want {
				if p != file {
					rest[p] = d
				}
			}
			checkTree(t, cache, sha, "", rest)
		})
	}
}

// TestAuthAndNotFound: 401, 403 gated and 404s are permanent, typed, name
// the repo, revision or file and say what to do; the token never shows.
func TestAuthAndNotFound(t *testing.T) {
	const token = "hf_SECRETsecret1234"
	s := hubtest.New(hubtest.Options{})
	defer s.Close()
	data := map[string][]byte{"config.json": []byte("{}"), "model.safetensors": randBytes(1, 2<<20)}
	s.AddRepo(hubtest.Repo{ID: "acme/private", Token: token, Files: files(data)})
	s.AddRepo(hubtest.Repo{ID: "acme/gated", Token: token, Gated: true, Files: files(data)})
	s.AddRepo(hubtest.Repo{ID: "acme/vanishing", LFSThreshold: 1 << 20, Files: files(data)})
	s.Vanish("acme/vanishing", "model.safetensors")

	cases := []struct {
		name, repo, rev string
		token           Secret
		typ             string
		parts           []string
	}{
		{"private without token", "acme/private", "", "", HubUnauthorized, []string{"acme/private", "revision main", "HF_TOKEN"}},
		{"private with a wrong token", "acme/private", "", "hf_wrong", HubUnauthorized, []string{"acme/private", "Invalid credentials", "from HF_TOKEN"}},
		{"gated without token", "acme/gated", "", "", HubGated, []string{"acme/gated", "restricted", "accept its license on " + s.URL + "/acme/gated", "HF_TOKEN"}},
		{"gated, not granted", "acme/gated", "", "hf_other", HubGated, []string{"acme/gated", "not in the authorized list", "accept its license"}},
		{"missing repo", "acme/nope", "", "hf_other", HubNotFound, []string{"repo acme/nope not found"}},
		{"missing revision", "acme/private", "nobranch", token, HubNotFound, []string{`revision "nobranch"`, "acme/private"}},
		{"missing file", "acme/vanishing", "", "", HubNotFound, []string{"file model.safetensors", "acme/vanishing", "revision main"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := Request{Endpoint: s.URL, CacheDir: t.TempDir(), Repo: c.repo, Revision: c.rev, Token: c.token, TokenSource: "HF_TOKEN"}
			_, err := fetch(t, req)
			mustType(t, err, c.typ, c.parts...)
			if strings.Contains(err.Error(), token) || c.token != "" && strings.Contains(err.Error(), string(c.token)) {
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
	res, err := fetch(t, Request{Endpoint: s.URL, CacheDir: t.TempDir(), Repo: "acme/gated", Token: token})
	if err != nil || res.Files != 2 {
		t.Fatalf("gated repo with its token: %+v %v", res, err)
	}
	for _, r := range s.Requests() {
		if strings.Contains(r.Path, "acme/gated") && !r.Auth && r.Status == 200 {
			t.Fatalf("request without a token served: %+v", r)
		}
	}
}

// TestTransientErrorsRetried: 5xx are retried; past MaxAttempts they are
// returned as transient (no fault type).
func TestTransientErrorsRetried(t *testing.T) {
	want := fixture()
	s, sha := serve(t, want)
	cache := t.TempDir()
	s.FailNext(3, 503)
	if _, err := fetch(t, request(s, cache)); err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)

	s.FailNext(3, 502)
	req := request(s, t.TempDir())
	req.MaxAttempts = 3
	_, err := fetch(t, req)
	if err == nil {
		t.Fatal("three 502 in a row with MaxAttempts 3 succeeded")
	}
	if typ, ok := fault.TypeOf(err); ok {
		t.Fatalf("a 502 is permanent (%s): %v", typ, err)
	}
	if !strings.Contains(err.Error(), "HTTP 502") || !strings.Contains(err.Error(), "3 tries") {
		t.Fatalf("transient error does not say what: %v", err)
	}
}

// TestVerifyExisting: a complete blob is trusted by its size; with
// VerifyExisting a same-size blob with other bytes is fetched again.
func TestVerifyExisting(t *testing.T) {
	want := fixture()
	s, sha := serve(t, want)
	cache := t.TempDir()
	if _, err := fetch(t, request(s, cache)); err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(cache, "models--acme--tiny-llm", "blobs", s.ETag(testRepo, bigFile))
	f, err := os.OpenFile(blob, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0, 1, 2, 3}, 1000)
	f.Close()
	res, err := fetch(t, request(s, cache))
	if err != nil || res.DownloadedBytes != 0 {
		t.Fatalf("size-trusting pass: %+v %v", res, err)
	}
	req := request(s, cache)
	req.VerifyExisting = true
	res, err = fetch(t, req)
	if err != nil || res.DownloadedFiles != 1 || res.DownloadedBytes != int64(len(want[bigFile])) {
		t.Fatalf("verifying pass: %+v %v", res, err)
	}
	checkTree(t, cache, sha, "main", want)
}

// TestTokenStaysOnTheHub: LFS bytes come from a CDN on another host,
// which never receives the token; the Hub's own routes do.
func TestTokenStaysOnTheHub(t *testing.T) {
	const token = "hf_cdn_test_token"
	s := hubtest.New(hubtest.Options{SeparateCDN: true})
	defer s.Close()
	want := fixture()
	sha := s.AddRepo(hubtest.Repo{ID: testRepo, Token: token, Gated: true, LFSThreshold: 1 << 20, Files: files(want)})
	cache := t.TempDir()
	req := request(s, cache)
	req.Token = token
	if _, err := fetch(t, req); err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)
	cdn := 0
	for _, r := range s.Requests() {
		if r.CDN {
			cdn++
		}
		if r.CDN == r.Auth {
			t.Fatalf("request %+v: the token goes to the Hub only", r)
		}
	}
	if cdn == 0 {
		t.Fatal("no request reached the CDN")
	}
}
