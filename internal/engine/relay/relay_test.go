package relay

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/pki"
)

func TestPlanSpreadsReadersByBytesAndChainsTheRest(t *testing.T) {
	files := []FileRef{{"a", 100}, {"b", 90}, {"c", 60}, {"d", 40}, {"e", 30}, {"f", 10}}
	p, err := NewPlan([]string{"n1", "n2", "n3"}, files)
	must(t, err)
	// LPT: a→n1, b→n2, c→n3, d→n3 (60<90<100), e→n2 (90<100), f→n1 (100=120? n1 100 < n2 120, n3 100: n1 first)
	want := map[string]string{"a": "n1", "b": "n2", "c": "n3", "d": "n3", "e": "n2", "f": "n1"}
	for rel, r := range want {
		if p.Reader[rel] != r {
			t.Errorf("reader of %s = %s, want %s", rel, p.Reader[rel], r)
		}
	}
	if p.ReaderBytes["n1"] != 110 || p.ReaderBytes["n2"] != 120 || p.ReaderBytes["n3"] != 100 {
		t.Errorf("reader bytes %v", p.ReaderBytes)
	}
	// c is read by n3: n1 gets it from n3, n2 from n1.
	for node, want := range map[string]Route{"n3": {"", 0}, "n1": {"n3", 1}, "n2": {"n1", 2}} {
		if got := p.Route("c", node); got != want {
			t.Errorf("route of c to %s = %+v, want %+v", node, got, want)
		}
	}
	if got := p.Route("unknown", "n1"); got != (Route{}) {
		t.Errorf("unplanned file route %+v, want the NAS", got)
	}
	if _, err := NewPlan([]string{"n1", "n1"}, files); err == nil {
		t.Error("a node listed twice was accepted")
	}
	// Every node computes the same plan whatever order the files come in.
	rev := append([]FileRef(nil), files...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	q, _ := NewPlan([]string{"n1", "n2", "n3"}, rev)
	for rel := range want {
		if q.Reader[rel] != p.Reader[rel] {
			t.Errorf("plan depends on file order: %s %s vs %s", rel, q.Reader[rel], p.Reader[rel])
		}
	}
}

// Four nodes stage four files: the NAS is read once per file (plus every
// node's sampled check), every other byte comes from a peer over mTLS, and
// every node ends with the NAS's exact content.
func TestFourNodesReadTheNASOnce(t *testing.T) {
	sizes := []int{5<<20 + 123, 4 << 20, 6<<20 - 7, 3<<20 + 1}
	f := newFleet(t, 4, sizes...)
	res := f.runAll(context.Background(), nil)
	f.checkMirrors()
	var lane, sampled, nas, peers int64
	for _, fl := range f.files {
		lane += fl.Size
		sampled += ledger.SampledBytes(fl.Size)
	}
	for _, nd := range f.nodes {
		r := res[nd.name]
		nas += r.FromNAS
		peers += sum(r.FromPeers)
		if len(r.PeerFailures) > 0 {
			t.Errorf("node %s gave up on peers: %v", nd.name, r.PeerFailures)
		}
		t.Logf("node %s: NAS %d B, peers %v, served %d B", nd.name, r.FromNAS, r.FromPeers, nd.srv.Served())
	}
	// Each node samples each file once on the NAS; the content itself is
	// read from the NAS exactly once per file.
	if want := lane + 4*sampled; nas != want {
		t.Errorf("NAS bytes %d, want lane %d + 4 × sampled %d = %d", nas, lane, sampled, want)
	}
	if want := 3 * lane; peers != want {
		t.Errorf("peer bytes %d, want 3 × lane = %d", peers, want)
	}
	t.Logf("NAS data bytes / lane size = %.2f (a node-by-node stage reads 4.00)", float64(nas-4*sampled)/float64(lane))
	// A second pass finds everything in place and copies nothing.
	res = f.runAll(context.Background(), nil)
	for _, nd := range f.nodes {
		if r := res[nd.name]; r.Present != len(f.files) || sum(r.FromPeers) != 0 {
			t.Errorf("second pass on %s: %+v", nd.name, r)
		}
	}
}

// A peer whose copy is wrong (a bit flipped in a sampled region) is caught
// by the receiver's sampled check against the NAS; the file is fetched
// again from the NAS and the peer is not used again for the block.
func TestCorruptPeerIsCaughtAndRefetchedFromNAS(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sha256 bool
		at     func(size int64) int64
	}{
		{"sampled: flipped byte in the head", false, func(int64) int64 { return 10 }},
		{"sha256: flipped byte outside every sample", true, func(size int64) int64 { return ledger.HeadBytes + (size-2*ledger.HeadBytes)/32 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, 2, 6<<20)
			bad, good := f.nodes[0], f.nodes[1]
			fl := f.files[0]
			// n1 claims a finished copy whose content is wrong.
			corrupt := append([]byte(nil), f.data[fl.Rel]...)
			corrupt[tc.at(fl.Size)] ^= 0xff
			bad.holdsFinished(t, fl, corrupt)
			j := f.job(good)
			j.Nodes = []string{"n1", "n2"} // n1 reads the NAS, n2 fetches from n1
			j.SHA256 = tc.sha256
			r, err := good.rcv.Run(context.Background(), j)
			must(t, err)
			f.checkMirrors(good)
			if r.Refetched != 1 || !strings.Contains(r.PeerFailures["n1"], "wrong content") {
				t.Errorf("result %+v: want one refetch and n1 named as wrong", r)
			}
			if r.FromPeers["n1"] != fl.Size {
				t.Errorf("received %d B from n1, want the whole file (%d) before the check", r.FromPeers["n1"], fl.Size)
			}
			if r.FromNAS < fl.Size {
				t.Errorf("NAS bytes %d: the refetch did not read the NAS", r.FromNAS)
			}
		})
	}
}

// A peer that is gone (nothing listens) or stalls (its copy never
// advances) costs a fallback to the NAS, never a failed stage.
func TestGoneOrStalledPeerFallsBackToNAS(t *testing.T) {
	t.Run("gone", func(t *testing.T) {
		f := newFleet(t, 2, 3<<20+5)
		f.nodes[0].srv.Close()
		j := f.job(f.nodes[1])
		j.Nodes = []string{"n1", "n2"}
		r, err := f.nodes[1].rcv.Run(context.Background(), j)
		must(t, err)
		f.checkMirrors(f.nodes[1])
		if r.PeerFailures["n1"] == "" || sum(r.FromPeers) != 0 || r.FromNAS < f.files[0].Size {
			t.Errorf("result %+v: want n1 given up and the file read from the NAS", r)
		}
	})
	t.Run("stalled", func(t *testing.T) {
		f := newFleet(t, 2, 3<<20+5)
		fl := f.files[0]
		// n1 has begun the file and holds one chunk, then nothing more.
		part := filepath.Join(f.nodes[0].root, "part")
		must(t, os.WriteFile(part, f.data[fl.Rel][:testChunk], 0o644))
		pf, err := os.Open(part)
		must(t, err)
		es := f.nodes[0].reg.register("lane/0", map[string]int64{fl.Rel: fl.Size})
		es[fl.Rel].start(pf, testChunk)
		rcv := f.nodes[1].rcv
		rcv.StallTimeout = 300 * time.Millisecond
		j := f.job(f.nodes[1])
		j.Nodes = []string{"n1", "n2"}
		r, err := rcv.Run(context.Background(), j)
		must(t, err)
		f.checkMirrors(f.nodes[1])
		if r.FromPeers["n1"] != testChunk || !strings.Contains(r.PeerFailures["n1"], "ended at") {
			t.Errorf("result %+v: want one chunk from n1, then n1 given up", r)
		}
		if want := fl.Size - testChunk + ledger.SampledBytes(fl.Size); r.FromNAS != want {
			t.Errorf("NAS bytes %d, want the rest %d (+ the sampled check)", r.FromNAS, want)
		}
	})
}

// The next node in a chain receives a file while its sender is still
// receiving it: n1 (the NAS reader) holds after its first chunk until n2
// has that chunk from it.
func TestRelayIsPipelined(t *testing.T) {
	f := newFleet(t, 2, 4<<20)
	fl := f.files[0]
	got := make(chan struct{})
	var once bool
	res := f.runAll(context.Background(), func(nd *tnode, j *Job) {
		j.Nodes = []string{"n1", "n2"}
		switch nd.name {
		case "n1":
			j.OnChunk = func(rel string, synced int64) {
				if synced == testChunk {
					select {
					case <-got:
					case <-time.After(30 * time.Second):
						t.Error("n2 got nothing while n1 was still receiving: not pipelined")
					}
				}
			}
		case "n2":
			j.OnChunk = func(rel string, synced int64) {
				if !once {
					once = true
					close(got)
				}
			}
		}
	})
	f.checkMirrors()
	if res["n2"].FromPeers["n1"] != fl.Size {
		t.Errorf("n2 got %v from peers, want all %d B from n1", res["n2"].FromPeers, fl.Size)
	}
}

// The server is never an unauthenticated listener: no client certificate,
// a certificate from another CA, or a fleet identity that is not a relay
// node are all refused.
func TestServerRequiresARelayClientCertificate(t *testing.T) {
	f := newFleet(t, 1, 1<<20)
	addr := f.nodes[0].srv.Addr()
	get := func(cfg *tls.Config) (int, error) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
		resp, err := c.Get("https://" + addr + "/v1/file?block=lane/0&path=x&off=0")
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	pool := func() *tls.Config {
		id := f.nodes[0].id
		cfg, err := ClientTLS(id)
		must(t, err)
		cfg.Certificates = nil
		return cfg
	}
	if code, err := get(pool()); err == nil {
		t.Errorf("no client certificate: status %d, want a TLS error", code)
	}
	other, err := pki.LoadOrCreateCA(filepath.Join(t.TempDir(), "other"), "other CA")
	must(t, err)
	of, err := other.Peer(pki.FleetPeerPrefix+"intruder", []string{"127.0.0.1"})
	must(t, err)
	cert, err := tls.LoadX509KeyPair(of.Cert, of.Key)
	must(t, err)
	cfg := pool()
	cfg.Certificates = []tls.Certificate{cert}
	if code, err := get(cfg); err == nil {
		t.Errorf("certificate from another CA: status %d, want a TLS error", code)
	}
	op, err := f.ca.Client("operator")
	must(t, err)
	cert, err = tls.LoadX509KeyPair(op.Cert, op.Key)
	must(t, err)
	cfg = pool()
	cfg.Certificates = []tls.Certificate{cert}
	if code, err := get(cfg); err != nil || code != http.StatusForbidden {
		t.Errorf("operator certificate: status %d, %v; want 403", code, err)
	}
	// A node's own identity is let in (and told the block is not there).
	cfg, err = ClientTLS(f.nodes[0].id)
	must(t, err)
	f.nodes[0].srv.RegisterTimeout = 100 * time.Millisecond
	if code, err := get(cfg); err != nil || code != http.StatusNotFound {
		t.Errorf("relay peer: status %d, %v; want 404 for an unknown block", code, err)
	}
}

// A peer that was gone is tried again once RetryPeerAfter has passed, one
// file at a time: n1 is down when n2 wants its first file from it (read
// from the NAS instead), comes back, and serves n2 the rest of the block.
func TestPeerThatComesBackServesTheRestOfTheBlock(t *testing.T) {
	f := newFleet(t, 2, 3<<20+1, 3<<20+2, 3<<20+3, 3<<20+4)
	n2 := f.nodes[1]
	bringBack := f.firstNodeDown()
	plan := mustPlan(t, []string{"n1", "n2"}, f.files)
	var fromN1 []string
	for _, fl := range f.files {
		if plan.Route(fl.Rel, "n2").Source == "n1" {
			fromN1 = append(fromN1, fl.Rel)
		}
	}
	sort.Strings(fromN1) // the order n2 takes them in (one hop each)
	if len(fromN1) < 2 {
		t.Fatalf("plan routes %d files from n1 to n2, the test needs 2", len(fromN1))
	}
	n2.rcv.RetryPeerAfter = time.Nanosecond // any later file may try it again
	j2 := f.job(n2)
	j2.Nodes = []string{"n1", "n2"}
	j2.Parallel = 1
	var back *Server
	j2.OnChunk = func(rel string, synced int64) {
		// The first file n2 wanted from n1 is done (from the NAS): n1 is up
		// again, at the same address.
		if back == nil && rel == fromN1[0] && synced == f.sizeOf(rel) {
			back = bringBack()
		}
	}
	r, err := n2.rcv.Run(context.Background(), j2)
	must(t, err)
	f.checkMirrors(n2)
	if back == nil {
		t.Fatal("n1 was never brought back")
	}
	if r.PeerFailures["n1"] == "" {
		t.Errorf("result %+v: want n1's outage reported", r)
	}
	var want int64
	for _, rel := range fromN1[1:] {
		want += f.sizeOf(rel)
	}
	if r.FromPeers["n1"] != want || back.Served() != want {
		t.Errorf("from n1 %d B (it served %d), want the %d B of the files after its return", r.FromPeers["n1"], back.Served(), want)
	}
}

// ... and within a file: n1 is down when n2 starts a file routed through
// it, comes back after n2's first chunk, and sends the rest of the file
// from the next chunk boundary on.
func TestPeerThatComesBackMidFileSendsTheRest(t *testing.T) {
	f := newFleet(t, 2, 4*testChunk+5)
	n2 := f.nodes[1]
	fl := f.files[0]
	bringBack := f.firstNodeDown()
	n2.rcv.RetryPeerAfter = time.Nanosecond
	j2 := f.job(n2)
	// n1 is the file's NAS reader; n2 receives it from n1.
	j2.Nodes = []string{"n1", "n2"}
	if src := mustPlan(t, j2.Nodes, f.files).Route(fl.Rel, "n2").Source; src != "n1" {
		t.Fatalf("plan routes %s to n2 from %q, the test needs n1", fl.Rel, src)
	}
	var back *Server
	j2.OnChunk = func(rel string, synced int64) {
		if back == nil && synced == testChunk {
			back = bringBack()
		}
	}
	r, err := n2.rcv.Run(context.Background(), j2)
	must(t, err)
	f.checkMirrors(n2)
	if r.PeerFailures["n1"] == "" {
		t.Errorf("result %+v: want n1's outage reported", r)
	}
	if want := fl.Size - testChunk; r.FromPeers["n1"] != want || back.Served() != want {
		t.Errorf("from n1 %d B (it served %d), want all but the first chunk (%d B)", r.FromPeers["n1"], back.Served(), want)
	}
}
