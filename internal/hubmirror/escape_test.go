package hubmirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/staging"
)

// Issue 13.1: a source link may resolve only inside src or a shared root.
// A link to a host file (absolute, relative with "..", or through a
// directory link on the way) is refused while planning, so a dry run
// reports it too and nothing is written; the fault names entry and target.
func TestSourceLinkEscapeRefused(t *testing.T) {
	cases := []struct {
		name string
		// plant makes the escaping entry in f and returns the entry path and
		// a string the error must contain (the link text or the target).
		plant func(t *testing.T, f *fixture, outside string) (string, string)
		skip  []string
	}{
		{"absolute", func(t *testing.T, f *fixture, outside string) (string, string) {
			e := filepath.Join(f.repo.dir, "snapshots", rev1, "shadow")
			must(t, os.Symlink(filepath.Join(outside, "shadow"), e))
			return e, filepath.Join(outside, "shadow")
		}, nil},
		{"relative-dotdot", func(t *testing.T, f *fixture, outside string) (string, string) {
			e := filepath.Join(f.repo.dir, "snapshots", rev1, "sub", "passwd")
			rel, err := filepath.Rel(filepath.Dir(e), filepath.Join(outside, "passwd"))
			must(t, err)
			must(t, os.Symlink(rel, e))
			return e, rel
		}, nil},
		{"through-directory-link", func(t *testing.T, f *fixture, outside string) (string, string) {
			// blobs/etc is a directory link out of src; the entry's text
			// stays inside src (../../blobs/etc/shadow), the kernel's
			// resolution does not.
			must(t, os.Symlink(outside, filepath.Join(f.repo.dir, "blobs", "etc")))
			e := filepath.Join(f.repo.dir, "snapshots", rev1, "innocent.json")
			must(t, os.Symlink("../../blobs/etc/shadow", e))
			return e, filepath.Join(outside, "shadow")
		}, nil},
		{"directory-entry", func(t *testing.T, f *fixture, outside string) (string, string) {
			e := filepath.Join(f.repo.dir, "snapshots", rev1, "etc")
			must(t, os.Symlink(outside, e))
			return e, outside
		}, nil},
		{"skipped-entry", func(t *testing.T, f *fixture, outside string) (string, string) {
			// A skipped entry is bound into the container from the NAS: it
			// must not reach the host either.
			e := filepath.Join(f.repo.dir, "snapshots", rev1, "extra", "shadow")
			must(t, os.MkdirAll(filepath.Dir(e), 0o755))
			must(t, os.Symlink(filepath.Join(outside, "shadow"), e))
			return e, filepath.Join(outside, "shadow")
		}, []string{"extra/**"}},
		{"snapshots-dir", func(t *testing.T, f *fixture, outside string) (string, string) {
			snaps := filepath.Join(f.repo.dir, "snapshots")
			must(t, os.Rename(snaps, filepath.Join(f.root, "moved-snapshots")))
			must(t, os.Symlink(filepath.Join(f.root, "moved-snapshots"), snaps))
			return snaps, filepath.Join(f.root, "moved-snapshots")
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			outside := filepath.Join(f.root, "host-etc")
			must(t, os.MkdirAll(outside, 0o755))
			must(t, os.WriteFile(filepath.Join(outside, "shadow"), []byte("root:secret:"), 0o600))
			must(t, os.WriteFile(filepath.Join(outside, "passwd"), []byte("root:x:0:0"), 0o644))
			entry, target := tc.plant(t, f, outside)
			sp := f.spec()
			sp.Skip = tc.skip
			for _, dry := range []bool{true, false} {
				_, err := Stage(context.Background(), sp, staging.Options{DryRun: dry})
				wantType(t, err, fault.LinkEscape, entry, target)
				if _, err := os.Lstat(f.dst); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("dry=%v: an escaping source link left something in dst %s: %v", dry, f.dst, err)
				}
			}
			_, err := Verify(context.Background(), sp, false)
			wantType(t, err, fault.LinkEscape, entry)
		})
	}
}

// A link into a shared root (the NAS beside src) is allowed and staged.
func TestSourceLinkIntoSharedRoot(t *testing.T) {
	f := newFixture(t, false)
	shared := filepath.Join(f.root, "nas", "datasets")
	must(t, os.MkdirAll(shared, 0o755))
	data := testData(7, 3000)
	must(t, os.WriteFile(filepath.Join(shared, "vocab.txt"), data, 0o644))
	must(t, os.Symlink(filepath.Join(shared, "vocab.txt"), filepath.Join(f.repo.dir, "snapshots", rev1, "vocab.txt")))
	sp := f.spec()
	_, err := Stage(context.Background(), sp, staging.Options{DryRun: true})
	wantType(t, err, fault.LinkEscape, "vocab.txt")
	sp.SharedRoots = []string{filepath.Join(f.root, "nas")}
	if _, err := Stage(context.Background(), sp, staging.Options{}); err != nil {
		t.Fatal(err)
	}
	fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, "vocab.txt"), data)
}
