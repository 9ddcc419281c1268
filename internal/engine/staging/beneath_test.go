package staging

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/fault"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantFault fails unless err is a permanent fault of type typ naming parts.
func wantFault(t *testing.T, err error, typ string, parts ...string) {
	t.Helper()
	if got, ok := fault.TypeOf(err); !ok || got != typ {
		t.Fatalf("want a %s fault, got %v", typ, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not name %q", err, p)
		}
	}
}

// A Tree opens directories beneath its root only: links out of it (absolute
// or relative), and absolute links even when they point inside, are
// LinkEscape faults naming the component; links that stay inside work;
// missing directories are made only when asked, and nothing is created
// outside the root on the way.
func TestTreeDirStaysBeneathRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	must(t, os.MkdirAll(filepath.Join(root, "real"), 0o755))
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.Symlink(outside, filepath.Join(root, "abs-out")))
	must(t, os.Symlink("../outside", filepath.Join(root, "rel-out")))
	must(t, os.Symlink(filepath.Join(root, "real"), filepath.Join(root, "abs-in")))
	must(t, os.Symlink("real", filepath.Join(root, "rel-in")))
	must(t, os.WriteFile(filepath.Join(root, "file"), []byte("x"), 0o644))

	tr, err := OpenTree(filepath.Join(root, "real"), []string{root}, false)
	must(t, err)
	defer tr.Close()

	for _, c := range []struct{ path, comp, says string }{
		{filepath.Join(root, "abs-out", "hf"), filepath.Join(root, "abs-out"), "absolute symlink"},
		{filepath.Join(root, "rel-out", "hf", "hub"), filepath.Join(root, "rel-out"), `symlink to "../outside"`},
		{filepath.Join(root, "abs-in", "hf"), filepath.Join(root, "abs-in"), "absolute symlink"},
	} {
		for _, create := range []bool{false, true} {
			_, err := tr.Dir(c.path, create)
			wantFault(t, err, fault.LinkEscape, c.path, c.comp, c.says)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("something was created outside the root: %v", ents)
	}

	d, err := tr.Dir(filepath.Join(root, "rel-in", "a", "b"), true)
	must(t, err)
	f, err := d.OpenFile("x", os.O_WRONLY|os.O_CREATE, 0o644)
	must(t, err)
	must(t, f.Close())
	must(t, d.Close())
	if _, err := os.Stat(filepath.Join(root, "real", "a", "b", "x")); err != nil {
		t.Fatalf("a link inside the root was not followed: %v", err)
	}

	if _, err := tr.Dir(filepath.Join(root, "missing", "deeper"), false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing dir without create: %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Join(root, "missing")); err == nil {
		t.Fatal("a dir was made without create")
	}
	_, err = tr.Dir(filepath.Join(root, "file", "sub"), true)
	wantFault(t, err, NotADirectory, filepath.Join(root, "file"))

	// A final name that is a link is never followed by OpenFile.
	real, err := tr.Dir(filepath.Join(root, "real"), false)
	must(t, err)
	defer real.Close()
	must(t, os.Symlink(filepath.Join(outside, "victim"), filepath.Join(root, "real", "ledger")))
	if _, err := real.OpenFile("ledger", os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
		t.Fatal("OpenFile followed a link out of the root")
	}
	if _, err := os.Lstat(filepath.Join(outside, "victim")); err == nil {
		t.Fatal("OpenFile created the link's target outside the root")
	}

	if _, err := OpenTree(outside, []string{root}, false); err == nil {
		t.Fatal("OpenTree of a path outside the roots did not fail")
	}
}
