package disk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/testkit/loopfs"
)

// roomFixture lays out, on a real 64 MiB ext4 (root) with a second ext4
// mounted inside it, the blocks a make-room hint must tell apart: a
// running lane's block (live, 8 MiB); a block of lane shared whose files
// are hard links to live's (frees nothing); a block of lane elsewhere on
// the other filesystem (frees nothing on root's); lane old's 4 MiB block
// with an export tree of hard links into it (frees its 4 MiB); lane mid's
// 3 MiB block, served an hour ago. shared and elsewhere are the oldest by
// verification, so a choice by listed bytes would take them first. dst
// is where a new lane would stage, free what root's filesystem has free.
func roomFixture(t *testing.T) (root, dst string, free int64, blocks []Block) {
	t.Helper()
	mnt := loopfs.Mount(t, 64)
	root = filepath.Join(mnt, "nvme")
	other := filepath.Join(root, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	loopfs.MountAt(t, 16, other)
	now := time.Now().UTC().Truncate(time.Second)
	dir := func(n string) string { return filepath.Join(root, n) }
	writeBlock(t, dir("live"), "sparse-rows", 8, now.Add(-24*time.Hour))
	writeBlock(t, dir("old"), "sparse-rows", 4, now.Add(-48*time.Hour))
	writeBlock(t, dir("mid"), "sparse-rows", 3, now.Add(-48*time.Hour))
	writeBlock(t, filepath.Join(other, "blk"), "sparse-rows", 6, now.Add(-96*time.Hour))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(dir("shared"), 0o755))
	must(os.MkdirAll(dir("old-export"), 0o755))
	for _, f := range []string{"fa", "fb", "fc", "fd"} {
		must(os.Link(filepath.Join(dir("live"), f), filepath.Join(dir("shared"), f)))
		must(os.Link(filepath.Join(dir("old"), f), filepath.Join(dir("old-export"), f)))
	}
	must(RecordServed([]string{root}, []string{dir("mid")}, now.Add(-time.Hour)))
	blocks = []Block{
		{Lanes: []string{"live"}, ID: "rows", Kind: "sparse-rows", Dst: dir("live"), Local: dir("live")},
		{Lanes: []string{"shared"}, ID: "rows", Kind: "sparse-rows", Dst: dir("shared"), Local: dir("shared")},
		{Lanes: []string{"elsewhere"}, ID: "rows", Kind: "sparse-rows", Dst: filepath.Join(other, "blk"), Local: filepath.Join(other, "blk")},
		{Lanes: []string{"old"}, ID: "rows", Kind: "sparse-rows", Dst: dir("old"), Local: dir("old"),
			Exports: []string{dir("old-export")}, LocalExports: []string{dir("old-export")}},
		{Lanes: []string{"mid"}, ID: "rows", Kind: "sparse-rows", Dst: dir("mid"), Local: dir("mid")},
	}
	free, err := staging.FreeBytes(root)
	if err != nil {
		t.Fatal(err)
	}
	return root, filepath.Join(root, "new"), free, blocks
}

// Item 3 of issue 42: the hint of a stage short of space names only lanes
// whose blocks would free enough on that filesystem. Blocks whose files
// are hard links to a running lane's, or that lie on another filesystem,
// free 0 B and are never named (nor pruned); the least recently served
// block that frees enough is; with --make-room it is removed and the
// free space grows by what the hint said.
func TestMakeRoomNamesOnlyLanesThatFreeEnough(t *testing.T) {
	root, dst, free, blocks := roomFixture(t)
	protected := []string{"new", "live"}
	need := free + 3<<20
	room, err := MakeRoom([]string{root}, blocks, dst, need, protected, true)
	if err != nil {
		t.Fatal(err)
	}
	if !room.Enough || len(room.Take) != 1 || room.Take[0].Local != filepath.Join(root, "old") || room.Take[0].Removed {
		t.Fatalf("dry run: want old's block chosen, nothing removed: %+v", room)
	}
	if room.Frees < 4<<20 {
		t.Fatalf("old's block would free %d bytes, want its 4 MiB (its export links go with it)", room.Frees)
	}
	if strings.Join(room.Nothing, ",") != "elsewhere,shared" {
		t.Fatalf("lanes whose blocks free nothing here: %v, want elsewhere and shared", room.Nothing)
	}
	hint := room.Hint("n1")
	t.Logf("hint: %s", hint)
	for _, want := range []string{"lanes old would free enough", "starter disk prune --lane old --node n1", "--make-room", dst} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint does not say %q: %s", want, hint)
		}
	}
	for _, never := range []string{"shared", "elsewhere", "live", "mid"} {
		if strings.Contains(hint, never) {
			t.Errorf("hint names lane %s, whose blocks are not needed or free nothing: %s", never, hint)
		}
	}
	// `disk prune --lru` chooses the same way: shared and elsewhere, the
	// oldest by verification, are kept, saying why.
	pr := Prune([]string{root}, blocks, PruneSpec{LRU: true, Free: need, Protected: protected, DryRun: true})
	if len(pr.Removals) != 1 || pr.Removals[0].Local != filepath.Join(root, "old") || !pr.Enough {
		t.Fatalf("prune --lru: want old's block only: %+v", pr)
	}
	if k := strings.Join(pr.Kept, "\n"); !strings.Contains(k, "shared): kept, removing it would free nothing") || !strings.Contains(k, "elsewhere): kept, removing it would free nothing") {
		t.Errorf("prune --lru does not say why shared and elsewhere are kept:\n%s", k)
	}
	room, err = MakeRoom([]string{root}, blocks, dst, need, protected, false)
	if err != nil {
		t.Fatal(err)
	}
	if !room.Enough || len(room.Take) != 1 || !room.Take[0].Removed {
		t.Fatalf("make room: %+v", room)
	}
	after, err := staging.FreeBytes(root)
	if err != nil {
		t.Fatal(err)
	}
	if after < need {
		t.Fatalf("after making room %d bytes free, want at least %d", after, need)
	}
	for _, keep := range []string{"live/fa", "shared/fa", "mid/fa", "other/blk/fa"} {
		if _, err := os.Stat(filepath.Join(root, keep)); err != nil {
			t.Errorf("making room removed %s: %v", keep, err)
		}
	}
}

// When no lane's blocks would free enough the hint says so plainly, with
// what they would free and what to do instead, and names no prune; when
// none would free anything at all it says that.
func TestMakeRoomSaysWhenNoneWouldFreeEnough(t *testing.T) {
	root, dst, free, blocks := roomFixture(t)
	room, err := MakeRoom([]string{root}, blocks, dst, free+100<<20, []string{"new", "live"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if room.Enough || len(room.Take) != 0 || room.All < 7<<20 || room.All > 8<<20 {
		t.Fatalf("beyond reach: want nothing taken and old+mid's 7 MiB as all that could be freed: %+v", room)
	}
	hint := room.Hint("n1")
	t.Logf("hint: %s", hint)
	for _, want := range []string{"no lane's blocks would free enough", "would free only 7.", "lanes elsewhere, shared would free 0 B", "starter disk --node n1", "lower min_free"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint does not say %q: %s", want, hint)
		}
	}
	if strings.Contains(hint, "prune --lane") || strings.Contains(hint, "--make-room") {
		t.Errorf("hint suggests a prune that would not free enough: %s", hint)
	}
	if _, err := os.Stat(filepath.Join(root, "old", "fa")); err != nil {
		t.Fatalf("a make-room that could not free enough removed a block: %v", err)
	}
	room, err = MakeRoom([]string{root}, blocks, dst, free+1<<20, []string{"new", "live", "old", "mid"}, true)
	if err != nil {
		t.Fatal(err)
	}
	hint = room.Hint("n1")
	t.Logf("hint: %s", hint)
	if room.Enough || room.All != 0 || !strings.Contains(hint, "no lane's blocks would free any space") {
		t.Fatalf("none frees anything: %+v\n%s", room, hint)
	}
}
