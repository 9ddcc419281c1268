package serve_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/fault"
)

// node is a node's root with a staged lane and a receipt root holding
// yesterday's files, some owned by root in a read-only directory.
type clearNode struct {
	root, staged, receipts string
}

func newClearNode(t *testing.T) clearNode {
	t.Helper()
	root := filepath.Join(t.TempDir(), "srv", "sparklane")
	n := clearNode{root: root, staged: filepath.Join(root, "lane", "hub"), receipts: filepath.Join(root, "state", "lane", "receipts")}
	writeFiles(t, n.staged, map[string]string{"model.safetensors": "weights", ".sparklane-ledger.json": "{}"})
	writeFiles(t, n.receipts, map[string]string{"run1/rank0.done": "r0", "run1/rank1.done": "r11", "top.json": "{}\n", "deep/a/b/c": "12345"})
	// Yesterday's container ran as root: root-owned files in a root-owned
	// directory the worker may not write (0555).
	for _, p := range []string{"run1/rank0.done", "run1/rank1.done", "run1"} {
		if err := os.Lchown(filepath.Join(n.receipts, p), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(n.receipts, "run1"), 0o555); err != nil {
		t.Fatal(err)
	}
	return n
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree returns every regular file under dir with its contents.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return out
}

func sameTree(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func wantRefused(t *testing.T, err error, says ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("clear was not refused")
	}
	if typ, ok := fault.TypeOf(err); !ok || typ != serve.ClearRefused {
		t.Errorf("error type = %q, %v; want permanent %s: %v", typ, ok, serve.ClearRefused, err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not name %q: %v", s, err)
		}
	}
}

func TestClearRemovesReceiptRoot(t *testing.T) {
	n := newClearNode(t)
	never := filepath.Join(n.root, "state", "other", "receipts")
	staged := readTree(t, n.root+"/lane")
	// A second root the node has not created yet holds nothing to remove.
	noRoot := filepath.Join(filepath.Dir(n.root), "nvme-not-mounted")
	res, err := serve.RunHooks(context.Background(), serve.HooksInput{
		Clear: []string{n.receipts, never, noRoot + "/receipts"}, Roots: []string{n.root, noRoot}, Protected: []string{n.staged},
	})
	if err != nil {
		t.Fatalf("RunHooks: %v", err)
	}
	if _, err := os.Lstat(n.receipts); !os.IsNotExist(err) {
		t.Fatalf("receipt root %s still there after clear (%v): the kit's mkdir(exist_ok=False) fails", n.receipts, err)
	}
	want := []serve.Cleared{
		{Path: n.receipts, Files: 4, Bytes: int64(len("r0") + len("r11") + len("{}\n") + len("12345"))},
		{Path: never, Absent: true},
		{Path: noRoot + "/receipts", Absent: true},
	}
	if len(res.Cleared) != 3 || res.Cleared[0] != want[0] || res.Cleared[1] != want[1] || res.Cleared[2] != want[2] {
		t.Errorf("Cleared = %+v, want %+v", res.Cleared, want)
	}
	// Strict-on-exists, as the kit does it: the root can be made afresh.
	if err := os.Mkdir(n.receipts, 0o755); err != nil {
		t.Errorf("mkdir of the cleared receipt root: %v", err)
	}
	if got := readTree(t, n.root+"/lane"); !sameTree(got, staged) {
		t.Errorf("staged data changed by the clear: %v, want %v", got, staged)
	}
}

func TestClearRefusesRootItself(t *testing.T) {
	n := newClearNode(t)
	before := readTree(t, n.root)
	for _, p := range []string{n.root, n.root + "/", n.root + "/state/.."} {
		_, err := serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{p}, Roots: []string{n.root}})
		wantRefused(t, err, "root "+n.root+" itself")
	}
	if got := readTree(t, n.root); !sameTree(got, before) {
		t.Errorf("node root changed by a refused clear")
	}
}

func TestClearRefusesOutsideRoots(t *testing.T) {
	n := newClearNode(t)
	outside := filepath.Join(filepath.Dir(n.root), "elsewhere")
	writeFiles(t, outside, map[string]string{"keep": "me"})
	for _, c := range []struct {
		path  string
		roots []string
		says  string
	}{
		{outside, []string{n.root}, "not beneath any of the node's roots"},
		{n.root + "/../elsewhere", []string{n.root}, "not beneath any of the node's roots"},
		{"state/lane/receipts", []string{n.root}, "not an absolute path"},
		{n.receipts, nil, "not beneath any of the node's roots"},
		{"/tmp", []string{n.root}, "not beneath"},
	} {
		_, err := serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{c.path}, Roots: c.roots})
		wantRefused(t, err, c.says)
	}
	if got := readTree(t, outside); got["keep"] != "me" {
		t.Errorf("outside dir changed: %v", got)
	}
	if _, err := os.Stat(n.receipts); err != nil {
		t.Errorf("receipts removed by refused clears: %v", err)
	}
}

func TestClearRefusesSymlinkComponent(t *testing.T) {
	n := newClearNode(t)
	outside := filepath.Join(filepath.Dir(filepath.Dir(n.root)), "etc")
	writeFiles(t, outside, map[string]string{"receipts/passwd": "root:x:0:0", "receipts/sub/shadow": "secret", "hosts": "127.0.0.1"})
	outBefore := readTree(t, outside)
	// A link out of the root in the middle of the path, a link as the
	// last component, and a link that stays inside the root: none followed.
	if err := os.Symlink(outside, filepath.Join(n.root, "state", "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "receipts"), filepath.Join(n.root, "state", "lastlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("lane", filepath.Join(n.root, "state", "alias")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, component string }{
		{filepath.Join(n.root, "state", "out", "receipts"), filepath.Join(n.root, "state", "out")},
		{filepath.Join(n.root, "state", "lastlink"), filepath.Join(n.root, "state", "lastlink")},
		{filepath.Join(n.root, "state", "alias", "receipts"), filepath.Join(n.root, "state", "alias")},
	} {
		_, err := serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{c.path}, Roots: []string{n.root}})
		wantRefused(t, err, c.path, "component "+c.component+" is a symlink")
	}
	if got := readTree(t, outside); !sameTree(got, outBefore) {
		t.Errorf("outside target changed: %v, want %v", got, outBefore)
	}
	if _, err := os.Stat(n.receipts); err != nil {
		t.Errorf("receipts reached through the inside link were removed: %v", err)
	}
}

func TestClearRemovesLinksNotTargets(t *testing.T) {
	n := newClearNode(t)
	outside := filepath.Join(filepath.Dir(n.root), "target")
	writeFiles(t, outside, map[string]string{"f": "kept"})
	if err := os.Symlink(outside, filepath.Join(n.receipts, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "f"), filepath.Join(n.receipts, "filelink")); err != nil {
		t.Fatal(err)
	}
	if _, err := serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{n.receipts}, Roots: []string{n.root}}); err != nil {
		t.Fatalf("RunHooks: %v", err)
	}
	if _, err := os.Lstat(n.receipts); !os.IsNotExist(err) {
		t.Errorf("receipts still there: %v", err)
	}
	if got := readTree(t, outside); got["f"] != "kept" || len(got) != 1 {
		t.Errorf("link target changed: %v", got)
	}
}

func TestClearRefusesStagedData(t *testing.T) {
	n := newClearNode(t)
	staged := readTree(t, n.root+"/lane")
	for _, c := range []struct {
		path, says string
		protected  []string
	}{
		{filepath.Join(n.root, "lane"), "would remove " + n.staged, []string{n.staged}},
		{n.staged, "would remove " + n.staged, []string{n.staged}},
		// Even when the workflow names no protected paths, a ledger marks
		// staged data.
		{filepath.Join(n.root, "lane"), "staging ledger", nil},
	} {
		_, err := serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{c.path}, Roots: []string{n.root}, Protected: c.protected})
		wantRefused(t, err, c.says)
	}
	if got := readTree(t, n.root+"/lane"); !sameTree(got, staged) {
		t.Errorf("staged data changed: %v", got)
	}
	// A receipt root beside the staged data is fine.
	if _, err := serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{n.receipts}, Roots: []string{n.root}, Protected: []string{n.staged}}); err != nil {
		t.Errorf("clear beside staged data: %v", err)
	}
}

func TestClearHelper(t *testing.T) {
	n := newClearNode(t)
	double, err := filepath.Abs("testdata/sudo-double.sh")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "argv")
	t.Setenv("SUDO_DOUBLE_LOG", log)
	// The worker user may not remove the root-owned run1 (the kernel says
	// EACCES; root never hears that, so a test hook says it).
	run1 := filepath.Join(n.receipts, "run1")
	defer serve.SetRemoveFault(func(p string) error {
		if p == run1 || strings.HasPrefix(p, run1+"/") {
			return syscall.EACCES
		}
		return nil
	})()

	// Without a helper: an error saying what to configure, nothing hidden.
	_, err = serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{n.receipts}, Roots: []string{n.root}})
	if err == nil || !strings.Contains(err.Error(), "clear_helper") || !strings.Contains(err.Error(), n.receipts) {
		t.Fatalf("EACCES without a helper: %v, want an error naming the path and clear_helper", err)
	}
	if _, ok := fault.TypeOf(err); ok {
		t.Errorf("EACCES is not a recipe error: %v", err)
	}
	if _, err := os.Stat(filepath.Join(run1, "rank0.done")); err != nil {
		t.Fatalf("root-owned receipt vanished without a helper: %v", err)
	}

	// With the helper, on a node the failed attempt did not half-clear:
	// exactly rm -rf --one-file-system -- PATH through it.
	n = newClearNode(t)
	run1 = filepath.Join(n.receipts, "run1")
	res, err := serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{n.receipts}, Roots: []string{n.root}, Helper: []string{double, "-n"}})
	if err != nil {
		t.Fatalf("RunHooks with helper: %v", err)
	}
	if _, err := os.Lstat(n.receipts); !os.IsNotExist(err) {
		t.Errorf("receipts still there after the helper: %v", err)
	}
	if len(res.Cleared) != 1 || !res.Cleared[0].Helper || res.Cleared[0].Files != 4 || res.Cleared[0].Bytes != int64(len("r0")+len("r11")+len("{}\n")+len("12345")) {
		t.Errorf("Cleared = %+v, want 4 files, 12 bytes, removed by the helper", res.Cleared)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{"-n", "rm", "-rf", "--one-file-system", "--", n.receipts, "--end--", ""}, "\n")
	if string(b) != want {
		t.Errorf("helper argv:\n%s\nwant:\n%s", b, want)
	}

	// The helper gets the same checks: a symlinked path never reaches it.
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(n.root), "outside")
	writeFiles(t, outside, map[string]string{"receipts/x": "x"})
	if err := os.Symlink(outside, filepath.Join(n.root, "state", "link")); err != nil {
		t.Fatal(err)
	}
	_, err = serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{filepath.Join(n.root, "state", "link", "receipts")}, Roots: []string{n.root}, Helper: []string{double}})
	wantRefused(t, err, "is a symlink")
	if _, err := os.Stat(log); !os.IsNotExist(err) {
		t.Errorf("the helper ran for a refused path")
	}
	if got := readTree(t, outside); got["receipts/x"] != "x" {
		t.Errorf("outside changed: %v", got)
	}
}

// mountTmpfs mounts a fresh tmpfs at dir (created) until the test ends.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("sparklane-test", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs at %s (the tests run as root with CAP_SYS_ADMIN): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// Like rm --one-file-system: a clear never removes across a mount point,
// and refuses before removing anything.
func TestClearStaysOnOneFileSystem(t *testing.T) {
	n := newClearNode(t)
	inner := filepath.Join(n.receipts, "nfs")
	mountTmpfs(t, inner)
	writeFiles(t, inner, map[string]string{"other-fs": "kept"})
	before := readTree(t, n.receipts)
	_, err := serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{n.receipts}, Roots: []string{n.root}})
	wantRefused(t, err, inner+" is on another file system")
	if got := readTree(t, n.receipts); !sameTree(got, before) {
		t.Errorf("receipts changed by a refused clear: %v, want %v", got, before)
	}

	// The clear path itself a mount point: refused too.
	mounted := filepath.Join(n.root, "state", "scratch")
	mountTmpfs(t, mounted)
	writeFiles(t, mounted, map[string]string{"x": "kept"})
	_, err = serve.RunHooks(context.Background(), serve.HooksInput{Clear: []string{mounted}, Roots: []string{n.root}})
	wantRefused(t, err, "is a mount point")
	if got := readTree(t, mounted); got["x"] != "kept" {
		t.Errorf("mount point contents changed: %v", got)
	}
}
