package hubfetch

import (
	"context"
	"os"
	"testing"
)

// Plan says what a fetch would download, after the skip globs, and
// writes nothing; after a fetch it finds nothing missing.
func TestPlanIsADryRun(t *testing.T) {
	want := fixture()
	s, sha := serve(t, want)
	cache := t.TempDir()
	req := request(s, cache)
	req.Skip = []string{"original/**"}
	p, err := Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var files int
	var bytes int64
	for path, b := range want {
		if len(path) >= 9 && path[:9] == "original/" {
			continue
		}
		files++
		bytes += int64(len(b))
	}
	if p.Commit != sha || p.Files != files || p.Bytes != bytes || p.SkippedFiles != 2 || p.MissingFiles != files || p.MissingBytes == 0 || p.MissingBytes > bytes {
		t.Fatalf("plan %+v; want commit %s, %d files, %d bytes, 2 skipped, all missing", p, sha, files, bytes)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Fatalf("Plan wrote into the cache: %v", ents)
	}
	if _, err := Fetch(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if p, err = Plan(context.Background(), req); err != nil || p.MissingFiles != 0 || p.MissingBytes != 0 {
		t.Fatalf("plan after the fetch: %+v, %v; want nothing missing", p, err)
	}
}
