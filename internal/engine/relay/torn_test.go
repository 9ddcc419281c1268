package relay

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/blobtest"
)

// The blobs these tests tear are 32 test chunks; a receipt is held after
// its chunk ending at holdAfter. The versions of a blob they write differ
// at two bytes outside every sampled region (blobtest.Unsampled), one before the hold and one
// after it, so a receipt that reads one version up to the hold and
// another after it differs from both.
const (
	tornSize  = 32 * testChunk
	holdAfter = 8 * testChunk
)

// The node that reads a blob from the NAS, held at a byte offset while the
// test rewrites the NAS file in place, never keeps a torn copy, whatever
// the verify mode: it receives the file again and ends with the bytes the
// name says, or refuses (the NAS copy is corrupt, or keeps changing),
// with nothing at the file's node path and no temp file left.
func TestNASFileRewrittenWhileReceived(t *testing.T) {
	for _, tc := range []struct {
		name     string
		corrupt  bool // the NAS copy starts as the other version
		rewrite  func(good, bad []byte, attempt int) []byte
		wantType string
		receipts int
	}{
		{"repaired while received", true, func(good, bad []byte, attempt int) []byte {
			if attempt == 1 {
				return good
			}
			return nil
		}, "", 2},
		{"rewritten with bytes that are not its name", false, func(good, bad []byte, attempt int) []byte {
			if attempt == 1 {
				return bad
			}
			return nil
		}, fault.ContentMismatch, 2},
		{"rewritten in every receipt", true, func(good, bad []byte, attempt int) []byte {
			if attempt%2 == 1 {
				return good
			}
			return bad
		}, fault.SourceChanged, hubmirror.SourceAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, 1, tornSize)
			fl, nd := f.files[0], f.nodes[0]
			good := f.data[fl.Rel]
			bad := blobtest.OtherVersion(t, good)
			if tc.corrupt {
				must(t, os.WriteFile(fl.Src, bad, 0o644))
			}
			receipts := 0
			j := f.job(nd)
			j.OnChunk = func(rel string, synced int64) {
				if synced == holdAfter {
					receipts++
					if b := tc.rewrite(good, bad, receipts); b != nil {
						blobtest.RewriteInPlace(t, fl.Src, b)
					}
				}
			}
			_, err := nd.rcv.Run(context.Background(), j)
			if receipts != tc.receipts {
				t.Errorf("%d receipts held, want %d", receipts, tc.receipts)
			}
			staged := filepath.Join(nd.mirror, fl.Rel)
			if _, serr := os.Stat(filepath.Join(filepath.Dir(staged), "."+filepath.Base(staged)+".sparklane-tmp")); serr == nil {
				t.Errorf("a temp file of %s is left", staged)
			}
			if tc.wantType == "" {
				must(t, err)
				f.checkMirrors()
				return
			}
			if typ, _ := fault.TypeOf(err); typ != tc.wantType {
				t.Fatalf("error %v (type %q), want a %s fault", err, typ, tc.wantType)
			}
			for _, want := range []string{fl.Src, staged} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
			if _, err := os.Lstat(staged); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists after the file was refused: %v", staged, err)
			}
		})
	}
}

// A peer's copy that is torn outside every sampled region (so its samples
// match the NAS's) is caught under the default sampled verify too: the
// receiver hashes a blob as it arrives and checks it against its name,
// then fetches it again from the NAS and gives the peer up.
func TestTornPeerCopyIsCaughtUnderSampledVerify(t *testing.T) {
	f := newFleet(t, 2, tornSize)
	bad, good := f.nodes[0], f.nodes[1]
	fl := f.files[0]
	bad.holdsFinished(t, fl, blobtest.OtherVersion(t, f.data[fl.Rel]))
	j := f.job(good)
	j.Nodes = []string{"n1", "n2"} // n1 reads the NAS, n2 fetches from n1
	r, err := good.rcv.Run(context.Background(), j)
	must(t, err)
	f.checkMirrors(good)
	if r.Refetched != 1 || !strings.Contains(r.PeerFailures["n1"], "wrong content") {
		t.Errorf("result %+v: want one refetch and n1 named as wrong", r)
	}
	if c := r.Checked[fl.Rel]; c.SHA256 != fl.WantSHA {
		t.Errorf("check handed to the ledger pass %+v: want the streamed sha256 %s", c, fl.WantSHA)
	}
}

// A node that reads a blob from the NAS while the next node receives it
// from it (pipelined) reads a torn source: the NAS copy, corrupt when the
// stage began, is repaired after both have its first chunks. The reader
// finds its copy torn and makes it again; the receiver, which got the
// torn chunks from it, finds its own wrong by the blob's name and fetches
// it again. Both end with the named bytes.
func TestTornSourceAtTheSenderDoesNotReachTheReceiver(t *testing.T) {
	f := newFleet(t, 2, tornSize)
	fl := f.files[0]
	good := f.data[fl.Rel]
	must(t, os.WriteFile(fl.Src, blobtest.OtherVersion(t, good), 0o644))
	got := make(chan struct{})
	var once, held bool
	res := f.runAll(context.Background(), func(nd *tnode, j *Job) {
		j.Nodes = []string{"n1", "n2"} // n1 reads the NAS, n2 fetches from n1
		switch nd.name {
		case "n1":
			j.OnChunk = func(rel string, synced int64) {
				if synced != holdAfter || held {
					return
				}
				held = true
				select {
				case <-got:
				case <-time.After(30 * time.Second):
					t.Error("n2 got nothing from n1 while n1 held: not pipelined")
				}
				blobtest.RewriteInPlace(t, fl.Src, good)
			}
		case "n2":
			j.OnChunk = func(rel string, synced int64) {
				if synced >= holdAfter && !once {
					once = true
					close(got)
				}
			}
		}
	})
	f.checkMirrors()
	if !held {
		t.Fatal("n1 was never held")
	}
	for name, r := range res {
		if c := r.Checked[fl.Rel]; c.SHA256 != fl.WantSHA {
			t.Errorf("node %s: check %+v, want the streamed sha256 %s", name, c, fl.WantSHA)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		r := res[n]
		t.Logf("%s: received %d files, wrote %d B, from peers %v, gave up %v", n, r.Received, r.Written, r.FromPeers, r.PeerFailures)
	}
}
