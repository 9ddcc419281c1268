package hubmirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
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
		{"dotdot-after-a-directory-link", func(t *testing.T, f *fixture, outside string) (string, string) {
			// Lexically ../../blobs/etc/../passwd is blobs/passwd (planted
			// inside src); the kernel climbs from etc's target, out of src.
			// A link text that climbs after a name never takes the cached
			// directory shortcut.
			must(t, os.MkdirAll(filepath.Join(outside, "sub"), 0o755))
			must(t, os.Symlink(filepath.Join(outside, "sub"), filepath.Join(f.repo.dir, "blobs", "etc")))
			must(t, os.WriteFile(filepath.Join(f.repo.dir, "blobs", "passwd"), []byte("decoy"), 0o644))
			e := filepath.Join(f.repo.dir, "snapshots", rev1, "decoy.json")
			must(t, os.Symlink("../../blobs/etc/../passwd", e))
			return e, filepath.Join(outside, "passwd")
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

// Issue 13.2: writes never follow a symlink out of the node's roots. The
// roots check used to compare path text, so dst = ROOT/sparklane/esc/hf
// with esc -> /tmp/elsewhere landed in /tmp/elsewhere. Every destination
// directory is now opened beneath its root: the escape is a LinkEscape
// fault naming the path and the offending component, and nothing is
// created outside (the outside dir is compared before and after).
func TestDestinationLinkEscapeRefused(t *testing.T) {
	type setup struct {
		f       *fixture
		sp      Spec
		outside string
	}
	cases := []struct {
		name string
		// plant makes the escape and returns the component the error must name.
		plant func(t *testing.T, s *setup) string
	}{
		{"dst-component-absolute", func(t *testing.T, s *setup) string {
			esc := filepath.Join(s.f.root, "node", "esc")
			must(t, os.MkdirAll(filepath.Dir(esc), 0o755))
			must(t, os.Symlink(s.outside, esc))
			s.sp.Dst = filepath.Join(esc, "hf")
			return esc
		}},
		{"dst-component-relative", func(t *testing.T, s *setup) string {
			esc := filepath.Join(s.f.root, "node", "esc")
			must(t, os.MkdirAll(filepath.Dir(esc), 0o755))
			rel, err := filepath.Rel(filepath.Dir(esc), s.outside)
			must(t, err)
			must(t, os.Symlink(rel, esc))
			s.sp.Dst = filepath.Join(esc, "hf")
			return esc
		}},
		{"inside-mirror", func(t *testing.T, s *setup) string {
			// A link planted in an existing mirror (snapshots/ -> outside).
			snaps := filepath.Join(s.f.dst, "hub", "models--org--model", "snapshots")
			must(t, os.MkdirAll(filepath.Dir(snaps), 0o755))
			must(t, os.Symlink(s.outside, snaps))
			return snaps
		}},
		{"export-parent", func(t *testing.T, s *setup) string {
			ex := filepath.Join(s.f.root, "node", "exports")
			must(t, os.MkdirAll(filepath.Dir(ex), 0o755))
			must(t, os.Symlink(s.outside, ex))
			s.sp.Exports = []Export{{Repo: "org/model", Path: filepath.Join(ex, "model")}}
			return ex
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			// The node's root is ROOT/node; outside lies beside it.
			s := &setup{f: f, sp: f.spec(), outside: filepath.Join(f.root, "elsewhere")}
			s.sp.Roots = []string{filepath.Join(f.root, "node")}
			must(t, os.MkdirAll(s.outside, 0o755))
			comp := tc.plant(t, s)
			before := treeState(t, s.outside)
			for _, dry := range []bool{true, false} {
				_, err := Stage(context.Background(), s.sp, staging.Options{DryRun: dry})
				wantType(t, err, fault.LinkEscape, comp)
				if after := treeState(t, s.outside); !sameState(before, after) {
					t.Fatalf("dry=%v: staging wrote outside the root: %v", dry, after)
				}
			}
			if tc.name != "export-parent" {
				_, err := Verify(context.Background(), s.sp, false)
				wantType(t, err, fault.LinkEscape, comp)
			}
		})
	}
}

// A link that stays inside the root is followed; a ledger or temp name
// planted as a link out of the root is replaced, never written through.
func TestDestinationLinksInsideRoot(t *testing.T) {
	f := newFixture(t, false)
	node := filepath.Join(f.root, "node")
	must(t, os.MkdirAll(filepath.Join(node, "real-hf", "hub"), 0o755))
	must(t, os.Symlink("real-hf", filepath.Join(node, "hf-link")))
	outside := filepath.Join(f.root, "elsewhere")
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "victim"), []byte("keep me"), 0o644))
	must(t, os.Symlink(filepath.Join(outside, "victim"), filepath.Join(node, "real-hf", "hub", LedgerName)))
	sp := f.spec()
	sp.Dst, sp.Roots = filepath.Join(node, "hf-link"), []string{node}
	before := treeState(t, outside)
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 6 {
		t.Fatalf("result %+v: want 6 files copied", res)
	}
	fileEquals(t, filepath.Join(node, "real-hf", "hub", "models--org--model", "snapshots", rev1, "README.md"), f.blobs["README.md"])
	if !sameState(before, treeState(t, outside)) {
		t.Fatal("the ledger was written through its link out of the root")
	}
	if fi, err := os.Lstat(filepath.Join(node, "real-hf", "hub", LedgerName)); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("ledger is not a regular file after the pass: %v", err)
	}
	v, err := Verify(context.Background(), sp, false)
	must(t, err)
	if !v.Clean() {
		t.Fatalf("verify: %+v", v)
	}
}

// plainClimb admits only link texts whose lexical and kernel resolutions
// agree once the link's directory is real: leading ".." then names.
func TestPlainClimb(t *testing.T) {
	for target, want := range map[string]bool{
		"../../blobs/abc":        true,
		"abc":                    true,
		"/nas/hub/blobs/abc":     true,
		"../../blobs/etc/../abc": false,
		"./abc":                  false,
		"../blobs//abc":          false,
		"/nas/../etc/passwd":     false,
		"":                       false,
		"../..":                  true,
	} {
		if got := plainClimb(target); got != want {
			t.Errorf("plainClimb(%q) = %v, want %v", target, got, want)
		}
	}
}
