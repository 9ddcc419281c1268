package hubmirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/blobtest"
)

// The blobs these tests tear are 32 chunks of 256 KiB. A copy is held
// after its chunk ending at holdAfter; the versions of a blob they write
// differ at two bytes outside every sampled region (head, tail, spread
// windows) of the whole file and of a 6 MiB prefix (blobtest.Unsampled):
// one in a chunk copied before the hold, one after it, so a copy that reads one version up to
// the hold and another after it differs from both.
const (
	tornChunk = 256 << 10
	tornSize  = 32 * tornChunk
	holdAfter = 8 * tornChunk
	tornEntry = "big.safetensors"
	tornRepo  = "models--org--model"
)

// differ returns a copy of b with the bytes at offs changed: other
// content, the same size.
func differ(b []byte, offs ...int) []byte {
	c := append([]byte(nil), b...)
	for _, off := range offs {
		c[off] ^= 0x5a
	}
	return c
}

// holdAt makes every large copy stop after its chunk ending at or past
// at, for each attempt, and run rewrite there (with the attempt's number)
// while the copy is held; it returns the count of copies held.
func holdAt(t *testing.T, at int64, rewrite func(attempt int)) *int {
	n := 0
	old := testAfterChunk
	testAfterChunk = func(rel string, copied int64) {
		if copied >= at && copied-tornChunk < at {
			n++
			rewrite(n)
		}
	}
	t.Cleanup(func() { testAfterChunk = old })
	return &n
}

// A NAS blob rewritten in place while it is being staged (a copy held at a
// byte offset while the test rewrites its source) never leaves a torn
// copy behind a successful stage, and Verify never calls one good: the
// copy is discarded and made again, and the stage ends with the bytes the
// blob's name says, or refuses naming the file, with nothing at the
// blob's node path and no temp file posing as a copy.
func TestSourceRewrittenWhileCopied(t *testing.T) {
	defer SetChunkSize(tornChunk)()
	defer SetFlushChunks(2)()
	for _, tc := range []struct {
		name string
		// corrupt: the NAS copy starts as the other version, not what the
		// name says.
		corrupt bool
		// rewrite returns what the source is rewritten with at the hold
		// of the given attempt (nil: left alone), from its good and other
		// versions.
		rewrite func(good, bad []byte, attempt int) []byte
		// wantType is the refusal's fault type ("": staged).
		wantType string
		copies   int // copies held (attempts made)
	}{
		{"repaired while copied: the new bytes match the name", true,
			func(good, bad []byte, attempt int) []byte {
				if attempt == 1 {
					return good
				}
				return nil
			}, "", 2},
		{"rewritten with the same bytes", false,
			func(good, bad []byte, attempt int) []byte { return good }, "", 1},
		{"rewritten with bytes that do not match the name", false,
			func(good, bad []byte, attempt int) []byte {
				if attempt == 1 {
					return bad
				}
				return nil
			}, fault.ContentMismatch, 2},
		{"rewritten again in every copy", true,
			func(good, bad []byte, attempt int) []byte {
				if attempt%2 == 1 {
					return good
				}
				return bad
			}, fault.SourceChanged, SourceAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			good := testData(70, tornSize)
			bad := blobtest.OtherVersion(t, good, 24*tornChunk)
			sum := f.repo.blob(good, false)
			f.repo.link(rev1, tornEntry, sum)
			src := filepath.Join(f.repo.dir, "blobs", sum)
			if tc.corrupt {
				must(t, os.WriteFile(src, bad, 0o644))
			}
			copies := holdAt(t, holdAfter, func(attempt int) {
				if b := tc.rewrite(good, bad, attempt); b != nil {
					blobtest.RewriteInPlace(t, src, b)
				}
			})
			sp := f.spec()
			res, err := Stage(context.Background(), sp, staging.Options{Parallel: 1})
			staged := filepath.Join(f.mirrorRepo(), "blobs", sum)
			if *copies != tc.copies {
				t.Errorf("%d copies of %s were made, want %d", *copies, src, tc.copies)
			}
			if left := tmpLeft(t, f.dst); len(left) != 0 {
				t.Errorf("temp files left: %v", left)
			}
			v, verr := Verify(context.Background(), sp, false)
			must(t, verr)
			if tc.wantType == "" {
				must(t, err)
				fileEquals(t, staged, good)
				if !v.Clean() {
					t.Errorf("verify after the stage: %+v", v)
				}
				e := loadLedgerAt(t, f.dst).Entries[filepath.Join(tornRepo, "blobs", sum)]
				if e.SHA256 != sum {
					t.Errorf("ledger entry of %s: sha256 %q, want the hash of the bytes written, its name", staged, e.SHA256)
				}
				t.Logf("staged after %d copies: %+v", *copies, res)
				return
			}
			wantType(t, err, tc.wantType, src, staged)
			if tc.wantType == fault.ContentMismatch && (!strings.Contains(err.Error(), sum) || !strings.Contains(err.Error(), shaHex(bad))) {
				t.Errorf("error %q does not name the expected sha256 %s and the one got", err, sum)
			}
			if tc.wantType == fault.SourceChanged && !strings.Contains(err.Error(), "is something writing to the NAS?") {
				t.Errorf("error %q does not ask whether something writes to the NAS", err)
			}
			if _, err := os.Lstat(staged); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists after the copy was refused: %v", staged, err)
			}
			if !slices.Contains(v.Missing, staged) || len(v.Bad) != 0 {
				t.Errorf("verify after the refusal: %+v, want %s missing and nothing bad", v, staged)
			}
		})
	}
}

// A file that is not content-addressed (a large real file in a snapshot)
// has only its identity to show it changed: rewritten in place while it
// is copied, with other bytes outside the samples, it is copied again and
// staged with its new bytes; rewritten in every copy, it is refused.
func TestUnnamedSourceRewrittenWhileCopied(t *testing.T) {
	defer SetChunkSize(tornChunk)()
	for _, every := range []bool{false, true} {
		f := newFixture(t, false)
		v1 := testData(71, tornSize)
		v2 := blobtest.OtherVersion(t, v1, 24*tornChunk)
		f.repo.file(rev1, "weights.bin", v1)
		src := filepath.Join(f.repo.dir, "snapshots", rev1, "weights.bin")
		now := v1
		copies := holdAt(t, holdAfter, func(attempt int) {
			if attempt == 1 || every {
				if now = v2; attempt%2 == 0 {
					now = v1
				}
				blobtest.RewriteInPlace(t, src, now)
			}
		})
		_, err := Stage(context.Background(), f.spec(), staging.Options{Parallel: 1})
		staged := filepath.Join(f.mirrorRepo(), "snapshots", rev1, "weights.bin")
		if left := tmpLeft(t, f.dst); len(left) != 0 {
			t.Errorf("temp files left: %v", left)
		}
		if every {
			wantType(t, err, fault.SourceChanged, src, staged)
			if _, err := os.Lstat(staged); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists after the copy was refused: %v", staged, err)
			}
			if *copies != SourceAttempts {
				t.Errorf("%d copies, want %d", *copies, SourceAttempts)
			}
			continue
		}
		must(t, err)
		fileEquals(t, staged, v2)
		if *copies != 2 {
			t.Errorf("%d copies, want 2 (the torn one discarded)", *copies)
		}
	}
}

// A NAS blob whose bytes are not what its sha256 name says is refused as
// corrupt, large (the difference between the samples) or small, under
// the default sampled verify: nothing is renamed into place, no temp file
// is left, and the error names the node path, the file and both hashes.
func TestCorruptNASBlobIsNeverMirrored(t *testing.T) {
	defer SetChunkSize(tornChunk)()
	for _, size := range []int{tornSize, 300_000} {
		f := newFixture(t, false)
		good := testData(72, size)
		sum := shaHex(good)
		bad := differ(good, size/2)
		if size == tornSize {
			bad = blobtest.OtherVersion(t, good, 24*tornChunk)
		}
		must(t, os.WriteFile(filepath.Join(f.repo.dir, "blobs", sum), bad, 0o644))
		f.repo.link(rev1, tornEntry, sum)
		_, err := Stage(context.Background(), f.spec(), staging.Options{})
		staged := filepath.Join(f.mirrorRepo(), "blobs", sum)
		wantType(t, err, fault.ContentMismatch, staged, filepath.Join(f.repo.dir, "blobs", sum), sum, shaHex(bad))
		if _, err := os.Lstat(staged); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("size %d: %s exists after the corrupt blob was refused: %v", size, staged, err)
		}
		if left := tmpLeft(t, f.dst); len(left) != 0 {
			t.Errorf("size %d: temp files left: %v", size, left)
		}
	}
}

// A temp file kept from an earlier copy of an earlier version of the
// source (it differs from today's outside the samples, so the sampled
// check of its prefix passes) does not end in a torn copy: the whole,
// hashed with the prefix re-read from the node's disk, does not match the
// blob's name, and the copy is made again from the start.
func TestResumedPrefixOfAnotherVersionIsCopiedAgain(t *testing.T) {
	defer SetChunkSize(tornChunk)()
	f := newFixture(t, false)
	good := testData(73, tornSize)
	sum := f.repo.blob(good, false)
	f.repo.link(rev1, tornEntry, sum)
	tmp := tmpName(filepath.Join(f.mirrorRepo(), "blobs", sum))
	must(t, os.MkdirAll(filepath.Dir(tmp), 0o755))
	const kept = 24 * tornChunk
	must(t, os.WriteFile(tmp, blobtest.OtherVersion(t, good, 24*tornChunk)[:kept], 0o600))
	tf, err := os.OpenFile(tmp, os.O_RDWR, 0)
	must(t, err)
	MarkBoot(tf) // this boot's: kept whole
	must(t, tf.Close())
	res, err := Stage(context.Background(), f.spec(), staging.Options{Parallel: 1})
	must(t, err)
	fileEquals(t, filepath.Join(f.mirrorRepo(), "blobs", sum), good)
	if want := int64(tornSize + (tornSize - kept)); res.CopiedBytes < want {
		t.Errorf("copied %d bytes, want at least %d: the rest after the kept prefix, then the whole blob again", res.CopiedBytes, want)
	}
}

// What the ledger records is what was written: a large blob's full hash as
// it streamed, under the default sampled verify too, and the written
// file's samples; the blob is then sealed at the end of the pass (its
// identity unchanged since its rename), so the next pass reads none of it.
func TestStreamedHashIsRecordedAndSealed(t *testing.T) {
	defer SetChunkSize(tornChunk)()
	sealing(t)
	f := newFixture(t, false)
	good := testData(74, tornSize)
	sum := f.repo.blob(good, false)
	f.repo.link(rev1, tornEntry, sum)
	_, err := Stage(context.Background(), f.spec(), staging.Options{})
	must(t, err)
	staged := filepath.Join(f.mirrorRepo(), "blobs", sum)
	e := loadLedgerAt(t, f.dst).Entries[filepath.Join(tornRepo, "blobs", sum)]
	_, sampled, err := ledger.SampleFile(staged)
	must(t, err)
	if e.SHA256 != sum || e.Sampled != sampled || e.Seal == nil {
		t.Fatalf("ledger entry %+v: want sha256 %s, the staged file's samples %s and a seal", e, sum, sampled)
	}
	r0 := readChars(t)
	res, err := Stage(context.Background(), f.spec(), staging.Options{})
	must(t, err)
	if read := readChars(t) - r0; read >= ledger.SampledBytes(tornSize) || res.VerifiedFiles != res.TotalFiles {
		t.Fatalf("second pass %+v read %d bytes; want all verified, none of the sealed blob's %d sampled bytes", res, read, ledger.SampledBytes(tornSize))
	}
}

func loadLedgerAt(t *testing.T, dst string) *ledger.Ledger {
	t.Helper()
	led, err := ledger.Load(filepath.Join(dst, "hub", LedgerName), Kind)
	must(t, err)
	return led
}
