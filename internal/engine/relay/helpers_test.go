package relay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/pki"
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

// testChunk is the fsync granularity the tests use (divides hubmirror's).
const testChunk = 256 << 10

// fleet is a set of relay nodes in one test process: each its own root,
// mirror, registry, mTLS server on its own 127.0.0.x address, and receiver.
type fleet struct {
	t     *testing.T
	dir   string
	nas   string
	ca    *pki.CA
	nodes []*tnode
	files []File
	data  map[string][]byte
}

type tnode struct {
	name   string
	root   string
	mirror string
	id     Identity
	reg    *Registry
	srv    *Server
	rcv    *Receiver
}

// newFleet makes n nodes and a NAS holding files of the given sizes.
func newFleet(t *testing.T, n int, sizes ...int) *fleet {
	t.Helper()
	f := &fleet{t: t, dir: t.TempDir(), data: map[string][]byte{}}
	f.nas = filepath.Join(f.dir, "nas")
	must(t, os.MkdirAll(f.nas, 0o755))
	for i, sz := range sizes {
		b := testData(uint64(i+1), sz)
		rel := filepath.Join("models--o--m", "blobs", shaHex(b))
		must(t, os.MkdirAll(filepath.Join(f.nas, filepath.Dir(rel)), 0o755))
		must(t, os.WriteFile(filepath.Join(f.nas, rel), b, 0o644))
		f.files = append(f.files, File{Rel: rel, Src: filepath.Join(f.nas, rel), Size: int64(sz), Mode: 0o644, WantSHA: shaHex(b)})
		f.data[rel] = b
	}
	ca, err := pki.LoadOrCreateCA(filepath.Join(f.dir, "pki"), "test fleet CA")
	must(t, err)
	f.ca = ca
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("n%d", i+1)
		host := fmt.Sprintf("127.0.0.%d", 20+i)
		files, err := ca.Peer(pki.FleetPeerPrefix+name, []string{host})
		must(t, err)
		nd := &tnode{name: name, root: filepath.Join(f.dir, name), id: Identity{CA: ca.File, Cert: files.Cert, Key: files.Key}}
		nd.mirror = filepath.Join(nd.root, "stage", "hub")
		must(t, os.MkdirAll(nd.root, 0o755))
		nd.reg = NewRegistry()
		stls, err := ServerTLS(nd.id)
		must(t, err)
		nd.srv = &Server{Registry: nd.reg, StartTimeout: 20 * time.Second, StallTimeout: 20 * time.Second}
		must(t, nd.srv.Listen(host+":0", stls))
		ctls, err := ClientTLS(nd.id)
		must(t, err)
		nd.rcv = &Receiver{Registry: nd.reg, TLS: ctls, StartTimeout: 20 * time.Second, StallTimeout: 20 * time.Second}
		t.Cleanup(func() { nd.srv.Close(); nd.reg.Close() })
		f.nodes = append(f.nodes, nd)
	}
	return f
}

func (f *fleet) names() []string {
	var s []string
	for _, n := range f.nodes {
		s = append(s, n.name)
	}
	return s
}

func (f *fleet) peers() map[string]string {
	m := map[string]string{}
	for _, n := range f.nodes {
		m[n.name] = n.srv.Addr()
	}
	return m
}

func (f *fleet) job(nd *tnode) Job {
	return Job{Key: "lane/0", Node: nd.name, Nodes: f.names(), Peers: f.peers(), Mirror: nd.mirror, Roots: []string{nd.root}, Files: f.files, Chunk: testChunk, Parallel: 2}
}

// runAll runs every node's receiver at once (as the nodes' StageBlock
// activities do) and returns their results by node.
func (f *fleet) runAll(ctx context.Context, mod func(*tnode, *Job)) map[string]Result {
	f.t.Helper()
	var mu sync.Mutex
	res := map[string]Result{}
	var wg sync.WaitGroup
	for _, nd := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := f.job(nd)
			if mod != nil {
				mod(nd, &j)
			}
			r, err := nd.rcv.Run(ctx, j)
			if err != nil {
				f.t.Errorf("node %s: %v", nd.name, err)
			}
			mu.Lock()
			res[nd.name] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// checkMirrors asserts every node holds every file byte for byte, with no
// temp file left.
func (f *fleet) checkMirrors(nodes ...*tnode) {
	f.t.Helper()
	if len(nodes) == 0 {
		nodes = f.nodes
	}
	for _, nd := range nodes {
		for rel, want := range f.data {
			got, err := os.ReadFile(filepath.Join(nd.mirror, rel))
			if err != nil {
				f.t.Errorf("node %s: %v", nd.name, err)
				continue
			}
			if !bytes.Equal(got, want) {
				f.t.Errorf("node %s: %s differs from the NAS", nd.name, rel)
			}
			if _, err := os.Stat(filepath.Join(nd.mirror, filepath.Dir(rel), "."+filepath.Base(rel)+".sparklane-tmp")); err == nil {
				f.t.Errorf("node %s: temp file of %s left behind", nd.name, rel)
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// firstNodeDown has n1 stage every file alone (so its registry can serve
// them all), then stops its server. The function it returns starts a new
// server for n1 at the same address and returns it.
func (f *fleet) firstNodeDown() func() *Server {
	f.t.Helper()
	n1 := f.nodes[0]
	j := f.job(n1)
	j.Nodes = []string{"n1"}
	_, err := n1.rcv.Run(context.Background(), j)
	must(f.t, err)
	addr := n1.srv.Addr()
	must(f.t, n1.srv.Close())
	stls, err := ServerTLS(n1.id)
	must(f.t, err)
	return func() *Server {
		s := &Server{Registry: n1.reg, StartTimeout: 20 * time.Second, StallTimeout: 20 * time.Second}
		must(f.t, s.Listen(addr, stls))
		f.t.Cleanup(func() { s.Close() })
		return s
	}
}

func refsOf(files []File) []FileRef {
	var refs []FileRef
	for _, fl := range files {
		refs = append(refs, FileRef{Rel: fl.Rel, Size: fl.Size})
	}
	return refs
}

func (f *fleet) sizeOf(rel string) int64 {
	for _, fl := range f.files {
		if fl.Rel == rel {
			return fl.Size
		}
	}
	f.t.Fatalf("no file %s", rel)
	return 0
}

func mustPlan(t *testing.T, nodes []string, files []File) *Plan {
	t.Helper()
	p, err := NewPlan(nodes, refsOf(files))
	must(t, err)
	return p
}

// holdsFinished makes n claim a finished copy of fl (for lane/0) whose
// content is content: what a peer with a torn or corrupt copy serves.
func (n *tnode) holdsFinished(t *testing.T, fl File, content []byte) {
	t.Helper()
	cpath := filepath.Join(n.root, "claimed-"+filepath.Base(fl.Rel))
	must(t, os.WriteFile(cpath, content, 0o644))
	cf, err := os.Open(cpath)
	must(t, err)
	es := n.reg.register("lane/0", map[string]int64{fl.Rel: fl.Size})
	es[fl.Rel].done(cf)
}
