package relay

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// A hub-mirror block staged on three nodes through the relay: large blobs
// are read from the NAS once and relayed, the small files are read by each
// node, and every node ends with a mirror (links, ledger) that a full
// sha256 verify finds clean; a second pass copies nothing.
func TestHubMirrorBlockThroughTheRelay(t *testing.T) {
	f := newFleet(t, 3)
	hub := filepath.Join(f.dir, "hub")
	repo := filepath.Join(hub, "models--org--model")
	for _, d := range []string{"blobs", "snapshots/rev1", "refs"} {
		must(t, os.MkdirAll(filepath.Join(repo, d), 0o755))
	}
	var large, sampled int64
	for i, n := range []int{5<<20 + 11, 6 << 20, 9<<20 - 3} {
		sampled += ledger.SampledBytes(int64(n))
		b := testData(uint64(100+i), n)
		sha := shaHex(b)
		must(t, os.WriteFile(filepath.Join(repo, "blobs", sha), b, 0o644))
		must(t, os.Symlink("../../blobs/"+sha, filepath.Join(repo, "snapshots/rev1", "model-"+string(rune('a'+i))+".safetensors")))
		large += int64(n)
	}
	cfg := []byte(`{"model_type":"test"}`)
	must(t, os.WriteFile(filepath.Join(repo, "blobs", shaHex(cfg)), cfg, 0o644))
	must(t, os.Symlink("../../blobs/"+shaHex(cfg), filepath.Join(repo, "snapshots/rev1", "config.json")))
	must(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("rev1"), 0o644))

	spec := func(nd *tnode) hubmirror.Spec {
		return hubmirror.Spec{Src: hub, Dst: filepath.Join(nd.root, "stage"), Repos: []string{"org/model"}, Verify: "sha256", Roots: []string{nd.root}}
	}
	run := func() map[string]staging.Result {
		var mu sync.Mutex
		out := map[string]staging.Result{}
		var wg sync.WaitGroup
		for _, nd := range f.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := HubMirror{Receiver: nd.rcv, Key: "lane/0", Node: nd.name, Nodes: f.names(), Peers: f.peers(), Chunk: testChunk}
				res, err := h.Stage(context.Background(), spec(nd), staging.Options{}, nil)
				if err != nil {
					t.Errorf("node %s: %v", nd.name, err)
				}
				mu.Lock()
				out[nd.name] = res
				mu.Unlock()
			}()
		}
		wg.Wait()
		return out
	}
	res := run()
	var peers, nas int64
	for _, nd := range f.nodes {
		r := res[nd.name]
		nas += r.FromNAS
		t.Logf("node %s: copied %d B in %d files, NAS %d B, peers %v, relay %+v", nd.name, r.CopiedBytes, r.CopiedFiles, r.FromNAS, r.FromPeers, r.Relay)
		peers += sum(r.FromPeers)
		if r.Relay == nil || r.Relay.Files != 3 || r.Relay.Error != "" {
			t.Errorf("node %s: relay report %+v, want 3 files relayed", nd.name, r.Relay)
		}
		v, err := hubmirror.Verify(context.Background(), spec(nd), true)
		must(t, err)
		if !v.Clean() || v.OK == 0 {
			t.Errorf("node %s: full verify %+v", nd.name, v)
		}
		if tgt, err := os.Readlink(filepath.Join(nd.root, "stage/hub/models--org--model/snapshots/rev1/config.json")); err != nil || tgt != "../../blobs/"+shaHex(cfg) {
			t.Errorf("node %s: snapshot link %q %v", nd.name, tgt, err)
		}
	}
	if want := 2 * large; peers != want {
		t.Errorf("peer bytes %d, want the large blobs twice (%d): each read from the NAS by one node only", peers, want)
	}
	// The NAS: the large blobs once, each node's sampled check of each of
	// them once (the hub-mirror pass takes the relay's check, it does not
	// sample again), and the small files (config, refs/main) by every node.
	if want := large + 3*sampled + 3*int64(len(cfg)+len("rev1")); nas != want {
		t.Errorf("NAS bytes over the nodes %d, want %d (large blobs %d once, samples %d per node, small files %d per node)", nas, want, large, sampled, len(cfg)+len("rev1"))
	}
	res = run()
	for _, nd := range f.nodes {
		if r := res[nd.name]; r.CopiedBytes != 0 || r.Relay.Present != 3 || sum(r.FromPeers) != 0 {
			t.Errorf("second pass on %s copied: %+v relay %+v", nd.name, r, r.Relay)
		}
	}
}
