package relay

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/hubmirror"
	"github.com/sparklane/sparklane/internal/ledger"
	"github.com/sparklane/sparklane/internal/staging"
)

// File is one file a node brings into its mirror through the relay.
type File struct {
	// Rel is the mirror-relative path (the same on every node).
	Rel string
	// Src is the file on the NAS: the reader copies it, and every node
	// samples it to check what a peer sent.
	Src string
	// Size is the source's size.
	Size int64
	// Mode is the permission bits the staged file gets (0: 0644).
	Mode fs.FileMode
	// WantSHA is the content's sha256 (an LFS blob name), checked when
	// Job.SHA256 is set.
	WantSHA string
}

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
	// SHA256: check each file whole against WantSHA.
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
// to peers while they arrive. Temp files and resume follow hubmirror's
// rules (".NAME.sparklane-tmp", trusted up to hubmirror.TrustedPrefix after
// a sampled check against the NAS); this engine marks its temp files, so a
// killed receiver re-copies at most a chunk per file in flight. Run writes
// no ledger: a hubmirror Stage of the same block afterwards adopts what it
// placed (sampling it against the NAS) and copies whatever the relay could
// not deliver.
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
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (p *pass) entry(rel string) *entry {
	if p.ents == nil {
		return nil
	}
	return p.ents[rel]
}

// nasReader counts what is read from the NAS.
type nasReader struct {
	f *os.File
	n *atomic.Int64
}

func (r nasReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := r.f.ReadAt(b, off)
	r.n.Add(int64(n))
	return n, err
}

var errShortSource = errors.New("source ended early")

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
	srcF, err := os.Open(f.Src)
	if err != nil {
		return fmt.Errorf("relay: open NAS file %s (for %s): %w", f.Src, f.Rel, err)
	}
	defer srcF.Close()
	nas := nasReader{srcF, &p.nas}
	want, err := ledger.SampleHash(nas, f.Size)
	if err != nil {
		return fmt.Errorf("relay: sample NAS file %s: %w", f.Src, err)
	}
	// Already in place and matching the NAS's samples: serve it as it is.
	looked := time.Now()
	if st, err := d.Lstat(name); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == f.Size {
		if rf, err := d.OpenFile(name, unix.O_RDONLY, 0); err == nil {
			if got, err := ledger.SampleHash(rf, f.Size); err == nil && got == want {
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
				return nil
			}
			rf.Close()
		}
	}
	route := p.plan.Route(f.Rel, p.job.Node)
	peer := route.Source
	if p.job.SHA256 && f.WantSHA == "" {
		peer = "" // nothing but the NAS's own content could confirm it whole
	}
	var sum string // the received file's sha256, when it was hashed
	for attempt := 0; ; attempt++ {
		usedPeer, err := p.copy(ctx, f, d, name, nas, want, peer, e, &sum)
		if err == nil {
			break
		}
		var bad *badContent
		if errors.As(err, &bad) && usedPeer != "" && attempt == 0 {
			p.giveUp(usedPeer, fmt.Sprintf("sent %s with wrong content (%v)", f.Rel, bad.why), true)
			p.mu.Lock()
			p.res.Refetched++
			p.mu.Unlock()
			p.r.Log.Warn("relay: a peer sent wrong content; fetching the file again from the NAS", zap.String("peer", usedPeer), zap.String("path", f.Rel), zap.String("why", bad.why))
			peer = ""
			continue
		}
		return err
	}
	// Its identity now (the rename just moved its ctime), for the pass
	// that takes this check.
	looked = time.Now()
	fst, lerr := d.Lstat(name)
	p.mu.Lock()
	if lerr == nil {
		p.checked(f.Rel, staging.Checked{Sampled: want, SHA256: sum, Stat: fst, At: looked})
	}
	p.prog.FilesDone++
	p.res.Received++
	p.synced[filepath.Dir(dst)] = true
	p.mu.Unlock()
	p.report(false)
	return nil
}

// checked records a file found matching the NAS; p.mu is held.
func (p *pass) checked(rel string, c staging.Checked) {
	if p.res.Checked == nil {
		p.res.Checked = map[string]staging.Checked{}
	}
	p.res.Checked[rel] = c
}

type badContent struct{ why string }

func (b *badContent) Error() string { return b.why }

// badPeer is a peer given up on: when, and whether for wrong content
// (never tried again) or while one file tries it again.
type badPeer struct {
	at      time.Time
	wrong   bool
	probing bool
}

// giveUp stops using peer: for the rest of the block when it sent wrong
// content, else until RetryPeerAfter has passed.
func (p *pass) giveUp(peer, why string, wrong bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, known := p.bad[peer]
	if !known {
		b = &badPeer{}
		p.bad[peer] = b
	}
	b.at, b.probing, b.wrong = time.Now(), false, b.wrong || wrong
	if !known || p.failed[peer] != why {
		p.r.Log.Warn("relay: giving up on a peer; reading the NAS instead", zap.String("peer", peer), zap.String("why", why), zap.Bool("for_the_block", b.wrong))
	}
	p.failed[peer] = why
}

// peerOK reports whether a file may fetch from peer: one that was not
// given up on, or one that was gone or stalled long enough ago (one file
// at a time tries it again; peerBack clears it when that works).
func (p *pass) peerOK(peer string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, bad := p.bad[peer]
	if !bad {
		return true
	}
	if b.wrong || b.probing || time.Since(b.at) < p.r.RetryPeerAfter {
		return false
	}
	b.probing = true
	return true
}

// peerBack clears peer after a file came whole from it.
func (p *pass) peerBack(peer string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, bad := p.bad[peer]; bad {
		delete(p.bad, peer)
		p.r.Log.Info("relay: a peer given up on serves again", zap.String("peer", peer))
	}
}

// copy writes f to its temp name beside the final one, chunk by chunk
// (fdatasync, then servable), from peer when set and healthy, else from
// the NAS; checks it; renames it into place. It returns the peer any byte
// came from.
func (p *pass) copy(ctx context.Context, f File, d *staging.Dir, name string, nas nasReader, want, peer string, e *entry, sum *string) (usedPeer string, err error) {
	chunk := p.job.Chunk
	tmp := hubmirror.TempBase(name)
	dst := d.Join(name)
	var out *os.File
	var off int64
	// A temp file beside dst is an earlier copy of this destination (a
	// killed or cancelled pass, this engine's or hubmirror's). Its trusted
	// prefix (hubmirror.TrustedPrefix: all of it in the boot that wrote
	// it; after a reboot up to the chunk holding the last byte of this
	// engine's marked files, two flush intervals less of hubmirror's, whose
	// flush trails its copy) is kept after the same sampled check against
	// the NAS, and flushed before this pass writes on (hubmirror.TakeOver).
	// A mark made with another chunk size is dropped (durably) before this
	// pass marks the file with its own. (A copy refused for bad content
	// removed its temp.)
	if st, err := d.Lstat(tmp); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size > 0 {
		if of, err := d.OpenFile(tmp, os.O_RDWR, 0); err == nil {
			done := hubmirror.TrustedPrefix(of, min(st.Size, f.Size))
			if done > 0 {
				a, errA := ledger.SampleRegion(of, 0, done)
				b, errB := ledger.SampleRegion(nas, 0, done)
				if errA == nil && errB == nil && a == b && of.Truncate(done) == nil && (hubmirror.SyncedChunk(of) == chunk || hubmirror.ClearSyncedMark(of) == nil) && hubmirror.TakeOver(of) == nil {
					hubmirror.MarkSyncedChunk(of, chunk) // all it kept is flushed now
					out, off = of, done
					p.mu.Lock()
					p.res.Resumed += done
					p.mu.Unlock()
				}
			}
			if out == nil {
				of.Close()
			}
		}
	}
	if out == nil {
		of, err := d.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return "", staging.ClassifyWrite(dst, fmt.Errorf("create: %w", err))
		}
		// Every chunk is fdatasynced before the next is written: say so,
		// so a resume after a reboot keeps all but the last, and that it
		// is written in this boot, so a resume within it keeps all (best
		// effort).
		hubmirror.MarkSyncedChunk(of, chunk)
		hubmirror.MarkBoot(of)
		out = of
	}
	ok, keep := false, false
	defer func() {
		if !ok {
			out.Close()
			if !keep {
				d.Remove(tmp)
			}
		}
	}()
	fail := func(err error) (string, error) {
		if ctx.Err() != nil {
			keep = true // a cancel or kill leaves the fsynced chunks for a resume
		}
		return usedPeer, err
	}
	if e != nil {
		rf, err := d.OpenFile(tmp, unix.O_RDONLY, 0)
		if err != nil {
			return fail(staging.ClassifyWrite(dst, err))
		}
		e.start(rf, off)
	}
	var h hash.Hash
	if p.job.SHA256 && f.WantSHA != "" {
		h = sha256.New()
		if off > 0 {
			if _, err := io.Copy(h, io.NewSectionReader(out, 0, off)); err != nil {
				return fail(fmt.Errorf("relay: re-read %s: %w", d.Join(tmp), err))
			}
		}
	}
	var stream io.ReadCloser
	defer func() {
		if stream != nil {
			stream.Close()
		}
	}()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for off < f.Size {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		// From the peer: at the start, or again at a chunk boundary once
		// a peer given up on may be tried again (it restarted).
		if stream == nil && peer != "" && p.peerOK(peer) {
			s, err := p.open(ctx, peer, f.Rel, off)
			if err != nil {
				p.giveUp(peer, err.Error(), false)
			} else {
				stream = s
			}
		}
		// Chunks end on the chunk grid, also after resuming off it (all a
		// killed writer wrote): the mark trusts whole grid chunks.
		n := min(chunk-off%chunk, f.Size-off)
		for w := int64(0); w < n; {
			m := min(int64(len(buf)), n-w)
			var k int
			if stream != nil {
				var rerr error
				k, rerr = io.ReadFull(stream, buf[:m])
				if k > 0 {
					usedPeer = peer
					p.addPeer(peer, int64(k))
				}
				if rerr != nil {
					if ctx.Err() != nil {
						return fail(ctx.Err())
					}
					p.giveUp(peer, fmt.Sprintf("stream of %s ended at %d of %d bytes: %v", f.Rel, off+w+int64(k), f.Size, rerr), false)
					stream.Close()
					stream = nil
				}
			} else {
				var rerr error
				k, rerr = nas.ReadAt(buf[:m], off+w)
				if int64(k) < m {
					if rerr == nil || errors.Is(rerr, io.EOF) {
						rerr = errShortSource
					}
					return fail(fmt.Errorf("relay: read NAS file %s at %d: %w", f.Src, off+w, rerr))
				}
			}
			if k > 0 {
				if _, err := out.WriteAt(buf[:k], off+w); err != nil {
					return fail(staging.ClassifyWrite(dst, fmt.Errorf("write %s at %d: %w", d.Join(tmp), off+w, err)))
				}
				if h != nil {
					h.Write(buf[:k])
				}
				w += int64(k)
				p.written.Add(int64(k))
			}
		}
		if err := unix.Fdatasync(int(out.Fd())); err != nil {
			return fail(staging.ClassifyWrite(dst, fmt.Errorf("fdatasync %s: %w", d.Join(tmp), err)))
		}
		off += n
		if e != nil {
			e.advance(off)
		}
		p.mu.Lock()
		p.prog.BytesDone += n
		p.mu.Unlock()
		p.report(true)
		if p.job.OnChunk != nil {
			p.job.OnChunk(f.Rel, off)
		}
	}
	got, err := ledger.SampleHash(out, f.Size)
	if err != nil {
		return fail(fmt.Errorf("relay: sample %s: %w", d.Join(tmp), err))
	}
	var why string
	if got != want {
		why = "sampled hash differs from the NAS's"
	} else if h != nil {
		if *sum = hex.EncodeToString(h.Sum(nil)); *sum != f.WantSHA {
			why = "sha256 " + *sum + " is not its name " + f.WantSHA
			*sum = ""
		}
	}
	if why != "" {
		if usedPeer != "" {
			p.mu.Lock()
			p.prog.BytesDone -= f.Size
			p.mu.Unlock()
			return usedPeer, &badContent{why}
		}
		if h != nil && got == want {
			return fail(fault.Permanent(fault.ContentMismatch, fmt.Errorf("NAS file %s: %s: the NAS copy is corrupt, re-download it", f.Src, why)))
		}
		return fail(fmt.Errorf("relay: %s: copied content does not match the NAS file %s sampled before the copy (it changed while copying?): rerun", dst, f.Src))
	}
	mode := f.Mode
	if mode == 0 {
		mode = 0o644
	}
	// The resume marks are the temp file's, not the staged file's (the
	// fsync below makes their removal durable).
	hubmirror.DropMarks(out)
	if err := out.Chmod(mode); err != nil {
		return fail(staging.ClassifyWrite(dst, err))
	}
	if err := out.Sync(); err != nil {
		return fail(staging.ClassifyWrite(dst, err))
	}
	if err := out.Close(); err != nil {
		return fail(staging.ClassifyWrite(dst, err))
	}
	if err := d.Rename(tmp, name); err != nil {
		return fail(staging.ClassifyWrite(dst, err))
	}
	ok = true
	if e != nil {
		e.done(nil)
	}
	if stream != nil {
		p.peerBack(peer) // it sent the file to its end, and it was right
	}
	return usedPeer, nil
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 4<<20); return &b }}

func (p *pass) addPeer(peer string, n int64) {
	p.mu.Lock()
	p.peers[peer] += n
	p.mu.Unlock()
	p.report(false)
}

// stallReader ends a stream whose next bytes take longer than the stall
// timeout.
type stallReader struct {
	body   io.ReadCloser
	timer  *time.Timer
	stall  time.Duration
	cancel context.CancelFunc
}

func (s *stallReader) Read(b []byte) (int, error) {
	s.timer.Reset(s.stall)
	n, err := s.body.Read(b)
	s.timer.Stop() // time spent writing and fsyncing is not the peer's
	return n, err
}

func (s *stallReader) Close() error {
	s.timer.Stop()
	s.cancel()
	return s.body.Close()
}

// open asks peer for rel from off on.
func (p *pass) open(ctx context.Context, peer, rel string, off int64) (io.ReadCloser, error) {
	addr, ok := p.job.Peers[peer]
	if !ok || addr == "" {
		return nil, fmt.Errorf("no relay address for peer %s", peer)
	}
	u := url.URL{Scheme: "https", Host: addr, Path: "/v1/file", RawQuery: url.Values{
		"block": {p.job.Key}, "path": {rel}, "off": {strconv.FormatInt(off, 10)},
	}.Encode()}
	sctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, u.String(), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := p.r.client.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fetch %s from %s (%s): %w", rel, peer, addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("fetch %s from %s (%s): %s: %s", rel, peer, addr, resp.Status, b)
	}
	t := time.AfterFunc(p.r.StallTimeout, cancel)
	return &stallReader{body: resp.Body, timer: t, stall: p.r.StallTimeout, cancel: cancel}, nil
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
