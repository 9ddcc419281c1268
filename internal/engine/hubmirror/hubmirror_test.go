package hubmirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

type fixture struct {
	root, hub, dst string
	repo           *hubRepo
	blobs          map[string][]byte // snapshot path -> content
}

func (f *fixture) spec() Spec {
	return Spec{Src: f.hub, Dst: f.dst, Repos: []string{"org/model"}, Roots: []string{f.root}}
}

func (f *fixture) mirrorRepo() string { return filepath.Join(f.dst, "hub", "models--org--model") }

// newFixture builds a hub with linked blobs (flat or through a hub-level
// store), a nested entry, a real file inside the snapshot and refs/main.
func newFixture(t *testing.T, store bool) *fixture {
	root := t.TempDir()
	f := &fixture{root: root, hub: filepath.Join(root, "nas", "hub"), dst: filepath.Join(root, "node", "hf-local"), blobs: map[string][]byte{}}
	f.repo = newRepo(t, f.hub, "org/model")
	for i, p := range []string{"config.json", "model-00001.safetensors", "model-00002.safetensors", "sub/dir/tokenizer.json"} {
		b := testData(uint64(i+1), 10_000+i*70_000)
		sum := f.repo.blob(b, store)
		f.repo.link(rev1, p, sum)
		f.blobs[p] = b
	}
	real := testData(99, 5000)
	f.repo.file(rev1, "README.md", real)
	f.blobs["README.md"] = real
	f.repo.ref("main", rev1)
	return f
}

func (f *fixture) checkMirror(t *testing.T) {
	t.Helper()
	snap := filepath.Join(f.mirrorRepo(), "snapshots", rev1)
	for p, b := range f.blobs {
		fileEquals(t, filepath.Join(snap, p), b)
	}
	fileEquals(t, filepath.Join(f.mirrorRepo(), "refs", "main"), []byte(rev1))
	links, escapes, dangling := mirrorAudit(t, filepath.Join(f.dst, "hub"))
	if escapes != 0 || dangling != 0 {
		t.Fatalf("mirror links: %d escape the mirror, %d dangle (of %d)", escapes, dangling, links)
	}
	if links != 4 {
		t.Fatalf("mirror has %d links, want 4 (one per linked snapshot entry)", links)
	}
	if fi, err := os.Lstat(filepath.Join(snap, "README.md")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("real snapshot file README.md not staged as a regular file: %v", err)
	}
	if tgt, _ := os.Readlink(filepath.Join(snap, "config.json")); tgt != "../../blobs/"+shaHex(f.blobs["config.json"]) {
		t.Fatalf("config.json links to %q, want ../../blobs/SHA", tgt)
	}
}

// Rules 1, 2, 4: every layout mirrors into links that resolve inside the
// mirror, also when src is reached through a symlink.
func TestStageLayouts(t *testing.T) {
	for _, tc := range []struct {
		name              string
		store, alias, abs bool
	}{
		{"flat", false, false, false},
		{"hub-level-store", true, false, false},
		{"src-through-symlink", true, true, false},
		{"flat-through-symlink", false, true, false},
		// Entries link to the realpath while src is spelled through an alias:
		// the blobs must still be staged once, as blobs.
		{"absolute-links-through-symlink", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.store)
			sp := f.spec()
			if tc.alias {
				alias := filepath.Join(f.root, "mnt-nas")
				must(t, os.Symlink(filepath.Join(f.root, "nas"), alias))
				sp.Src = filepath.Join(alias, "hub")
			}
			if tc.abs {
				for p, b := range f.blobs {
					entry := filepath.Join(f.repo.dir, "snapshots", rev1, p)
					if fi, err := os.Lstat(entry); err == nil && fi.Mode()&os.ModeSymlink != 0 {
						must(t, os.Remove(entry))
						must(t, os.Symlink(filepath.Join(f.repo.dir, "blobs", shaHex(b)), entry))
					}
				}
			}
			res, err := Stage(context.Background(), sp, staging.Options{Parallel: 3})
			must(t, err)
			f.checkMirror(t)
			// 4 blobs + README + refs/main; no blob duplicated as a real file.
			if res.CopiedFiles != 6 || res.TotalFiles != 6 || res.Links != 4 {
				t.Fatalf("result %+v: want 6 files copied, 4 links", res)
			}
			blobs, _ := os.ReadDir(filepath.Join(f.mirrorRepo(), "blobs"))
			if len(blobs) != 4 {
				t.Fatalf("mirror has %d blobs, want 4", len(blobs))
			}
			led, err := ledger.Load(filepath.Join(f.dst, "hub", LedgerName), Kind)
			must(t, err)
			if len(led.Entries) != 6 {
				t.Fatalf("ledger has %d entries, want 6", len(led.Entries))
			}
			for k, e := range led.Entries {
				if !tc.abs && (strings.HasPrefix(e.Source, "/") || strings.HasPrefix(e.Source, "..")) {
					t.Fatalf("ledger entry %s: source %q not relative to src", k, e.Source)
				}
			}
			// Rule 4: a re-run over the tree copies nothing, fails on nothing.
			before := treeState(t, filepath.Join(f.mirrorRepo(), "snapshots"))
			res2, err := Stage(context.Background(), sp, staging.Options{})
			must(t, err)
			if res2.CopiedFiles != 0 || res2.CopiedBytes != 0 || res2.VerifiedFiles != 6 {
				t.Fatalf("second pass %+v: want 0 copied, 6 verified", res2)
			}
			if !sameState(before, treeState(t, filepath.Join(f.mirrorRepo(), "snapshots"))) {
				t.Fatal("second pass changed the snapshot tree")
			}
			f.checkMirror(t)
		})
	}
}

// Rule 3: skipped entries (real subtree and links) never touch dst, and a
// blob only a skipped entry uses, or none, is not staged.
func TestSkipNeverTouchesDst(t *testing.T) {
	f := newFixture(t, false)
	f.repo.file(rev1, "page15/pack/a.bin", testData(200, 40_000))
	f.repo.file(rev1, "page15/b.bin", testData(201, 30_000))
	only := f.repo.blob(testData(202, 50_000), false)
	f.repo.link(rev1, "page15/linked.safetensors", only)
	unused := f.repo.blob(testData(203, 20_000), false)
	sp := f.spec()
	sp.Skip = []string{"page15/**"}
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.SkippedFiles != 3 || res.SkippedBytes != 120_000 {
		t.Fatalf("result %+v: want 3 skipped files, 120000 bytes", res)
	}
	if _, err := os.Lstat(filepath.Join(f.mirrorRepo(), "snapshots", rev1, "page15")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("skipped subtree page15 reached dst: %v", err)
	}
	for _, sum := range []string{only, unused} {
		if _, err := os.Lstat(filepath.Join(f.mirrorRepo(), "blobs", sum)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("blob %s not referenced by a kept entry was staged", sum)
		}
	}
	f.checkMirror(t)
}

// Rule 5: the second pass reads O(samples); a same-size mutation of one
// staged blob, or of a source blob, re-copies just that blob.
func TestLedgerSecondPassAndMutation(t *testing.T) {
	f := newFixture(t, false)
	big := testData(300, 16<<20)
	bigSum := f.repo.blob(big, false)
	f.repo.link(rev1, "big.safetensors", bigSum)
	sp := f.spec()
	first, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)

	var sampled int64
	for _, b := range f.blobs {
		sampled += ledger.SampledBytes(int64(len(b)))
	}
	sampled += ledger.SampledBytes(int64(len(big))) + int64(len(rev1))
	bound := 2*sampled + 256<<10 // staged + source samples, plus the ledger
	if bound >= first.TotalBytes {
		t.Fatalf("test tree too small to tell O(samples) from O(bytes): bound %d >= %d", bound, first.TotalBytes)
	}
	ledPath := filepath.Join(f.dst, "hub", LedgerName)
	ledBefore, err := os.Stat(ledPath)
	must(t, err)
	r0 := readChars(t)
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	read := readChars(t) - r0
	if ledAfter, err := os.Stat(ledPath); err != nil || !os.SameFile(ledBefore, ledAfter) || !ledAfter.ModTime().Equal(ledBefore.ModTime()) {
		t.Fatalf("a pass that only verified rewrote the ledger %s", ledPath)
	}
	if res.CopiedBytes != 0 || res.VerifiedFiles != res.TotalFiles {
		t.Fatalf("second pass %+v: want nothing copied, all verified", res)
	}
	if read > bound {
		t.Fatalf("second pass read %d bytes; O(samples) allows %d (tree %d bytes)", read, bound, first.TotalBytes)
	}
	t.Logf("second pass read %d of %d bytes", read, first.TotalBytes)

	// Same-size mutation of a staged blob, inside a sampled region.
	staged := filepath.Join(f.mirrorRepo(), "blobs", bigSum)
	mut, err := os.OpenFile(staged, os.O_WRONLY, 0)
	must(t, err)
	_, err = mut.WriteAt([]byte("XXXXXXXX"), 100)
	must(t, err)
	must(t, mut.Close())
	res, err = Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 1 || res.CopiedBytes != int64(len(big)) {
		t.Fatalf("after mutating %s: %+v, want exactly it re-copied", staged, res)
	}
	fileEquals(t, staged, big)

	// Same-size change of a source file (stale NFS attrs cannot hide it).
	readme := filepath.Join(f.repo.dir, "snapshots", rev1, "README.md")
	changed := testData(301, len(f.blobs["README.md"]))
	must(t, os.WriteFile(readme, changed, 0o644))
	res, err = Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 1 || res.CopiedBytes != int64(len(changed)) {
		t.Fatalf("after changing source %s: %+v, want exactly it re-copied", readme, res)
	}
	fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, "README.md"), changed)

	// ... but a blob's bytes are its name: a blob changed on the NAS is a
	// corrupt NAS copy, refused, and the node's copy is kept.
	cfg := filepath.Join(f.repo.dir, "blobs", shaHex(f.blobs["config.json"]))
	must(t, os.WriteFile(cfg, testData(302, len(f.blobs["config.json"])), 0o644))
	_, err = Stage(context.Background(), sp, staging.Options{})
	wantType(t, err, fault.ContentMismatch, cfg, shaHex(f.blobs["config.json"]))
	fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, "config.json"), f.blobs["config.json"])
}

// Rule 6: equal-size different blobs stay distinct.
func TestEqualSizeBlobsStayDistinct(t *testing.T) {
	f := newFixture(t, true)
	var sums []string
	for i := 0; i < 4; i++ {
		b := testData(uint64(400+i), 65_536)
		sums = append(sums, f.repo.blob(b, i%2 == 0))
		p := "shard-" + string(rune('a'+i)) + ".safetensors"
		f.repo.link(rev1, p, sums[i])
		f.blobs[p] = b
	}
	_, err := Stage(context.Background(), f.spec(), staging.Options{Parallel: 4})
	must(t, err)
	f.checkMirror2(t, 8)
	seen := map[uint64]bool{}
	for _, s := range sums {
		fi, err := os.Stat(filepath.Join(f.mirrorRepo(), "blobs", s))
		must(t, err)
		ino := inode(fi)
		if seen[ino] {
			t.Fatalf("blob %s shares an inode with another equal-size blob", s)
		}
		seen[ino] = true
	}
}

func (f *fixture) checkMirror2(t *testing.T, wantLinks int) {
	t.Helper()
	for p, b := range f.blobs {
		fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, p), b)
	}
	links, escapes, dangling := mirrorAudit(t, filepath.Join(f.dst, "hub"))
	if links != wantLinks || escapes != 0 || dangling != 0 {
		t.Fatalf("mirror: %d links (want %d), %d escape, %d dangle", links, wantLinks, escapes, dangling)
	}
}

// Rule 7: a dangling source link aborts naming entry and target; nothing
// is written.
func TestDanglingLink(t *testing.T) {
	f := newFixture(t, true)
	gone := shaHex([]byte("never stored"))
	f.repo.link(rev1, "model-00003.safetensors", gone)
	_, err := Stage(context.Background(), f.spec(), staging.Options{})
	wantType(t, err, fault.DanglingLink, "model-00003.safetensors", gone)
	if _, err := os.Lstat(f.dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dangling source left something in dst %s: %v", f.dst, err)
	}
	// Through the hub-level store: the repo blob exists, its store target not.
	g := newFixture(t, true)
	sum := shaHex(g.blobs["config.json"])
	must(t, os.Remove(filepath.Join(g.hub, "blobs", sum[:2], sum)))
	_, err = Stage(context.Background(), g.spec(), staging.Options{})
	wantType(t, err, fault.DanglingLink, "config.json", filepath.Join(g.hub, "blobs", sum[:2], sum))
	if _, err := os.Lstat(g.dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dangling source left something in dst %s", g.dst)
	}
}

// Rule 8: a hand-made mirror is adopted without copying.
func TestAdoptHandMadeMirror(t *testing.T) {
	f := newFixture(t, false)
	// cp -a of the repo (flat layout: blobs are real files, links relative).
	dstRepo := f.mirrorRepo()
	err := filepath.WalkDir(f.repo.dir, func(p string, d os.DirEntry, err error) error {
		must(t, err)
		rel, _ := filepath.Rel(f.repo.dir, p)
		out := filepath.Join(dstRepo, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		case d.Type()&os.ModeSymlink != 0:
			tgt, _ := os.Readlink(p)
			return os.Symlink(tgt, out)
		default:
			b, _ := os.ReadFile(p)
			return os.WriteFile(out, b, 0o644)
		}
	})
	must(t, err)
	res, err := Stage(context.Background(), f.spec(), staging.Options{})
	must(t, err)
	if res.AdoptedFiles != 6 || res.CopiedFiles != 0 {
		t.Fatalf("adoption %+v: want 6 adopted, 0 copied", res)
	}
	f.checkMirror(t)
	led, err := ledger.Load(filepath.Join(f.dst, "hub", LedgerName), Kind)
	must(t, err)
	if len(led.Entries) != 6 {
		t.Fatalf("ledger after adoption has %d entries, want 6", len(led.Entries))
	}
}

// Rule 9: min_free preflight before any write; dry run writes nothing.
func TestMinFreeAndDryRun(t *testing.T) {
	f := newFixture(t, false)
	sp := f.spec()
	sp.MinFree = 1 << 60
	_, err := Stage(context.Background(), sp, staging.Options{})
	wantType(t, err, fault.NoSpace, "need", "have", f.dst)
	if _, err := os.Lstat(f.dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("min_free failure wrote to dst")
	}

	sp.MinFree = 0
	before := treeState(t, f.root)
	res, err := Stage(context.Background(), sp, staging.Options{DryRun: true})
	must(t, err)
	if !res.DryRun || res.CopiedFiles != 6 || res.Links != 4 || res.CopiedBytes != res.TotalBytes {
		t.Fatalf("dry run plan %+v: want 6 files to copy, 4 links", res)
	}
	if !sameState(before, treeState(t, f.root)) {
		t.Fatal("dry run changed the tree")
	}
	// After a real stage, a dry run plans nothing to copy.
	_, err = Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	before = treeState(t, f.root)
	res, err = Stage(context.Background(), sp, staging.Options{DryRun: true})
	must(t, err)
	if res.CopiedFiles != 0 || res.VerifiedFiles != 6 {
		t.Fatalf("dry run over a staged tree %+v: want 6 verified", res)
	}
	if !sameState(before, treeState(t, f.root)) {
		t.Fatal("dry run over a staged tree changed it")
	}
}

// Rule 10: verify = "sha256" checks content against the LFS name while
// copying; Verify(full) finds corruption.
func TestSHA256(t *testing.T) {
	f := newFixture(t, true)
	sp := f.spec()
	sp.Verify = "sha256"
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 6 {
		t.Fatalf("%+v", res)
	}
	led, err := ledger.Load(filepath.Join(f.dst, "hub", LedgerName), Kind)
	must(t, err)
	for _, p := range []string{"config.json", "model-00001.safetensors"} {
		sum := shaHex(f.blobs[p])
		if e := led.Entries[filepath.Join("models--org--model", "blobs", sum)]; e.SHA256 != sum {
			t.Fatalf("ledger sha256 of %s = %q, want %s", p, e.SHA256, sum)
		}
	}
	v, err := Verify(context.Background(), sp, true)
	must(t, err)
	if !v.Clean() || v.OK != 10 {
		t.Fatalf("full verify of a good mirror: %+v", v)
	}
	// Corrupt one staged byte: both verifies see it, and never write.
	sum := shaHex(f.blobs["model-00002.safetensors"])
	staged := filepath.Join(f.mirrorRepo(), "blobs", sum)
	b, _ := os.ReadFile(staged)
	b[len(b)/2] ^= 0xff
	must(t, os.WriteFile(staged, b, 0o644))
	before := treeState(t, f.root)
	for _, full := range []bool{false, true} {
		v, err = Verify(context.Background(), sp, full)
		must(t, err)
		if len(v.Bad) != 1 || v.Bad[0] != staged || len(v.Missing) != 0 {
			t.Fatalf("verify(full=%v) %+v: want exactly %s bad", full, v, staged)
		}
	}
	if !sameState(before, treeState(t, f.root)) {
		t.Fatal("Verify wrote")
	}
	must(t, os.Remove(staged))
	v, err = Verify(context.Background(), sp, false)
	must(t, err)
	if len(v.Missing) != 1 || v.Missing[0] != staged {
		t.Fatalf("verify after removing %s: %+v", staged, v)
	}

	// A source blob whose content does not match its name: ContentMismatch,
	// nothing partial left (small files copied from memory, large ones in
	// chunks).
	for _, size := range []int{70_000, 3<<20 + 17} {
		g := newFixture(t, false)
		good := testData(510, size)
		sum := g.repo.blob(good, false)
		g.repo.link(rev1, "weights.bin", sum)
		src := filepath.Join(g.repo.dir, "blobs", sum)
		must(t, os.WriteFile(src, testData(511, size), 0o644))
		gs := g.spec()
		gs.Verify = "sha256"
		_, err = Stage(context.Background(), gs, staging.Options{Parallel: 1})
		wantType(t, err, fault.ContentMismatch, src, sum)
		if _, err := os.Lstat(filepath.Join(g.mirrorRepo(), "blobs", sum)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("mismatched blob of %d bytes was staged", size)
		}
		if left := tmpLeft(t, g.dst); len(left) != 0 {
			t.Fatalf("temp files left: %v", left)
		}
	}
}

// Rule 11: exports are regular-file trees of hard links; skipped entries
// become empty placeholders listed in the bind manifest.
func TestExports(t *testing.T) {
	f := newFixture(t, true)
	f.repo.file(rev1, "page15/pack/a.bin", testData(600, 4000))
	only := f.repo.blob(testData(601, 5000), true)
	f.repo.link(rev1, "page15/linked.bin", only)
	sp := f.spec()
	sp.Skip = []string{"page15/**"}
	exp := filepath.Join(f.root, "node", "exports", "model")
	sp.Exports = []Export{{Repo: "org/model", Path: exp}}
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if len(res.Exports) != 1 || res.Exports[0] != exp {
		t.Fatalf("result exports %v", res.Exports)
	}
	for p, b := range f.blobs {
		target := filepath.Join(exp, p)
		fi, err := os.Lstat(target)
		must(t, err)
		if !fi.Mode().IsRegular() {
			t.Fatalf("export entry %s is not a regular file (%s)", target, fi.Mode())
		}
		mi, err := os.Stat(filepath.Join(f.mirrorRepo(), "snapshots", rev1, p))
		must(t, err)
		if !os.SameFile(fi, mi) {
			t.Fatalf("export entry %s is not a hard link to the mirror file", target)
		}
		fileEquals(t, target, b)
	}
	for _, p := range []string{"page15/pack/a.bin", "page15/linked.bin"} {
		fi, err := os.Lstat(filepath.Join(exp, p))
		must(t, err)
		if !fi.Mode().IsRegular() || fi.Size() != 0 {
			t.Fatalf("placeholder %s: mode %s size %d, want empty regular file", p, fi.Mode(), fi.Size())
		}
	}
	binds, err := ReadBindManifest(exp)
	must(t, err)
	want := map[string]string{
		"page15/pack/a.bin": filepath.Join(f.repo.dir, "snapshots", rev1, "page15/pack/a.bin"),
		"page15/linked.bin": filepath.Join(f.hub, "blobs", only[:2], only),
	}
	if len(binds) != len(want) {
		t.Fatalf("binds %+v, want %v", binds, want)
	}
	for _, b := range binds {
		if want[b.Target] != b.Source || !b.ReadOnly {
			t.Fatalf("bind %+v: want source %s, read-only", b, want[b.Target])
		}
	}
	// Re-run: nothing changes, verify is clean (exports included).
	before := treeState(t, exp)
	_, err = Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if !sameState(before, treeState(t, exp)) {
		t.Fatal("second pass rewrote the export")
	}
	v, err := Verify(context.Background(), sp, false)
	must(t, err)
	if !v.Clean() {
		t.Fatalf("verify with exports: %+v", v)
	}
	if _, err := ReadBindManifest(filepath.Join(f.root, "node", "exports", "none")); err == nil {
		t.Fatal("ReadBindManifest of an unstaged export did not fail")
	}
}

// Rule 12: cancel mid-file, resume from the last progress. In the boot
// that wrote the temp file nothing is copied again, whatever the heartbeat
// says: all it holds was written, and the kernel has it. After a reboot
// (another boot id on the temp file stands in for one) at most two flush
// intervals are (the flush trails the copy by one, so a temp file is
// trusted up to the interval before its last two; a heartbeat's offset is
// durable and costs one). A corrupted resumed prefix is not trusted.
// Issue 13.6: a new run with no heartbeat details at all (a fresh Stage
// after a cancel) resumes from the temp file too.
func TestResumeAfterCancel(t *testing.T) {
	t.Cleanup(SetChunkSize(64 << 10))
	t.Cleanup(SetFlushChunks(2))
	flush := flushSize()
	for _, mode := range []string{"heartbeat", "corrupt", "stale-heartbeat", "fresh-run", "reboot", "reboot-heartbeat"} {
		corrupt := mode == "corrupt"
		reboot := strings.HasPrefix(mode, "reboot")
		f := newFixture(t, false)
		big := testData(700, 2<<20+12345)
		sum := f.repo.blob(big, false)
		f.repo.link(rev1, "big.bin", sum)
		sp := f.spec()
		ctx, cancel := context.WithCancel(context.Background())
		var last staging.Progress
		var offsets int
		bigRel := filepath.Join("models--org--model", "blobs", sum)
		res1, err := Stage(ctx, sp, staging.Options{Parallel: 1, OnProgress: func(p staging.Progress) {
			last = p
			for _, fo := range p.InFlight {
				if fo.Path == bigRel {
					offsets++
					if fo.Offset >= 1<<20 {
						cancel()
					}
				}
			}
		}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled stage returned %v", err)
		}
		var off int64 = -1
		for _, fo := range last.InFlight {
			if fo.Path == bigRel {
				off = fo.Offset
			}
		}
		if off < 1<<20 || int64(offsets) < (1<<20)/flush {
			t.Fatalf("last progress %+v (%d offsets reported): want the big file in flight past 1 MiB, an offset at each flush", last, offsets)
		}
		tmp := tmpName(filepath.Join(f.dst, "hub", bigRel))
		if id, err := unix.Getxattr(tmp, BootXattr, make([]byte, 64)); err != nil || id == 0 {
			t.Fatalf("the cancelled copy's temp file has no %s mark: %v", BootXattr, err)
		}
		if reboot {
			must(t, unix.Setxattr(tmp, BootXattr, []byte(otherBoot), 0))
		}
		if corrupt {
			fh, err := os.OpenFile(tmp, os.O_WRONLY, 0)
			must(t, err)
			_, err = fh.WriteAt([]byte{^big[10]}, 10)
			must(t, err)
			must(t, fh.Close())
		}
		resume := &last
		switch mode {
		case "stale-heartbeat":
			// The retried attempt got an old heartbeat (they are throttled):
			// the temp file still counts.
			resume = &staging.Progress{}
		case "fresh-run", "reboot":
			// A new workflow run: no heartbeat details at all.
			resume = nil
		}
		res2, err := Stage(context.Background(), sp, staging.Options{Parallel: 1, Resume: resume})
		must(t, err)
		recopied := res1.CopiedBytes + res2.CopiedBytes - res2.TotalBytes
		if corrupt {
			if res2.CopiedBytes < int64(len(big)) {
				t.Fatalf("corrupted temp prefix was trusted: second pass copied %d of %d", res2.CopiedBytes, len(big))
			}
		} else {
			// In the same boot nothing is copied again. After a reboot,
			// from the heartbeat's durable offset one flush interval is;
			// from the temp file alone, two.
			allowed := int64(0)
			switch mode {
			case "reboot":
				allowed = 2 * flush
			case "reboot-heartbeat":
				allowed = flush
			}
			if recopied < 0 || recopied > allowed || res2.CopiedBytes >= int64(len(big)) {
				t.Fatalf("%s: resume re-copied %d bytes (pass 1 %d, pass 2 %d, total %d); allowed ≤ %d", mode, recopied, res1.CopiedBytes, res2.CopiedBytes, res2.TotalBytes, allowed)
			}
			if reboot && recopied == 0 {
				t.Fatalf("%s: a temp file written before the reboot was trusted whole (nothing re-copied)", mode)
			}
		}
		fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, "big.bin"), big)
		f.checkMirror2(t, 5)
		if left := tmpLeft(t, f.dst); len(left) != 0 {
			t.Fatalf("temp files left after resume: %v", left)
		}
	}
}

// Bad input: invalid specs, missing repo.
func TestBadInput(t *testing.T) {
	f := newFixture(t, false)
	cases := map[string]func(*Spec){
		"dst outside roots": func(s *Spec) { s.Dst = "/var/elsewhere" },
		"src == dst":        func(s *Spec) { s.Dst = s.Src },
		"dst inside src":    func(s *Spec) { s.Dst = filepath.Join(s.Src, "models--org--model", "x") },
		"dst inside src through an alias": func(s *Spec) {
			alias := filepath.Join(f.root, "alias-of-nas")
			os.Symlink(filepath.Join(f.root, "nas"), alias)
			s.Dst = filepath.Join(alias, "hub", "local")
		},
		"src inside the mirror": func(s *Spec) { s.Src = filepath.Join(s.Dst, "hub") },
		"bad verify":            func(s *Spec) { s.Verify = "md5" },
		"export outside roots":  func(s *Spec) { s.Exports = []Export{{Repo: "org/model", Path: "/var/x"}} },
		"export of unknown repo": func(s *Spec) {
			s.Exports = []Export{{Repo: "org/other", Path: filepath.Join(f.root, "e")}}
		},
		"no roots": func(s *Spec) { s.Roots = nil },
	}
	for name, mut := range cases {
		sp := f.spec()
		mut(&sp)
		_, err := Stage(context.Background(), sp, staging.Options{})
		if tp, _ := fault.TypeOf(err); tp != fault.InvalidSpec {
			t.Fatalf("%s: want InvalidSpec, got %v", name, err)
		}
		if _, err := os.Lstat(f.dst); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: wrote to dst", name)
		}
	}
	sp := f.spec()
	sp.Repos = []string{"org/model", "org/absent"}
	_, err := Stage(context.Background(), sp, staging.Options{})
	wantType(t, err, fault.SourceMissing, "org/absent", filepath.Join(f.hub, "models--org--absent"))
	if _, err := os.Lstat(f.dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("missing repo: wrote to dst")
	}
}

// Rule 10 with adoption: a same-size corruption outside every sampled
// region is invisible to sampling but caught by sha256 (adoption under
// verify = "sha256", and Verify full).
func TestSHA256CatchesUnsampledCorruption(t *testing.T) {
	f := newFixture(t, false)
	big := testData(900, 4<<20)
	sum := f.repo.blob(big, false)
	f.repo.link(rev1, "big.bin", sum)
	sp := f.spec()
	_, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	staged := filepath.Join(f.mirrorRepo(), "blobs", sum)
	off := int64(ledger.HeadBytes + 5) // before the first spread window
	fh, err := os.OpenFile(staged, os.O_WRONLY, 0)
	must(t, err)
	_, err = fh.WriteAt([]byte{^big[off]}, off)
	must(t, err)
	must(t, fh.Close())

	v, err := Verify(context.Background(), sp, false)
	must(t, err)
	if !v.Clean() {
		t.Fatalf("sampled verify saw an unsampled byte (%+v): the test no longer exercises full hashing", v)
	}
	v, err = Verify(context.Background(), sp, true)
	must(t, err)
	if len(v.Bad) != 1 || v.Bad[0] != staged {
		t.Fatalf("full verify %+v: want %s bad", v, staged)
	}
	// Without the ledger, a sha256 pass adopts the good files and re-copies
	// the corrupt one.
	must(t, os.Remove(filepath.Join(f.dst, "hub", LedgerName)))
	sp.Verify = "sha256"
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 1 || res.AdoptedFiles != res.TotalFiles-1 {
		t.Fatalf("sha256 adoption %+v: want the corrupt blob re-copied, the rest adopted", res)
	}
	fileEquals(t, staged, big)
}

// A temp file a cancelled copy left beside a file that is now verified is
// removed by the next pass (found by listing its directory once, not by an
// unlink attempt per file), and a pass with none removes nothing.
func TestVerifiedPassRemovesLeftTempFiles(t *testing.T) {
	f := newFixture(t, false)
	sp := f.spec()
	_, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	blobs := filepath.Join(f.mirrorRepo(), "blobs")
	names, err := os.ReadDir(blobs)
	must(t, err)
	if len(names) == 0 {
		t.Fatalf("no blobs staged in %s", blobs)
	}
	left := filepath.Join(blobs, tmpBase(names[0].Name()))
	must(t, os.WriteFile(left, []byte("half a copy"), 0o600))
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.VerifiedFiles != res.TotalFiles || res.CopiedFiles != 0 {
		t.Fatalf("second pass %+v: want all verified", res)
	}
	if _, err := os.Lstat(left); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file %s left beside a verified blob survived the pass: %v", left, err)
	}
	after, err := os.ReadDir(blobs)
	must(t, err)
	if len(after) != len(names) {
		t.Fatalf("blobs dir had %d entries, now %d: the pass removed more than the temp file", len(names), len(after))
	}
}
