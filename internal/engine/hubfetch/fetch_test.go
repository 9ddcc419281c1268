package hubfetch

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

func TestFetchLayoutAndSecondPass(t *testing.T) {
	want := fixture()
	s, sha := serve(t, want)
	cache := filepath.Join(t.TempDir(), "hub") // created by the fetch
	req := request(s, cache)
	var mu sync.Mutex
	var reports []Progress
	req.Progress = func(p Progress) {
		mu.Lock()
		reports = append(reports, p)
		mu.Unlock()
	}
	res, err := fetch(t, req)
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)
	total := uniqueBytes(want)
	if res.Commit != sha || res.Files != len(want) || res.DownloadedBytes != total || res.DownloadedFiles != len(want)-1 || !res.RefWritten {
		t.Fatalf("result %+v; want commit %s, %d files, %d bytes downloaded in %d blobs", res, sha, len(want), total, len(want)-1)
	}
	if s.TotalServed() != total {
		t.Fatalf("the Hub served %d bytes for %d bytes of blobs", s.TotalServed(), total)
	}
	if len(reports) < 2 {
		t.Fatalf("%d progress reports", len(reports))
	}
	for i := 1; i < len(reports); i++ {
		if reports[i].BytesDone < reports[i-1].BytesDone || reports[i].FilesDone < reports[i-1].FilesDone {
			t.Fatalf("progress went backwards: %+v then %+v", reports[i-1], reports[i])
		}
	}
	if last := reports[len(reports)-1]; last.FilesDone != len(want) || last.BytesDone != res.Bytes || last.Files != len(want) {
		t.Fatalf("last progress %+v, want %d files and %d bytes done", last, len(want), res.Bytes)
	}

	// A second fetch lists the revision and does nothing else.
	s.ResetLog()
	res, err = fetch(t, request(s, cache))
	if err != nil {
		t.Fatal(err)
	}
	if res.DownloadedBytes != 0 || res.DownloadedFiles != 0 || res.ReusedFiles != len(want)-1 || res.RefWritten || s.TotalServed() != 0 {
		t.Fatalf("second pass %+v, served %d", res, s.TotalServed())
	}
	if log := s.Requests(); len(log) != 1 || !strings.HasPrefix(log[0].Path, "/api/models/") {
		t.Fatalf("second pass requests %+v, want the listing only", log)
	}
	checkTree(t, cache, sha, "main", want)
}

func TestRevisionNamesAndCommits(t *testing.T) {
	want := map[string][]byte{"config.json": []byte("{}"), "w.bin": randBytes(7, 2<<20)}
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	sha := s.AddRepo(hubtest.Repo{ID: testRepo, Tags: []string{"v1", "refs/pr/1"}, LFSThreshold: 1 << 20, Files: files(want)})
	cache := t.TempDir()
	req := request(s, cache)
	req.Revision = sha
	if _, err := fetch(t, req); err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "", want)
	if _, err := os.Stat(filepath.Join(cache, "models--acme--tiny-llm", "refs")); !os.IsNotExist(err) {
		t.Fatalf("a fetch by commit wrote refs/ (%v)", err)
	}
	req.Revision = "v1"
	res, err := fetch(t, req)
	if err != nil || !res.RefWritten || res.DownloadedBytes != 0 {
		t.Fatalf("fetch by tag: %+v %v", res, err)
	}
	checkTree(t, cache, sha, "v1", want)
	req.Revision = "refs/pr/1" // a ref name with slashes: refs/refs/pr/1, as huggingface_hub
	if _, err := fetch(t, req); err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "refs/pr/1", want)

	// A new commit on main: refs/main moves, only the changed blob comes.
	changed := map[string][]byte{"config.json": []byte(`{"v": 2}`), "w.bin": want["w.bin"]}
	sha2 := s.AddRepo(hubtest.Repo{ID: testRepo, LFSThreshold: 1 << 20, Files: files(changed)})
	s.ResetLog()
	res, err = fetch(t, request(s, cache))
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit != sha2 || res.DownloadedBytes != int64(len(changed["config.json"])) {
		t.Fatalf("new commit: %+v", res)
	}
	checkSnapshot(t, cache, sha2, "main", changed, false)
	checkSnapshot(t, cache, sha, "v1", want, false) // the older snapshot is intact
	if n := len(blobFiles(t, cache)); n != 3 {
		t.Fatalf("blobs/ holds %d blobs, want 3 (two configs, one shared weight)", n)
	}
}

func TestSkipIsNeverRequested(t *testing.T) {
	want := fixture()
	s, sha := serve(t, want)
	cache := t.TempDir()
	req := request(s, cache)
	req.Skip = []string{"original/**", "**/*.md"}
	res, err := fetch(t, req)
	if err != nil {
		t.Fatal(err)
	}
	kept := without(want, "original/", "nested/README.md")
	checkTree(t, cache, sha, "main", kept)
	if res.SkippedFiles != 3 || res.SkippedBytes != int64(len(want["original/consolidated.pth"])+len(want["original/params.json"])+len(want["nested/README.md"])) {
		t.Fatalf("skipped %d files, %d bytes", res.SkippedFiles, res.SkippedBytes)
	}
	skippedLFS := "/lfs/" + s.ETag(testRepo, "original/consolidated.pth")
	for _, r := range s.Requests() {
		if strings.Contains(r.Path, "original/") || strings.HasSuffix(r.Path, ".md") || r.Path == skippedLFS {
			t.Fatalf("a skipped file was requested: %+v", r)
		}
	}
	if s.Served(testRepo, "original/consolidated.pth") != 0 {
		t.Fatal("bytes of a skipped file were served")
	}
}

func TestFetchInvalidRequests(t *testing.T) {
	for _, req := range []Request{
		{CacheDir: "/tmp/x", Repo: "../etc"},
		{CacheDir: "/tmp/x", Repo: "a/b/c"},
		{CacheDir: "/tmp/x", Repo: "a--b/c"},
		{CacheDir: "relative", Repo: "a/b"},
		{CacheDir: "/tmp/x", Repo: "a/b", Revision: "../../x"},
		{CacheDir: "/tmp/x", Repo: "a/b", Skip: []string{"[unclosed"}},
		{CacheDir: "/tmp/x", Repo: "a/b", Endpoint: "ftp://hub"},
	} {
		_, err := fetch(t, req)
		mustType(t, err, "InvalidSpec")
	}
}
