package hubfetch

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

// progressLog keeps every Progress a fetch reported.
type progressLog struct {
	mu  sync.Mutex
	all []Progress
}

func (l *progressLog) add(p Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, p)
}

// retries are the distinct Retry reasons reported, in order.
func (l *progressLog) retries() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, p := range l.all {
		if p.Retry != "" && (len(out) == 0 || out[len(out)-1] != p.Retry) {
			out = append(out, p.Retry)
		}
	}
	return out
}

// TestFetchByHeadWhenTheListingHasNoMetadata: an endpoint whose listing
// carries no file metadata — it ignores ?blobs=true, or refuses it with a
// 400 — is fetched as huggingface_hub's snapshot_download fetches it: a
// HEAD of each file's /resolve URL gives its etag and size (an LFS file's
// from its redirect, relative or to a CDN), never for a skipped file; the
// tree is the Hub's layout with verified bytes, and a second fetch
// downloads nothing.
func TestFetchByHeadWhenTheListingHasNoMetadata(t *testing.T) {
	for _, c := range []struct {
		name string
		mode hubtest.ListingMode
		cdn  bool
	}{
		{"ignores blobs", hubtest.ListingNoBlobs, false},
		{"refuses blobs", hubtest.ListingRefuseBlobs, false},
		{"refuses blobs, LFS on a CDN", hubtest.ListingRefuseBlobs, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := fixture()
			s := hubtest.New(hubtest.Options{SeparateCDN: c.cdn})
			t.Cleanup(s.Close)
			sha := s.AddRepo(hubtest.Repo{ID: testRepo, LFSThreshold: 1 << 20, Files: files(want)})
			s.SetListing(c.mode)
			cache := t.TempDir()
			req := request(s, cache)
			req.Skip = []string{"original/**"}
			var pl progressLog
			req.Progress = pl.add
			res, err := fetch(t, req)
			if err != nil {
				t.Fatalf("fetch from an endpoint that %s: %v", c.name, err)
			}
			kept := without(want, "original/")
			checkTree(t, cache, sha, "main", kept)
			if res.HeadFiles != len(kept) || res.Files != len(kept) || res.SkippedFiles != 2 || res.Endpoint != s.URL {
				t.Fatalf("result %+v: want %d files read by HEAD, 2 skipped, endpoint %s", res, len(kept), s.URL)
			}
			heads := map[string]int{}
			for _, r := range s.Requests() {
				if r.Method == http.MethodHead {
					heads[r.Path]++
				}
				if strings.Contains(r.Path, "original/") {
					t.Errorf("a skipped file was requested: %s %s", r.Method, r.Path)
				}
			}
			for p := range kept {
				if heads["/"+testRepo+"/resolve/"+sha+"/"+p] != 1 {
					t.Errorf("HEADs of %s at the commit: %d, want 1 (all HEADs: %v)", p, heads["/"+testRepo+"/resolve/"+sha+"/"+p], heads)
				}
			}
			var last Progress
			for _, p := range pl.all {
				last = p
			}
			if last.HeadDone != len(kept) || last.HeadFiles != len(kept) {
				t.Errorf("progress reported %d of %d HEADs, want %d", last.HeadDone, last.HeadFiles, len(kept))
			}
			s.ResetLog()
			again, err := fetch(t, req)
			if err != nil || again.DownloadedBytes != 0 || s.TotalServed() != 0 {
				t.Fatalf("second fetch: %+v, %v (%d bytes served)", again, err, s.TotalServed())
			}
		})
	}
}

// TestStalledBodyResumesWithinTheCall: a body that stops sending (the
// connection open, nothing more) is aborted after Request.ReadIdle —
// the engine's own timer, nothing races it — and the download continues
// from the bytes on disk in the same call: every byte is received once,
// the totals say so, and the progress said why it retried.
func TestStalledBodyResumesWithinTheCall(t *testing.T) {
	for _, file := range []string{"tokenizer.json", bigFile} {
		t.Run(file, func(t *testing.T) {
			want := fixture()
			s, sha := serve(t, want)
			cache := t.TempDir()
			held := s.Hold(testRepo, file, int64(len(want[file])/3))
			req := request(s, cache)
			req.ReadIdle = 300 * time.Millisecond
			var pl progressLog
			req.Progress = pl.add
			res, err := fetch(t, req)
			if err != nil {
				t.Fatalf("fetch with a stalled body: %v", err)
			}
			select {
			case <-held.Reached():
			default:
				t.Fatal("the body never stalled")
			}
			checkTree(t, cache, sha, "main", want)
			if served := s.Served(testRepo, file); served != int64(len(want[file])) {
				t.Errorf("%s: %d bytes served for %d: bytes received before the stall were asked again", file, served, len(want[file]))
			}
			if total := uniqueBytes(want); res.DownloadedBytes != total || res.ResumedBytes != 0 {
				t.Errorf("downloaded %d, resumed %d; want every one of the %d bytes downloaded once", res.DownloadedBytes, res.ResumedBytes, total)
			}
			r := pl.retries()
			if len(r) == 0 || !strings.Contains(strings.Join(r, "\n"), "stalled") || !strings.Contains(strings.Join(r, "\n"), file) {
				t.Errorf("progress never said the body stalled: %q", r)
			}
		})
	}
}

// TestWrongETagLeavesNothing: /resolve announcing an etag other than the
// listing's is refused (HubContentMismatch naming the file), and leaves
// no partial file and no parts file in blobs/ — for a file fetched whole
// and for one fetched in ranges.
func TestWrongETagLeavesNothing(t *testing.T) {
	for _, file := range []string{"tokenizer.json", bigFile} {
		t.Run(file, func(t *testing.T) {
			want := fixture()
			s, _ := serve(t, want)
			s.WrongETag(testRepo, file)
			cache := t.TempDir()
			_, err := fetch(t, request(s, cache))
			mustType(t, err, HubContentMismatch, file, "the Hub announces etag")
			blobs := filepath.Join(cache, "models--acme--tiny-llm", "blobs")
			filepath.WalkDir(blobs, func(p string, d fs.DirEntry, err error) error {
				if err == nil && strings.Contains(d.Name(), ".incomplete") {
					t.Errorf("a refused etag left %s", p)
				}
				return nil
			})
		})
	}
}

// TestNonJSONListingSaysWhy: an endpoint answering its listing with an
// HTML page is retried (a proxy's login page may go away) and each retry
// is reported with what came back instead; giving up says it too.
func TestNonJSONListingSaysWhy(t *testing.T) {
	s, _ := serve(t, fixture())
	s.SetListing(hubtest.ListingHTML)
	req := request(s, t.TempDir())
	req.MaxAttempts = 3
	var pl progressLog
	req.Progress = pl.add
	_, err := Fetch(context.Background(), req)
	if err == nil {
		t.Fatal("a listing that is an HTML page was taken")
	}
	if typ, perm := fault.TypeOf(err); perm {
		t.Fatalf("a non-JSON listing is permanent (%s): %v", typ, err)
	}
	for _, part := range []string{"not the Hub's JSON", "text/html", "<!DOCTYPE html>", s.URL, "3 tries"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("the error does not say %q: %v", part, err)
		}
	}
	r := pl.retries()
	if len(r) != 2 || !strings.Contains(r[0], "try 1 of 3") || !strings.Contains(r[1], "try 2 of 3") || !strings.Contains(r[1], "not the Hub's JSON") {
		t.Errorf("progress reported the retries as %q, want tries 1 and 2 of 3 with the reason", r)
	}
	if n := len(s.Requests()); n != 3 {
		t.Errorf("%d requests, want the listing tried 3 times", n)
	}
	t.Log(fmt.Sprint(err))
}

// TestProgressWhileBytesLandSlowly: bytes landing are reported within
// emitEvery even when far less than a chunk landed (a slow link), so a
// heartbeat — and a wrapper's stall watch — hears of every byte, not once
// per chunk; here with emitEvery at zero every piece written is reported.
func TestProgressWhileBytesLandSlowly(t *testing.T) {
	defer func(d time.Duration) { emitEvery = d }(emitEvery)
	emitEvery = 0
	want := map[string][]byte{"w.bin": randBytes(7, 5<<20)}
	s, _ := serve(t, want)
	req := request(s, t.TempDir())
	req.ChunkSize = 64 << 20 // one chunk: the old rule reported only the end
	var pl progressLog
	req.Progress = pl.add
	if _, err := fetch(t, req); err != nil {
		t.Fatal(err)
	}
	var mid int
	for _, p := range pl.all {
		if p.BytesDone > 0 && p.BytesDone < 5<<20 {
			mid++
		}
	}
	if mid < 3 {
		t.Fatalf("%d progress reports before the 5 MiB file was done, want one per piece written", mid)
	}
}
