package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// File is one file a node brings into its mirror through the relay: an
// entry of the block's listing (hubmirror.Files), the same on every node.
// The reader node copies Src from the NAS, and every node samples Src to
// check what a peer sent; a file with a WantSHA is hashed as it arrives
// and checked against it whatever Job.SHA256 says.
type File = hubmirror.File

// Job is one node's part of one relayed block.
type Job struct {
	// Key names the block identically on every node (lane and block
	// index), so peers can ask for it.
	Key string
	// Node is this node; Nodes are all nodes staging the block, in
	// cluster order (the plan's input).
	Node  string
	Nodes []string
	// Peers are the relay servers' host:port by node name.
	Peers map[string]string
	// Mirror is the directory the files land in (Mirror/Rel), beneath
	// Roots.
	Mirror string
	Roots  []string
	// Files are the files to relay, the same list on every node.
	Files []File
	// SHA256 is verify = "sha256": a file without a WantSHA, which nothing
	// but the NAS's own content confirms whole, is then read from the NAS,
	// never from a peer. (Files with one are always checked against it.)
	SHA256 bool
	// Parallel is how many files are in flight (default 4).
	Parallel int
	// Chunk is the fsync and resume granularity (the temp files' mark
	// says it); it must divide hubmirror.ChunkSize() (default: that
	// size), so a pass resuming hubmirror's temp file at a whole
	// hubmirror chunk writes on its own chunk grid.
	Chunk int64
	// OnProgress is called as bytes land (throttled, and at every chunk).
	OnProgress func(Progress) `json:"-"`
	// Pacer paces the pass's writes beside a serving lane (nil: none):
	// the hub-mirror pass's (staging.Options.Pacer).
	Pacer *staging.Pacer `json:"-"`
	// OnChunk is called after each chunk of rel is fsynced and servable,
	// before the next begins (progress hooks, test fault points).
	OnChunk func(rel string, synced int64) `json:"-"`
}

// Progress is a relay pass's progress; it is JSON-safe for heartbeats.
type Progress struct {
	FilesTotal int   `json:"files_total"`
	FilesDone  int   `json:"files_done"`
	BytesTotal int64 `json:"bytes_total"`
	BytesDone  int64 `json:"bytes_done"`
	// FromNAS and FromPeers count bytes read from the NAS (copies and
	// sampled checks) and received from each peer.
	FromNAS   int64            `json:"from_nas"`
	FromPeers map[string]int64 `json:"from_peers,omitempty"`
}

// Result is what one node's relay pass did.
type Result struct {
	// Files is how many files the pass handled; Present were already in
	// place (matching the NAS's samples) and copied nothing.
	Files   int `json:"files"`
	Present int `json:"present"`
	// FromNAS is every byte read from the NAS (copies and sampled
	// checks); FromPeers the bytes received from each peer.
	FromNAS   int64            `json:"from_nas"`
	FromPeers map[string]int64 `json:"from_peers,omitempty"`
	// Refetched counts files a peer sent wrong (caught by the sampled
	// hash or sha256) that were fetched again from the NAS.
	Refetched int `json:"refetched,omitempty"`
	// PeerFailures says why each peer given up on was (slow, gone, wrong).
	PeerFailures map[string]string `json:"peer_failures,omitempty"`
	// Resumed is the bytes a resumed temp file already held.
	Resumed int64 `json:"resumed,omitempty"`
	// Received is how many files were written (not Present); Written the
	// bytes written to them, refetches included.
	Received int   `json:"received"`
	Written  int64 `json:"written"`
	// Checked are the files found or made matching the NAS (present, or
	// received and checked), for the hub-mirror pass that follows.
	Checked map[string]staging.Checked `json:"-"`
}

// Receiver fetches a node's files: from the NAS where the node is a
// file's reader, else from its peer, falling back to the NAS.
type Receiver struct {
	// Registry is this node's: received bytes become servable to the
	// next peer as soon as they are fsynced (pipelining).
	Registry *Registry
	// TLS is the client side of the node's relay identity (ClientTLS).
	TLS *tls.Config
	// StartTimeout bounds the wait for a peer to begin serving a file
	// (response headers); StallTimeout the wait for its next bytes.
	StartTimeout, StallTimeout time.Duration
	// RetryPeerAfter is how long after giving up on a peer that was gone
	// or stalled one file tries it again (default 30 s): a node that
	// restarts serves the rest of the block. A peer that sent wrong
	// content is not tried again in the block.
	RetryPeerAfter time.Duration
	// Log may be nil.
	Log *zap.Logger

	once   sync.Once
	client *http.Client
}

func (r *Receiver) init() {
	r.once.Do(func() {
		if r.StartTimeout <= 0 {
			r.StartTimeout = 10 * time.Minute
		}
		if r.StallTimeout <= 0 {
			r.StallTimeout = time.Minute
		}
		if r.RetryPeerAfter <= 0 {
			r.RetryPeerAfter = 30 * time.Second
		}
		if r.Log == nil {
			r.Log = zap.NewNop()
		}
		r.client = &http.Client{Transport: &http.Transport{
			TLSClientConfig:       r.TLS,
			ResponseHeaderTimeout: r.StartTimeout + 30*time.Second,
			MaxIdleConnsPerHost:   16,
			ForceAttemptHTTP2:     false,
		}}
	})
}

type pass struct {
	r    *Receiver
	job  Job
	plan *Plan
	dirs *staging.Dirs
	ents map[string]*entry

	nas     atomic.Int64
	written atomic.Int64
	mu      sync.Mutex
	peers   map[string]int64
	bad     map[string]*badPeer // peers given up on, until tried again
	failed  map[string]string   // why each peer was last given up on
	res     Result
	synced  map[string]bool // dirs that got new names
	prog    Progress
	lastRep time.Time
}

// Run brings job.Files into job.Mirror on job.Node. The files are servable
// to peers while they arrive. Temp files and resume are hubmirror's
// (hubmirror.OpenTemp: an earlier temp file is kept up to its trusted
// prefix after a sampled check against the NAS); this engine's temp files
// say each chunk is flushed before the next, so a killed receiver
// re-copies at most a chunk per file in flight. Run writes no ledger: a
// hubmirror Stage of the same block afterwards adopts what it placed
// (taking this pass's check against the NAS, Result.Checked) and copies
// whatever the relay could not deliver.
func (r *Receiver) Run(ctx context.Context, job Job) (Result, error) {
	r.init()
	if job.Parallel <= 0 {
		job.Parallel = 4
	}
	if job.Chunk <= 0 {
		job.Chunk = hubmirror.ChunkSize()
	}
	if hubmirror.ChunkSize()%job.Chunk != 0 {
		return Result{}, fmt.Errorf("relay: chunk %d does not divide hubmirror's %d", job.Chunk, hubmirror.ChunkSize())
	}
	refs := make([]FileRef, len(job.Files))
	sizes := make(map[string]int64, len(job.Files))
	for i, f := range job.Files {
		refs[i] = FileRef{Rel: f.Rel, Size: f.Size}
		sizes[f.Rel] = f.Size
	}
	nodes := job.Nodes
	if len(nodes) == 0 {
		nodes = []string{job.Node}
	}
	plan, err := NewPlan(nodes, refs)
	if err != nil {
		return Result{}, err
	}
	p := &pass{r: r, job: job, plan: plan, dirs: staging.NewDirs(job.Roots), peers: map[string]int64{}, bad: map[string]*badPeer{}, failed: map[string]string{}, synced: map[string]bool{}}
	defer p.dirs.Close()
	p.prog.FilesTotal = len(job.Files)
	for _, f := range job.Files {
		p.prog.BytesTotal += f.Size
	}
	if r.Registry != nil {
		p.ents = r.Registry.register(job.Key, sizes)
		defer r.Registry.finish(job.Key, p.ents)
	}
	order := append([]File(nil), job.Files...)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := plan.Route(order[i].Rel, job.Node).Hop, plan.Route(order[j].Rel, job.Node).Hop
		if a != b {
			return a < b
		}
		return order[i].Rel < order[j].Rel
	})
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(job.Parallel)
	for i := range order {
		if gctx.Err() != nil {
			break
		}
		f := order[i]
		g.Go(func() error { return p.file(gctx, f) })
	}
	err = g.Wait()
	if err == nil {
		err = ctx.Err()
	}
	for d := range p.synced {
		if dd, derr := p.dirs.Dir(d, false); derr == nil {
			if serr := dd.Sync(); serr != nil && err == nil {
				err = staging.ClassifyWrite(d, serr)
			}
		}
	}
	p.report(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	res := p.res
	res.Files = len(job.Files)
	res.FromNAS = p.nas.Load()
	res.Written = p.written.Load()
	res.FromPeers = copyMap(p.peers)
	if len(p.failed) > 0 {
		res.PeerFailures = map[string]string{}
		for k, v := range p.failed {
			res.PeerFailures[k] = v
		}
	}
	return res, err
}

func copyMap(m map[string]int64) map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func (p *pass) entry(rel string) *entry {
	if p.ents == nil {
		return nil
	}
	return p.ents[rel]
}

// nasReader reads one look at a NAS file (its identity when opened is
// the source's, for the check that it did not change while it was
// copied) and counts what is read.
type nasReader struct {
	src *hubmirror.Source
	n   *atomic.Int64
}

func (r nasReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := r.src.ReadAt(b, off)
	r.n.Add(int64(n))
	return n, err
}

// file brings f into the mirror: left as it is when it is in place and
// matches the NAS's samples, else received (from its peer or the NAS).
// A receipt during which the NAS file changed (its identity moved, or
// what came from the NAS alone no longer matches what was sampled before)
// is discarded and made again from a new look at the NAS file, at most
// hubmirror.SourceAttempts times, then refused (fault.SourceChanged).
func (p *pass) file(ctx context.Context, f File) (err error) {
	e := p.entry(f.Rel)
	defer func() {
		if err != nil && e != nil {
			e.fail()
		}
	}()
	dst := filepath.Join(p.job.Mirror, f.Rel)
	d, name, err := p.dirs.Parent(dst, true)
	if err != nil {
		return staging.ClassifyWrite(dst, err)
	}
	var changed *hubmirror.ChangedError
	for attempt := 1; attempt <= hubmirror.SourceAttempts; attempt++ {
		err = p.fromNAS(ctx, f, d, name, e)
		if !errors.As(err, &changed) || ctx.Err() != nil {
			return err
		}
		p.r.Log.Warn("relay: the NAS file changed while it was copied; copying it again", zap.String("path", f.Rel), zap.Int("attempt", attempt), zap.Error(err))
	}
	return hubmirror.RefuseChanged(dst, changed, hubmirror.SourceAttempts)
}

// fromNAS is one look at f's NAS file: sampled, compared with what is in
// place, and received when it must be.
func (p *pass) fromNAS(ctx context.Context, f File, d *staging.Dir, name string, e *entry) error {
	src, err := hubmirror.OpenSource(f.Src)
	if err != nil {
		return fmt.Errorf("relay: open NAS file %s (for %s): %w", f.Src, f.Rel, err)
	}
	defer src.Close()
	nas := nasReader{src, &p.nas}
	want, err := ledger.SampleHash(nas, f.Size)
	if err != nil {
		return fmt.Errorf("relay: sample NAS file %s: %w", f.Src, err)
	}
	if p.present(d, name, f, want, e) {
		return nil
	}
	got, err := p.receive(ctx, f, d, name, nas, want, e)
	if err != nil {
		return err
	}
	// Its identity now (the rename just moved its ctime), for the pass
	// that takes this check: what was written (its samples, and its
	// sha256 when it hashed to the blob's name).
	looked := time.Now()
	fst, lerr := d.Lstat(name)
	p.mu.Lock()
	if lerr == nil {
		p.checked(f.Rel, staging.Checked{Sampled: got.sampled, SHA256: got.sum, Stat: fst, At: looked})
	}
	p.prog.FilesDone++
	p.res.Received++
	p.synced[filepath.Dir(d.Join(name))] = true
	p.mu.Unlock()
	p.report(false)
	return nil
}

// present reports whether f is already in place (name in d) and matches
// the NAS's samples (want): then it is served as it is.
func (p *pass) present(d *staging.Dir, name string, f File, want string, e *entry) bool {
	looked := time.Now()
	st, err := d.Lstat(name)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != f.Size {
		return false
	}
	rf, err := d.OpenFile(name, unix.O_RDONLY, 0)
	if err != nil {
		return false
	}
	if got, err := ledger.SampleHash(rf, f.Size); err != nil || got != want {
		rf.Close()
		return false
	}
	if e != nil {
		e.done(rf)
	} else {
		rf.Close()
	}
	p.mu.Lock()
	p.checked(f.Rel, staging.Checked{Sampled: want, Stat: st, At: looked})
	p.res.Present++
	p.prog.FilesDone++
	p.prog.BytesDone += f.Size
	p.mu.Unlock()
	return true
}

// receive copies f from its route's peer (the NAS when it has none), and
// once more from the NAS when that peer sent wrong content, which gives
// the peer up for the block. A file that is not a content-addressed blob
// is only taken from a peer when verify is sampled: its hash cannot
// confirm it whole.
func (p *pass) receive(ctx context.Context, f File, d *staging.Dir, name string, nas nasReader, want string, e *entry) (received, error) {
	peer := p.plan.Route(f.Rel, p.job.Node).Source
	if p.job.SHA256 && f.WantSHA == "" {
		peer = "" // nothing but the NAS's own content could confirm it whole
	}
	for attempt := 0; ; attempt++ {
		got, err := p.copy(ctx, f, d, name, nas, want, peer, e)
		if err == nil {
			return got, nil
		}
		var bad *badContent
		if !errors.As(err, &bad) || got.peer == "" || attempt > 0 {
			return received{}, err
		}
		p.giveUp(got.peer, fmt.Sprintf("sent %s with wrong content (%v)", f.Rel, bad.why), true)
		p.mu.Lock()
		p.res.Refetched++
		p.mu.Unlock()
		p.r.Log.Warn("relay: a peer sent wrong content; fetching the file again from the NAS", zap.String("peer", got.peer), zap.String("path", f.Rel), zap.String("why", bad.why))
		peer = ""
	}
}

// checked records a file found matching the NAS; p.mu is held.
func (p *pass) checked(rel string, c staging.Checked) {
	if p.res.Checked == nil {
		p.res.Checked = map[string]staging.Checked{}
	}
	p.res.Checked[rel] = c
}

func (p *pass) addPeer(peer string, n int64) {
	p.mu.Lock()
	p.peers[peer] += n
	p.mu.Unlock()
	p.report(false)
}

func (p *pass) report(force bool) {
	if p.job.OnProgress == nil {
		return
	}
	p.mu.Lock()
	if !force && time.Since(p.lastRep) < 250*time.Millisecond {
		p.mu.Unlock()
		return
	}
	p.lastRep = time.Now()
	pr := p.prog
	pr.FromNAS = p.nas.Load()
	pr.FromPeers = copyMap(p.peers)
	p.mu.Unlock()
	p.job.OnProgress(pr)
}
