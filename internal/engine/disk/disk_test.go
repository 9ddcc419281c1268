package disk

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/testkit/loopfs"
)

// writeBlock fills dir with files of n MiB of non-zero data (allocated,
// not sparse) and a ledger (in hub/ for a hub-mirror block).
func writeBlock(t *testing.T, dir, kind string, mib int, verified time.Time) {
	t.Helper()
	ledDir := dir
	if kind == "hub-mirror" {
		ledDir = filepath.Join(dir, "hub")
	}
	if err := os.MkdirAll(ledDir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{0xa5}, 1<<20)
	l := ledger.New(kind)
	for i := 0; i < mib; i++ {
		name := filepath.Join(ledDir, "f"+string(rune('a'+i)))
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
		l.Entries[filepath.Base(name)] = ledger.Entry{Size: 1 << 20, VerifiedAt: verified}
	}
	if err := l.Save(filepath.Join(ledDir, ".sparklane-ledger.json")); err != nil {
		t.Fatal(err)
	}
}

// TestPruneLRUFreesSpaceOnLoopFS stages three lanes' blocks on a real
// 64 MiB ext4 filesystem and prunes least recently served first: the
// never-served block goes, the served one stays, the running lane's block
// is never taken, and the filesystem's free space grows by what was listed.
func TestPruneLRUFreesSpaceOnLoopFS(t *testing.T) {
	mnt := loopfs.Mount(t, 64)
	root := filepath.Join(mnt, "nvme")
	outside := filepath.Join(mnt, "outside")
	for _, d := range []string{root, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "keep.txt")
	if err := os.WriteFile(secret, []byte("outside the root"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	old := filepath.Join(root, "old")
	used := filepath.Join(root, "used")
	live := filepath.Join(root, "live")
	writeBlock(t, old, "hub-mirror", 12, now.Add(-48*time.Hour))
	writeBlock(t, used, "sparse-rows", 12, now.Add(-72*time.Hour))
	writeBlock(t, live, "sparse-rows", 8, now.Add(-96*time.Hour))
	// A link in the old block to a file outside the root: removing the
	// block removes the link, never what it points at.
	if err := os.Symlink(secret, filepath.Join(old, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(old, "escape-dir")); err != nil {
		t.Fatal(err)
	}
	if err := RecordServed([]string{root}, []string{filepath.Join(used, "x"), "/nas/elsewhere"}, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	blocks := []Block{
		{Lanes: []string{"a"}, ID: "mirror", Kind: "hub-mirror", Dst: old, Local: old},
		{Lanes: []string{"b"}, ID: "rows", Kind: "sparse-rows", Dst: used, Local: used},
		{Lanes: []string{"c"}, ID: "rows", Kind: "sparse-rows", Dst: live, Local: live},
		{Lanes: []string{"d"}, ID: "never", Kind: "sparse-rows", Dst: filepath.Join(root, "none"), Local: filepath.Join(root, "none")},
	}
	scan := Scan([]string{root}, blocks)
	if len(scan) != 1 || len(scan[0].Blocks) != 4 {
		t.Fatalf("scan: %+v", scan)
	}
	by := map[string]Usage{}
	for _, u := range scan[0].Blocks {
		by[u.Local] = u
	}
	if u := by[old]; !u.Present || u.Bytes < 12<<20 || !u.VerifiedAt.Equal(now.Add(-48*time.Hour)) || !u.LastServed.IsZero() || u.Error != "" {
		t.Fatalf("old block: %+v", u)
	}
	if u := by[used]; !u.LastServed.Equal(now.Add(-time.Hour)) {
		t.Fatalf("used block last served: %+v", u)
	}
	if u := by[filepath.Join(root, "none")]; u.Present || u.Bytes != 0 {
		t.Fatalf("missing block: %+v", u)
	}
	free0 := scan[0].Free
	// Ask for 4 MiB more than is free: the never-served block (a) is
	// enough; the running lane c would be the oldest by verification but
	// is protected.
	spec := PruneSpec{LRU: true, Free: free0 + 4<<20, Protected: []string{"c"}}
	dry := Prune([]string{root}, blocks, PruneSpec{LRU: spec.LRU, Free: spec.Free, Protected: spec.Protected, DryRun: true})
	if len(dry.Removals) != 1 || dry.Removals[0].Local != old || dry.Removals[0].Removed || !dry.Enough {
		t.Fatalf("dry run: %+v", dry)
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("dry run removed %s: %v", old, err)
	}
	res := Prune([]string{root}, blocks, spec)
	if len(res.Removals) != 1 || !res.Removals[0].Removed || res.Removals[0].Local != old || !res.Enough {
		t.Fatalf("prune: %+v", res)
	}
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Fatalf("%s still there after prune: %v", old, err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "outside the root" {
		t.Fatalf("prune touched %s through a link: %q %v", secret, b, err)
	}
	gained := res.FreeAfter[root] - res.FreeBefore[root]
	if gained < 12<<20 || res.FreeAfter[root] < spec.Free {
		t.Fatalf("free space grew by %d bytes (want >= %d), now %d (want >= %d)", gained, 12<<20, res.FreeAfter[root], spec.Free)
	}
	// Ask for more than all unprotected blocks hold: b goes too, c never,
	// and the result says it was not enough.
	res = Prune([]string{root}, blocks, PruneSpec{LRU: true, Free: 1 << 40, Protected: []string{"c"}})
	if len(res.Removals) != 1 || res.Removals[0].Local != used || res.Enough {
		t.Fatalf("prune beyond reach: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(live, "fa")); err != nil {
		t.Fatalf("running lane's block removed: %v", err)
	}
	// By lane: a running lane's block is kept, and said so.
	res = Prune([]string{root}, blocks, PruneSpec{Lanes: []string{"c"}, Protected: []string{"c"}})
	if len(res.Removals) != 0 || len(res.Kept) != 1 || !strings.Contains(res.Kept[0], "c is running") {
		t.Fatalf("prune of a running lane: %+v", res)
	}
}

// TestPruneRefusesEscapingBlock: a block whose dst is reached through a
// symlink leaving the root is listed with an error and never removed.
func TestPruneRefusesEscapingBlock(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	elsewhere := filepath.Join(base, "elsewhere")
	writeBlock(t, filepath.Join(elsewhere, "blk"), "sparse-rows", 1, time.Now())
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, "link", "blk")
	blocks := []Block{{Lanes: []string{"x"}, ID: "rows", Kind: "sparse-rows", Dst: dst, Local: dst}}
	res := Prune([]string{root}, blocks, PruneSpec{Lanes: []string{"x"}})
	if len(res.Removals) != 0 {
		t.Fatalf("removed through an escaping link: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "blk", "fa")); err != nil {
		t.Fatalf("file outside the root removed: %v", err)
	}
	scan := Scan([]string{root}, blocks)
	if u := scan[0].Blocks[0]; u.Error == "" || !strings.Contains(u.Error, "link") {
		t.Fatalf("escaping block listed without its error: %+v", u)
	}
}
