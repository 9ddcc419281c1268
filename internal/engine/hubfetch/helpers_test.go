package hubfetch

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(killChildEnv) != "" {
		killChild() // never returns: the process kills itself
	}
	// Retries back off for a millisecond, not half a second: the tests
	// assert on what is retried, never on how long it takes.
	backoffBase = time.Millisecond
	backoffMax = time.Millisecond
	os.Exit(m.Run())
}

const (
	testRepo  = "acme/tiny-llm"
	testChunk = 1 << 20
)

// randBytes is n reproducible random bytes.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0xabcdef))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}

// fixture is a repo of LFS and git files, nested paths, two files with
// the same content, an empty file and a subtree to skip; LFS from 1 MiB.
func fixture() map[string][]byte {
	shared := randBytes(9, 3000)
	return map[string][]byte{
		"config.json":                      []byte(`{"architectures": ["TinyLLM"], "hidden_size": 64}`),
		"tokenizer.json":                   randBytes(1, 300<<10),
		"model-00001-of-00002.safetensors": randBytes(2, 9<<20+12345),
		"model-00002-of-00002.safetensors": randBytes(3, 5<<20),
		"nested/deeper/weights.bin":        randBytes(4, 3<<20+7),
		"nested/README.md":                 []byte("# nested\n"),
		"original/consolidated.pth":        randBytes(5, 4<<20),
		"original/params.json":             []byte(`{"dim": 64}`),
		"dup/a.txt":                        shared,
		"dup/b.txt":                        shared,
		"empty.txt":                        {},
	}
}

func files(m map[string][]byte) []hubtest.File {
	var out []hubtest.File
	for p, d := range m {
		out = append(out, hubtest.File{Path: p, Data: d})
	}
	return out
}

// serve starts a double with the fixture as testRepo (main, tag v1).
func serve(t *testing.T, content map[string][]byte) (*hubtest.Server, string) {
	t.Helper()
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	sha := s.AddRepo(hubtest.Repo{ID: testRepo, Tags: []string{"v1"}, LFSThreshold: 1 << 20, Files: files(content)})
	return s, sha
}

func request(s *hubtest.Server, cache string) Request {
	return Request{Endpoint: s.URL, CacheDir: cache, Repo: testRepo, ChunkSize: testChunk, ParallelFiles: 3, ParallelRanges: 4}
}

func etagOf(b []byte, lfs bool) string {
	if lfs {
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// checkTree asserts the hub cache layout of want (path → content) at
// commit: each snapshot entry a relative symlink, to ../(../)blobs/<etag>,
// resolving to identical bytes; blobs/ holding exactly those etags and
// nothing partial; refs/ref (when ref != "") holding the commit.
func checkTree(t *testing.T, cache, commit, ref string, want map[string][]byte) {
	t.Helper()
	checkSnapshot(t, cache, commit, ref, want, true)
}

// checkSnapshot is checkTree; with exact false, blobs/ may also hold
// other commits' blobs (still nothing partial).
func checkSnapshot(t *testing.T, cache, commit, ref string, want map[string][]byte, exact bool) {
	t.Helper()
	repo := filepath.Join(cache, "models--acme--tiny-llm")
	if ref != "" {
		b, err := os.ReadFile(filepath.Join(repo, "refs", ref))
		if err != nil || string(b) != commit {
			t.Fatalf("refs/%s = %q (%v), want %s", ref, b, err, commit)
		}
	}
	snap := filepath.Join(repo, "snapshots", commit)
	etags := map[string]bool{}
	for p, data := range want {
		link := filepath.Join(snap, p)
		target, err := os.Readlink(link)
		if err != nil {
			t.Fatalf("snapshot entry %s: %v", p, err)
		}
		etag := etagOf(data, len(data) >= 1<<20)
		wantTarget := strings.Repeat("../", 2+strings.Count(p, "/")) + "blobs/" + etag
		if target != wantTarget {
			t.Fatalf("snapshot entry %s -> %s, want %s", p, target, wantTarget)
		}
		got, err := os.ReadFile(link)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("snapshot entry %s: %d bytes (%v), not the served %d bytes", p, len(got), err, len(data))
		}
		etags[etag] = true
	}
	var inSnap []string
	filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(snap, p)
			inSnap = append(inSnap, rel)
		}
		return nil
	})
	if len(inSnap) != len(want) {
		t.Fatalf("snapshot holds %d entries %v, want %d", len(inSnap), inSnap, len(want))
	}
	ents, err := os.ReadDir(filepath.Join(repo, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		if exact && !etags[e.Name()] || !e.Type().IsRegular() || strings.Contains(e.Name(), ".") {
			t.Fatalf("blobs/ holds %s (%v), not a blob of the snapshot", e.Name(), e.Type())
		}
	}
	if exact && len(names) != len(etags) {
		sort.Strings(names)
		t.Fatalf("blobs/ holds %v, want %d blobs", names, len(etags))
	}
}

// blobFiles lists blobs/ (nil when absent).
func blobFiles(t *testing.T, cache string) []string {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(cache, "models--acme--tiny-llm", "blobs"))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func without(m map[string][]byte, prefixes ...string) map[string][]byte {
	out := map[string][]byte{}
next:
	for p, d := range m {
		for _, pre := range prefixes {
			if strings.HasPrefix(p, pre) {
				continue next
			}
		}
		out[p] = d
	}
	return out
}

func uniqueBytes(m map[string][]byte) int64 {
	seen := map[string]bool{}
	var n int64
	for _, d := range m {
		k := etagOf(d, len(d) >= 1<<20)
		if !seen[k] {
			seen[k] = true
			n += int64(len(d))
		}
	}
	return n
}

// mustType asserts err is a permanent fault of type typ whose message
// names every one of parts.
func mustType(t *testing.T, err error, typ string, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want a %s fault, got success", typ)
	}
	if got, ok := fault.TypeOf(err); !ok || got != typ {
		t.Fatalf("want a %s fault, got %q (permanent %v): %v", typ, got, ok, err)
	}
	t.Logf("%s: %v", typ, err)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s fault does not name %q: %v", typ, p, err)
		}
	}
}

func fetch(t *testing.T, req Request) (Result, error) {
	t.Helper()
	return Fetch(context.Background(), req)
}
