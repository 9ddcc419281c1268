package hubmirror

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// sealing lets this test's passes make seals: the clock they look at files
// with reads an hour ahead, so every file counts as changed long enough ago
// (TestMain's default makes none). The margin itself is tested on its own.
func sealing(t *testing.T) {
	old := sealClock
	sealClock = func() time.Time { return time.Now().Add(time.Hour) }
	t.Cleanup(func() { sealClock = old })
}

func gitSHA1(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

func loadLedger(t *testing.T, f *fixture) *ledger.Ledger {
	t.Helper()
	led, err := ledger.Load(filepath.Join(f.dst, "hub", LedgerName), Kind)
	must(t, err)
	return led
}

// A blob proved whole against its content-addressed name is sealed; a pass
// over sealed blobs reads none of their bytes; a same-size change hidden
// behind a restored mtime still breaks the seal (ctime moves) and is
// re-copied; --stage=force reads everything whatever the seals say.
func TestSealedPassReadsNoContent(t *testing.T) {
	sealing(t)
	f := newFixture(t, false)
	// A non-LFS file: the hub names it by its git blob sha1.
	vocab := testData(40, 30_000)
	must(t, os.WriteFile(filepath.Join(f.repo.dir, "blobs", gitSHA1(vocab)), vocab, 0o644))
	f.repo.link(rev1, "vocab.txt", gitSHA1(vocab))
	// A blob whose bytes are not what its git blob sha1 name says: never
	// sealed. (Only sha256 names are refused when they lie: they are
	// what LFS names its blobs by, TestCorruptNASBlobIsNeverMirrored.)
	liar := testData(41, 20_000)
	liarName := gitSHA1(testData(42, 20_000))
	must(t, os.WriteFile(filepath.Join(f.repo.dir, "blobs", liarName), liar, 0o644))
	f.repo.link(rev1, "liar.bin", liarName)
	sp := f.spec()

	first, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if first.CopiedFiles != first.TotalFiles {
		t.Fatalf("first pass %+v: want every file copied", first)
	}
	blob := func(name string) string { return filepath.Join("models--org--model", "blobs", name) }
	sealedRels := map[string]int64{blob(gitSHA1(vocab)): int64(len(vocab))}
	for p, b := range f.blobs {
		if p != "README.md" {
			sealedRels[blob(shaHex(b))] = int64(len(b))
		}
	}
	sealedBytes, unsealedBytes := checkSealedLedger(t, f, first, sealedRels)

	ledPath := filepath.Join(f.dst, "hub", LedgerName)
	ledBefore, err := os.Stat(ledPath)
	must(t, err)
	// Unsealed files are read whole on both sides (they are small); the
	// ledger is read once. Sealed blobs add nothing.
	bound := ledBefore.Size() + 2*unsealedBytes + 4<<10
	if bound >= sealedBytes {
		t.Fatalf("test tree cannot tell: bound %d >= sealed bytes %d", bound, sealedBytes)
	}
	r0 := readChars(t)
	res, err := Stage(context.Background(), sp, staging.Options{})
	read := readChars(t) - r0
	must(t, err)
	if res.CopiedFiles != 0 || res.VerifiedFiles != res.TotalFiles {
		t.Fatalf("sealed pass %+v: want nothing copied, all verified", res)
	}
	if read > bound {
		t.Fatalf("sealed pass read %d bytes; the ledger and the unsealed files allow %d (sealed blobs: %d bytes)", read, bound, sealedBytes)
	}
	if after, err := os.Stat(ledPath); err != nil || !os.SameFile(ledBefore, after) || !after.ModTime().Equal(ledBefore.ModTime()) {
		t.Fatalf("a pass that only verified rewrote the ledger %s", ledPath)
	}
	t.Logf("sealed pass read %d bytes (ledger %d, unsealed files %d, sealed blobs %d)", read, ledBefore.Size(), unsealedBytes, sealedBytes)

	// Same size, other bytes, mtime put back: the seal is broken by ctime.
	cfg := f.blobs["config.json"]
	staged := filepath.Join(f.mirrorRepo(), "blobs", shaHex(cfg))
	fi, err := os.Stat(staged)
	must(t, err)
	bad := append([]byte(nil), cfg...)
	bad[len(bad)/2] ^= 0xff
	must(t, os.WriteFile(staged, bad, 0o644))
	must(t, os.Chtimes(staged, fi.ModTime(), fi.ModTime()))
	res, err = Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 1 || res.CopiedBytes != int64(len(cfg)) {
		t.Fatalf("after a hidden change of %s: %+v, want exactly it re-copied", staged, res)
	}
	fileEquals(t, staged, cfg)
	if e := loadLedger(t, f).Entries[blob(shaHex(cfg))]; e.Seal == nil {
		t.Fatalf("re-copied %s was not sealed again", staged)
	}

	// A sealed link replaced by one to another blob (a new inode): the
	// seal no longer matches, the link is read and put right.
	entry := filepath.Join(f.mirrorRepo(), "snapshots", rev1, "config.json")
	want, err := os.Readlink(entry)
	must(t, err)
	must(t, os.Symlink(filepath.Join("..", "..", "blobs", liarName), entry+".swap"))
	must(t, os.Rename(entry+".swap", entry))
	_, err = Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if got, err := os.Readlink(entry); err != nil || got != want {
		t.Fatalf("replaced link %s: now %q (%v), want it put back to %q", entry, got, err, want)
	}

	// --stage=force reads content, seals or not.
	r0 = readChars(t)
	res, err = Stage(context.Background(), sp, staging.Options{Force: true})
	read = readChars(t) - r0
	must(t, err)
	if res.CopiedFiles != 0 || res.VerifiedFiles != res.TotalFiles {
		t.Fatalf("forced pass %+v: want all verified", res)
	}
	if read < 2*sealedBytes {
		t.Fatalf("forced pass read %d bytes, want both sides of the %d sealed bytes", read, sealedBytes)
	}
}

// checkSealedLedger checks the first pass's ledger: exactly the entries
// of sealedRels sealed, one entry per file, every link made sealed with
// its target. It returns the bytes of sealed and of unsealed entries.
func checkSealedLedger(t *testing.T, f *fixture, first staging.Result, sealedRels map[string]int64) (sealedBytes, unsealedBytes int64) {
	t.Helper()
	led := loadLedger(t, f)
	for rel, e := range led.Entries {
		_, want := sealedRels[rel]
		if (e.Seal != nil) != want {
			t.Errorf("ledger entry %s: sealed %v, want %v", rel, e.Seal != nil, want)
		}
		if want {
			sealedBytes += e.Size
		} else {
			unsealedBytes += e.Size
		}
	}
	if len(led.Entries) != first.TotalFiles {
		t.Fatalf("ledger has %d entries, want %d", len(led.Entries), first.TotalFiles)
	}
	if len(led.Links) != first.Links {
		t.Fatalf("ledger seals %d links, want the %d made", len(led.Links), first.Links)
	}
	for rel, ls := range led.Links {
		if got, err := os.Readlink(filepath.Join(f.dst, "hub", rel)); err != nil || got != ls.Target {
			t.Fatalf("link %s sealed with target %q, is %q (%v)", rel, ls.Target, got, err)
		}
	}
	return sealedBytes, unsealedBytes
}

// A blob whose NAS bytes change under the same content-addressed name is a
// corrupt NAS copy, not a new version: the node's copy, proved against the
// name, is kept rather than overwritten with bytes that do not match it.
func TestSealKeepsTheNamedContentWhenTheNASCopyRots(t *testing.T) {
	sealing(t)
	f := newFixture(t, false)
	sp := f.spec()
	_, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	cfg := f.blobs["config.json"]
	src := filepath.Join(f.repo.dir, "blobs", shaHex(cfg))
	rotten := testData(301, len(cfg))
	must(t, os.WriteFile(src, rotten, 0o644))
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 0 {
		t.Fatalf("after the NAS copy of %s rotted: %+v, want nothing copied", src, res)
	}
	fileEquals(t, filepath.Join(f.mirrorRepo(), "blobs", shaHex(cfg)), cfg)
}

// The margin: a file whose ctime is within sealMargin of the look is not
// sealed (a write in the same timestamp tick would not move it); an older
// one is; nothing is sealed where the filesystem is not local.
func TestSealNeedsACtimeOlderThanTheMargin(t *testing.T) {
	looked := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) unix.Stat_t {
		c := looked.Add(-d)
		return unix.Stat_t{Ino: 7, Size: 10, Ctim: unix.NsecToTimespec(c.UnixNano()), Mtim: unix.NsecToTimespec(c.UnixNano())}
	}
	st := &stager{sealable: true}
	if s := st.sealFor(at(sealMargin/2), looked); s != nil {
		t.Errorf("ctime %v before the look was sealed: %+v", sealMargin/2, s)
	}
	if s := st.sealFor(at(sealMargin), looked); s != nil {
		t.Errorf("ctime exactly the margin before the look was sealed: %+v", s)
	}
	if s := st.sealFor(at(2*sealMargin), looked); s == nil || s.Ino != 7 {
		t.Errorf("ctime %v before the look: seal %+v, want one", 2*sealMargin, s)
	}
	st.sealable = false
	if s := st.sealFor(at(time.Hour), looked); s != nil {
		t.Errorf("sealed on a filesystem that is not local: %+v", s)
	}
	for magic, want := range map[int64]bool{unix.EXT4_SUPER_MAGIC: true, unix.XFS_SUPER_MAGIC: true, unix.NFS_SUPER_MAGIC: false, unix.SMB2_SUPER_MAGIC: false, unix.FUSE_SUPER_MAGIC: false} {
		if localFS[magic] != want {
			t.Errorf("filesystem magic %#x: local %v, want %v", magic, localFS[magic], want)
		}
	}
}

// A snapshot directory is named by its commit, so the entries of a sealed
// mirror are planned from the ledger, not read on the NAS again: a link the
// NAS broke after the node staged it does not fail the node's pass (verify,
// which reads everything, reports it); an entry that appears later is read
// and copied; a planned file that must be copied again is resolved and
// checked on the NAS first, and refused when its blob is gone or links out
// of the roots.
func TestSealedEntriesArePlannedFromTheLedger(t *testing.T) {
	sealing(t)
	f := newFixture(t, false)
	sp := f.spec()
	_, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)

	// The NAS's link for config.json now dangles.
	entry := filepath.Join(f.repo.dir, "snapshots", rev1, "config.json")
	must(t, os.Remove(entry))
	must(t, os.Symlink("../../blobs/"+shaHex([]byte("gone")), entry))
	res, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 0 || res.VerifiedFiles != res.TotalFiles {
		t.Fatalf("pass over a sealed mirror after the NAS broke a link: %+v, want all verified", res)
	}
	if _, err := Verify(context.Background(), sp, false); err == nil {
		t.Fatal("verify of a NAS with a dangling link: no error")
	}

	// A file that appears in the same commit later is read and copied.
	extra := testData(50, 3000)
	f.repo.link(rev1, "generation_config.json", f.repo.blob(extra, false))
	res, err = Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 1 || res.CopiedBytes != int64(len(extra)) {
		t.Fatalf("after a new entry in the commit: %+v, want exactly it copied", res)
	}
	fileEquals(t, filepath.Join(f.mirrorRepo(), "snapshots", rev1, "generation_config.json"), extra)

	// A planned blob whose staged copy changed is copied again from the
	// NAS, which is checked first.
	tok := f.blobs["sub/dir/tokenizer.json"]
	staged := filepath.Join(f.mirrorRepo(), "blobs", shaHex(tok))
	src := filepath.Join(f.repo.dir, "blobs", shaHex(tok))
	must(t, os.WriteFile(staged, testData(51, len(tok)), 0o644))
	res, err = Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	if res.CopiedFiles != 1 || res.CopiedBytes != int64(len(tok)) {
		t.Fatalf("after changing staged %s: %+v, want exactly it re-copied", staged, res)
	}
	fileEquals(t, staged, tok)

	// ... refused when the NAS blob is now a link out of src and the roots.
	outside := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(outside, tok, 0o644))
	must(t, os.Rename(src, src+".moved"))
	must(t, os.Symlink(outside, src))
	must(t, os.WriteFile(staged, testData(52, len(tok)), 0o644))
	_, err = Stage(context.Background(), sp, staging.Options{})
	wantType(t, err, fault.LinkEscape, src)

	// ... and when it is gone.
	must(t, os.Remove(src))
	_, err = Stage(context.Background(), sp, staging.Options{})
	if err == nil || !strings.Contains(err.Error(), src) {
		t.Fatalf("staged blob changed, its NAS blob gone: %v, want an error naming %s", err, src)
	}
}

// A check the relay made earlier in the activity (Options.Checked) stands
// in for sampling only while the staged file keeps the identity it had
// then: a file changed after the check is sampled again and re-copied.
func TestCheckedByTheRelayOnlyWhileUnchanged(t *testing.T) {
	f := newFixture(t, false)
	big := testData(60, 8<<20)
	bigSum := f.repo.blob(big, false)
	f.repo.link(rev1, "big.safetensors", bigSum)
	sp := f.spec()
	_, err := Stage(context.Background(), sp, staging.Options{})
	must(t, err)
	rel := filepath.Join("models--org--model", "blobs", bigSum)
	staged := filepath.Join(f.mirrorRepo(), "blobs", bigSum)
	checked := func() map[string]staging.Checked {
		var st unix.Stat_t
		must(t, unix.Lstat(staged, &st))
		return map[string]staging.Checked{rel: {Sampled: loadLedger(t, f).Entries[rel].Sampled, Stat: st, At: time.Now()}}
	}

	c := checked()
	res, err := Stage(context.Background(), sp, staging.Options{Checked: c})
	must(t, err)
	if res.CopiedFiles != 0 || res.VerifiedFiles != res.TotalFiles {
		t.Fatalf("pass with the relay's check: %+v, want all verified", res)
	}
	if sampled := ledger.SampledBytes(int64(len(big))); res.NASRead >= sampled {
		t.Fatalf("pass with the relay's check read %d B of the NAS, want less than the big blob's samples (%d B)", res.NASRead, sampled)
	}

	c = checked()
	mut, err := os.OpenFile(staged, os.O_WRONLY, 0)
	must(t, err)
	_, err = mut.WriteAt([]byte("changed after the check"), 10)
	must(t, err)
	must(t, mut.Close())
	res, err = Stage(context.Background(), sp, staging.Options{Checked: c})
	must(t, err)
	if res.CopiedFiles != 1 || res.CopiedBytes != int64(len(big)) {
		t.Fatalf("pass with a check older than a change of %s: %+v, want it re-copied", staged, res)
	}
	fileEquals(t, staged, big)
}
