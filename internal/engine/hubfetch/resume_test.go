package hubfetch

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

const bigFile = "model-00001-of-00002.safetensors"

// incompletes lists what partial files blobs/ holds.
func incompletes(t *testing.T, cache string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, n := range blobFiles(t, cache) {
		if strings.Contains(n, ".incomplete") {
			fi, err := os.Stat(filepath.Join(cache, "models--acme--tiny-llm", "blobs", n))
			if err != nil {
				t.Fatal(err)
			}
			out[n] = fi.Size()
		}
	}
	return out
}

// partsDone reads the per-segment byte counts a parts file recorded
// (after its 32-byte header, one little-endian int64 a segment).
func partsDone(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < partsHeader || (len(b)-partsHeader)%8 != 0 {
		t.Fatalf("%s: %d bytes is not a parts file", path, len(b))
	}
	var done []int64
	for off := partsHeader; off < len(b); off += 8 {
		done = append(done, int64(binary.LittleEndian.Uint64(b[off:])))
	}
	return done
}

// rangeStarts are the first bytes of the ranges asked of path's content.
func rangeStarts(reqs []string) []int64 {
	var out []int64
	for _, r := range reqs {
		a, _, _ := strings.Cut(strings.TrimPrefix(r, "bytes="), "-")
		n, _ := strconv.ParseInt(a, 10, 64)
		out = append(out, n)
	}
	return out
}

// TestResumeAfterCut: a large file's responses are cut at half (all its
// ranges in flight die, as with a killed worker), the fetch gives up
// (one try) and leaves the partial file; the next fetch continues with
// Range requests from what is on disk, never asking again for a byte the
// parts file recorded, and the Hub serves that file's size plus at most
// one chunk per range that was in flight in all. Which ranges the cut
// finds in flight, and how far each got, is up to the scheduler: the
// test checks the bounds, not one interleaving.
func TestResumeAfterCut(t *testing.T) {
	for _, ranges := range []int{1, 4} {
		t.Run("ranges="+strconv.Itoa(ranges), func(t *testing.T) {
			want := fixture()
			s, sha := serve(t, want)
			cache := t.TempDir()
			req := request(s, cache)
			req.ParallelRanges = ranges
			req.MaxAttempts = 1
			size := int64(len(want[bigFile]))
			s.CutAfter(testRepo, bigFile, size/2)
			_, err := fetch(t, req)
			if err == nil {
				t.Fatal("the cut fetch succeeded")
			}
			if typ, ok := fault.TypeOf(err); ok {
				t.Fatalf("a dropped connection is permanent (%s): %v", typ, err)
			}
			etag := s.ETag(testRepo, bigFile)
			inc := incompletes(t, cache)
			if _, ok := inc[etag+".incomplete"]; !ok {
				t.Fatalf("no partial file for %s after the cut: %v", bigFile, inc)
			}
			if _, ok := inc[etag+".incomplete.parts"]; !ok {
				t.Fatalf("no parts file for %s after the cut: %v", bigFile, inc)
			}
			recorded := partsDone(t, filepath.Join(cache, "models--acme--tiny-llm", "blobs", etag+".incomplete.parts"))
			// Each range in flight may lose the unrecorded tail of its piece.
			lost := int64(ranges) * testChunk

			s.ResetLog()
			res, err := fetch(t, req)
			if err != nil {
				t.Fatal(err)
			}
			checkTree(t, cache, sha, "main", want)
			if res.ResumedBytes < size/2-lost {
				t.Fatalf("resumed %d bytes of %d, the cut left %d (at most %d may be lost)", res.ResumedBytes, size, size/2, lost)
			}
			var rngs []string
			for _, r := range s.Requests() {
				if r.Path == "/lfs/"+etag {
					rngs = append(rngs, r.Range)
				}
			}
			for _, st := range rangeStarts(rngs) {
				seg := st / testChunk
				if seg < int64(len(recorded)) && st < seg*testChunk+recorded[seg] {
					t.Fatalf("the resumed fetch asked for byte %d again, recorded on disk (segment %d holds %d bytes): %v", st, seg, recorded[seg], rngs)
				}
			}
			// Served over both fetches: the file once, plus at most a
			// chunk per range in flight.
			if got := size/2 + s.Served(testRepo, bigFile); got > size+lost {
				t.Fatalf("served %d bytes of a %d-byte file over the cut and the resume: more than %d extra", got, size, lost)
			}
		})
	}
}

// TestResumeWithinOneCall: with retries, the same call resumes after the
// cut and finishes.
func TestResumeWithinOneCall(t *testing.T) {
	want := fixture()
	s, sha := serve(t, want)
	cache := t.TempDir()
	size := int64(len(want[bigFile]))
	s.CutAfter(testRepo, bigFile, size/3)
	if _, err := fetch(t, request(s, cache)); err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)
	if got := s.Served(testRepo, bigFile); got > size+testChunk {
		t.Fatalf("served %d bytes of a %d-byte file", got, size)
	}
}

// TestResumeAfterCancel: the worker's context ends mid-download (its
// activity was cancelled); the next call resumes every partial file.
func TestResumeAfterCancel(t *testing.T) {
	want := fixture()
	s, sha := serve(t, want)
	cache := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := request(s, cache)
	total := uniqueBytes(want)
	req.Progress = func(p Progress) {
		if p.Downloaded >= total/2 {
			cancel()
		}
	}
	first, err := Fetch(ctx, req)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled fetch: %v", err)
	}
	req.Progress = nil
	res, err := fetch(t, req)
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)
	// Every byte received is written and counted before the next read,
	// so a cancel loses none of them.
	if extra := first.DownloadedBytes + res.DownloadedBytes - total; extra != 0 {
		t.Fatalf("%d bytes downloaded twice (first call %d, second %d, total %d)", extra, first.DownloadedBytes, res.DownloadedBytes, total)
	}
	if res.ResumedBytes == 0 {
		t.Fatal("nothing was resumed")
	}
}

// TestWholeFileResumesWithRange: a file of one chunk or less left partial
// (as huggingface_hub leaves one: a prefix, no parts file) continues with
// Range: bytes=N- where N is what is on disk.
func TestWholeFileResumesWithRange(t *testing.T) {
	want, s, sha, cache, blobs := resumeFixture(t)
	tok := want["tokenizer.json"]
	etag := s.ETag(testRepo, "tokenizer.json")
	have := len(tok) / 3
	if err := os.WriteFile(filepath.Join(blobs, etag+".incomplete"), tok[:have], 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := fetch(t, request(s, cache))
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)
	var rngs []string
	for _, r := range s.Requests() {
		if r.Path == "/"+testRepo+"/resolve/"+sha+"/tokenizer.json" {
			rngs = append(rngs, r.Range)
		}
	}
	if len(rngs) != 1 || rngs[0] != "bytes="+strconv.Itoa(have)+"-"+strconv.Itoa(len(tok)-1) {
		t.Fatalf("tokenizer.json asked with ranges %q, want one from byte %d", rngs, have)
	}
	if s.Served(testRepo, "tokenizer.json") != int64(len(tok)-have) || res.ResumedBytes != int64(have) {
		t.Fatalf("served %d, resumed %d", s.Served(testRepo, "tokenizer.json"), res.ResumedBytes)
	}
}

// TestBadResumedPrefixIsRefetched: a partial file whose kept bytes are
// wrong (what a machine crash can leave) fails its hash; the blob is then
// fetched once more from scratch, and the fetch succeeds.
func TestBadResumedPrefixIsRefetched(t *testing.T) {
	want, s, sha, cache, blobs := resumeFixture(t)
	for _, p := range []string{"tokenizer.json", bigFile} {
		garbage := randBytes(99, len(want[p])/2)
		if err := os.WriteFile(filepath.Join(blobs, s.ETag(testRepo, p)+".incomplete"), garbage, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fetch(t, request(s, cache)); err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)
	for _, p := range []string{"tokenizer.json", bigFile} {
		n := int64(len(want[p]))
		if got := s.Served(testRepo, p); got != n+(n-n/2) {
			t.Fatalf("%s: served %d, want the rest (%d) then the whole (%d)", p, got, n-n/2, n)
		}
	}
}

// TestWholePartialIsOnlyHashed: a partial file holding every byte (killed
// between dropping its parts file and the rename) is re-hashed and put in
// place without a request for its content.
func TestWholePartialIsOnlyHashed(t *testing.T) {
	want, s, sha, cache, blobs := resumeFixture(t)
	if err := os.WriteFile(filepath.Join(blobs, s.ETag(testRepo, bigFile)+".incomplete"), want[bigFile], 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := fetch(t, request(s, cache))
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)
	if s.Served(testRepo, bigFile) != 0 || res.ResumedBytes != int64(len(want[bigFile])) {
		t.Fatalf("served %d bytes of a file already whole on disk; resumed %d", s.Served(testRepo, bigFile), res.ResumedBytes)
	}
}

// resumeFixture serves the fixture repo and makes an empty cache with the
// repo's blobs directory, where a test leaves what an interrupted fetch
// would have.
func resumeFixture(t *testing.T) (want map[string][]byte, s *hubtest.Server, sha, cache, blobs string) {
	t.Helper()
	want = fixture()
	s, sha = serve(t, want)
	cache = t.TempDir()
	blobs = filepath.Join(cache, "models--acme--tiny-llm", "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	return want, s, sha, cache, blobs
}
