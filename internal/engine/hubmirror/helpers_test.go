package hubmirror

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/hubcache"
	"github.com/sparklane/sparklane/internal/testkit/blobtest"
)

// The blobs these tests copy: deterministic per seed, named by sha256.
var (
	testData = blobtest.Data
	shaHex   = blobtest.SHAHex
)

// otherBoot stands in for the boot id of an earlier boot (a reboot since a
// temp file was written) in a temp file's boot mark.
const otherBoot = "5b0c7ab2-0000-4000-8000-000000000000"

// hubRepo builds one models--org--name tree in a test hub.
type hubRepo struct {
	t        *testing.T
	hub, dir string
}

func newRepo(t *testing.T, hub, repo string) *hubRepo {
	t.Helper()
	r := &hubRepo{t: t, hub: hub, dir: hubcache.RepoPath(hub, repo)}
	for _, d := range []string{"blobs", "snapshots", "refs"} {
		must(t, os.MkdirAll(filepath.Join(r.dir, d), 0o755))
	}
	return r
}

// blob stores data as an LFS blob named by its sha256. With store, the
// repo's blobs/SHA is a link into a hub-level store hub/blobs/SH/SHA.
func (r *hubRepo) blob(data []byte, store bool) string {
	r.t.Helper()
	sum := shaHex(data)
	p := filepath.Join(r.dir, "blobs", sum)
	if store {
		sp := filepath.Join(r.hub, "blobs", sum[:2], sum)
		must(r.t, os.MkdirAll(filepath.Dir(sp), 0o755))
		must(r.t, os.WriteFile(sp, data, 0o644))
		must(r.t, os.Symlink(filepath.Join("..", "..", "blobs", sum[:2], sum), p))
	} else {
		must(r.t, os.WriteFile(p, data, 0o644))
	}
	return sum
}

// link makes snapshots/REV/path a relative link to blobs/SUM, as the hub does.
func (r *hubRepo) link(rev, path, sum string) {
	r.t.Helper()
	p := filepath.Join(r.dir, "snapshots", rev, path)
	must(r.t, os.MkdirAll(filepath.Dir(p), 0o755))
	rel, err := filepath.Rel(filepath.Dir(p), filepath.Join(r.dir, "blobs", sum))
	must(r.t, err)
	must(r.t, os.Symlink(rel, p))
}

// file puts a real file inside snapshots/REV/.
func (r *hubRepo) file(rev, path string, data []byte) {
	r.t.Helper()
	p := filepath.Join(r.dir, "snapshots", rev, path)
	must(r.t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(r.t, os.WriteFile(p, data, 0o644))
}

func (r *hubRepo) ref(name, rev string) {
	r.t.Helper()
	must(r.t, os.WriteFile(filepath.Join(r.dir, "refs", name), []byte(rev), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const rev1 = "0123456789abcdef0123456789abcdef01234567"

// wantType fails unless err is a permanent fault of type typ whose message
// contains every one of parts.
func wantType(t *testing.T, err error, typ string, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want a %s error, got nil", typ)
	}
	if got, ok := fault.TypeOf(err); !ok || got != typ {
		t.Fatalf("want fault type %s, got %q (%v): %v", typ, got, ok, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not name %q", err, p)
		}
	}
}

// treeState maps every path under root to its type and content, for
// "nothing was written" checks.
func treeState(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			tgt, _ := os.Readlink(p)
			m[p] = "link:" + tgt
		case d.IsDir():
			m[p] = "dir:" + fi.Mode().String()
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[p] = "file:" + fi.Mode().String() + ":" + shaHex(b) + ":" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
		}
		return nil
	})
	must(t, err)
	return m
}

func sameState(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// mirrorAudit walks a mirror and resolves every link syntactically. It
// returns how many links escape the mirror and how many dangle.
func mirrorAudit(t *testing.T, mirror string) (links, escapes, dangling int) {
	t.Helper()
	err := filepath.WalkDir(mirror, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		links++
		final, fi, err := resolve(p)
		if !within(final, mirror) {
			escapes++
		}
		// every hop must stay inside too
		tgt, _ := os.Readlink(p)
		if filepath.IsAbs(tgt) || !within(join(p, tgt), mirror) {
			escapes++
		}
		if err != nil || !fi.Mode().IsRegular() {
			dangling++
		}
		return nil
	})
	must(t, err)
	return
}

// tmpLeft lists temp files left under root.
func tmpLeft(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && (strings.HasSuffix(p, tmpSuffix) || strings.Contains(filepath.Base(p), ".tmp-")) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// readChars is this process's rchar from /proc/self/io: bytes read
// through read syscalls, page cache included.
func readChars(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			must(t, err)
			return n
		}
	}
	t.Fatal("no rchar in /proc/self/io")
	return 0
}

func fileEquals(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: content differs from the source (%d vs %d bytes)", path, len(got), len(want))
	}
}

// mountTmpfs mounts a tmpfs of size (mount's "8m") on dir for the test
// (root only): a real disk that fills up or refuses writes.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a tmpfs and must run as root")
	}
	must(t, os.MkdirAll(dir, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// smallNode is a node directory on an 8 MiB tmpfs (mountTmpfs) and a NAS
// hub beside it holding an empty repo org/model.
func smallNode(t *testing.T) (node, hub string, r *hubRepo) {
	t.Helper()
	root := t.TempDir()
	node = filepath.Join(root, "node")
	mountTmpfs(t, node, "8m")
	hub = filepath.Join(root, "nas", "hub")
	return node, hub, newRepo(t, hub, "org/model")
}
