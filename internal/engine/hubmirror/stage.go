package hubmirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// Stage brings spec.Repos from the NAS into Dst/hub and makes the exports.
// With opts.DryRun it returns the plan's counts and writes nothing. It is
// idempotent: a second pass re-samples each staged file against the ledger
// and the source and copies nothing.
func Stage(ctx context.Context, in Spec, opts staging.Options) (staging.Result, error) {
	start := time.Now()
	s, err := validate(in)
	if err != nil {
		return staging.Result{}, err
	}
	// The ledger is read (without making the mirror) while the plan
	// walks the NAS, so their I/O overlaps: the plan takes what it
	// already proved from it (known) once the snapshots are listed.
	dc := staging.NewDirs(s.Roots)
	defer dc.Close()
	ledc := make(chan *ledger.Ledger, 1)
	go func() { ledc <- readLedger(dc, s.mirror) }()
	loaded := sync.OnceValue(func() *ledger.Ledger { return <-ledc })
	defer loaded() // the read is done before dc is closed
	kn := func() *known {
		if l := loaded(); l != nil && !opts.Force {
			return &known{led: l, sha256: s.sha256}
		}
		return nil
	}
	p, err := buildPlan(ctx, s, kn)
	if err != nil {
		return staging.Result{}, err
	}
	led := loaded()
	if s.MinFree > 0 {
		// Only what must be written counts: a verify-only pass on a disk
		// the mirror filled needs no free space.
		if err := staging.CheckFreeToWrite(s.Dst, s.MinFree, p.TotalBytes, toWrite(s, p)); err != nil {
			return staging.Result{}, err
		}
	}
	st, err := newStager(s, p, opts, dc, led)
	if err != nil {
		return staging.Result{}, err
	}
	res, err := st.run(ctx)
	res.Seconds = time.Since(start).Seconds()
	if err != nil && !opts.DryRun && (errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)) {
		err = staging.ShortAfterFull(s.Dst, s.MinFree, p.TotalBytes, toWrite(s, p), err)
	}
	return res, err
}

// readLedger reads the mirror's ledger through dc, nil when there is none
// (or no mirror yet). A corrupt ledger is nil too: it is rebuilt by
// adoption (sampling), never trusted.
func readLedger(dc *staging.Dirs, mirror string) *ledger.Ledger {
	md, err := dc.Dir(mirror, false)
	if err != nil {
		return nil
	}
	l, err := ledger.LoadIn(md, LedgerName, Kind)
	if err != nil {
		return nil
	}
	return l
}

// toWrite estimates the bytes a pass must write: every planned file whose
// mirror copy is missing or of another size (a same-size file that fails
// its samples is re-copied too, and a full disk then fails that copy with
// NoSpace), less what a temp file an earlier copy left beside it holds.
// That temp file's bytes already count as used space on the disk: the
// copy resumes from them (openTemp keeps its trusted prefix) or, when they
// cannot be trusted, truncates them and reuses their room, so they are
// counted once, as used, and never again as still to write.
func toWrite(s *spec, p *plan) int64 {
	var n int64
	for _, it := range p.Files {
		dst := filepath.Join(s.mirror, it.Rel)
		fi, err := os.Lstat(dst)
		if err == nil && fi.Mode().IsRegular() && fi.Size() == it.Size {
			continue
		}
		n += it.Size
		tmp, err := os.Lstat(filepath.Join(filepath.Dir(dst), tmpBase(filepath.Base(dst))))
		if err == nil && tmp.Mode().IsRegular() {
			n -= min(tmp.Size(), it.Size)
		}
	}
	return n
}

type stager struct {
	s    *spec
	p    *plan
	opts staging.Options

	mu     sync.Mutex // guards led, res, dirs, lastSave
	led    *ledger.Ledger
	res    staging.Result
	dirs   map[string]bool // directories that got new names (fsynced at the end)
	dc     *staging.Dirs   // destination directories, opened beneath the roots
	saved  time.Time
	dirty  bool
	resume map[string]int64
	noCFR  bool
	prog   *tracker
	temps  tempNames
	// unsynced: small files were renamed into place without fsync; the
	// filesystem is synced before the ledger is saved.
	unsynced bool
	// sealable: the mirror is on a local filesystem (see seal.go);
	// written: the content-named blobs this pass wrote, sealed at the
	// end.
	sealable  bool
	written   []written
	nas       atomic.Int64 // bytes read from the source (Result.NASRead)
	madeLinks []linkItem   // links this pass made, sealed at the end
}

// newStager opens the mirror through dc (made unless dry); led is the
// ledger Stage read from it, nil for none.
func newStager(s *spec, p *plan, opts staging.Options, dc *staging.Dirs, led *ledger.Ledger) (*stager, error) {
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	// Open the mirror (made unless dry) and the exports' parents beneath the
	// roots now: a link out of them fails the pass before any write, and a
	// dry run reports it too.
	md, err := dc.Dir(s.mirror, !opts.DryRun)
	if err != nil && !(opts.DryRun && missing(err)) {
		return nil, err
	}
	for _, e := range s.Exports {
		if _, err := dc.Dir(filepath.Dir(filepath.Clean(e.Path)), false); err != nil && !missing(err) {
			return nil, err
		}
	}
	if led == nil {
		led = ledger.New(Kind)
	}
	st := &stager{s: s, p: p, opts: opts, led: led, dirs: map[string]bool{}, dc: dc, resume: map[string]int64{}}
	st.sealable = md != nil && sealableDir(md)
	if opts.Resume != nil {
		for _, f := range opts.Resume.InFlight {
			st.resume[f.Path] = f.Offset
		}
	}
	st.res = staging.Result{
		SkippedFiles: p.SkippedFiles, SkippedBytes: p.SkippedBytes,
		Links: len(p.Links), TotalFiles: len(p.Files), TotalBytes: p.TotalBytes,
		DryRun: opts.DryRun,
	}
	st.prog = &tracker{cb: opts.OnProgress, inflight: map[string]int64{}}
	st.prog.p.FilesTotal = len(p.Files)
	st.prog.p.BytesTotal = p.TotalBytes
	return st, nil
}

func (st *stager) run(ctx context.Context) (staging.Result, error) {
	if err := st.files(ctx); err != nil {
		return st.finish(err)
	}
	if !st.opts.DryRun {
		if err := st.links(); err != nil {
			return st.finish(err)
		}
	}
	if err := st.exports(); err != nil {
		return st.finish(err)
	}
	return st.finish(nil)
}

// finish saves the ledger (also after an error, so finished files are not
// re-checked from scratch) and syncs the dirs that got new names.
func (st *stager) finish(err error) (staging.Result, error) {
	st.prog.emit(true)
	st.res.NASRead = st.nas.Load()
	if st.opts.DryRun {
		return st.res, err
	}
	if err == nil {
		st.sealWritten(st.written)
		st.sealMadeLinks()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for d := range st.dirs {
		if dd, err := st.dc.Dir(d, false); err == nil {
			dd.Sync()
		}
	}
	if st.dirty {
		if serr := st.saveLocked(); serr != nil && err == nil {
			err = serr
		}
	}
	return st.res, err
}

// files runs the per-file work: opts.Parallel large files in flight, and
// beside them smallWorkers×Parallel small ones (latency-bound). The first
// error cancels the rest (whose temp files stay for a resume).
func (st *stager) files(ctx context.Context) error {
	var big, small []*fileItem
	for _, it := range st.p.Files {
		if it.Size <= smallMax {
			small = append(small, it)
		} else {
			big = append(big, it)
		}
	}
	// The two pools run side by side in one group: the first failure
	// cancels both, and is what Wait returns (the cancellations it causes
	// come later).
	g, gctx := errgroup.WithContext(ctx)
	pool := func(items []*fileItem, workers int) func() error {
		return func() error {
			return forEach(gctx, len(items), workers, func(ctx context.Context, i int) error {
				return st.file(ctx, items[i])
			})
		}
	}
	g.Go(pool(small, smallWorkers*st.opts.Parallel))
	g.Go(pool(big, st.opts.Parallel))
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// file brings one file up to date: verified (ledger + samples agree),
// adopted (already there, matches the source) or copied. A copy whose
// source changed while it was read is discarded and made again from a
// new look at the source, at most SourceAttempts times (source.go).
func (st *stager) file(ctx context.Context, it *fileItem) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dst := st.s.mirror + string(filepath.Separator) + it.Rel // both clean
	if ent, ok := st.sealed(it, dst); ok {
		// Proved whole before and unchanged since: nothing to read.
		return st.intact(it, dst, stVerified, ent)
	}
	if it.known {
		if err := st.needSource(it); err != nil {
			return err
		}
	}
	if c, ok := st.opts.Checked[it.Rel]; ok && !st.opts.Force {
		// The relay compared it with the NAS moments ago.
		if state, ent, ok := st.checkedBy(it, dst, c); ok {
			return st.intact(it, dst, state, ent)
		}
	}
	var changed *ChangedError
	for attempt := 1; attempt <= SourceAttempts; attempt++ {
		err := st.fromSource(ctx, it, dst)
		if !errors.As(err, &changed) || ctx.Err() != nil {
			return err
		}
	}
	return RefuseChanged(dst, changed, SourceAttempts)
}

// source is one look at a file's source: a small file's whole content
// (data), or a large file open for its copy (f); either way its size and
// sampled hash.
type source struct {
	data   []byte
	f      *Source
	size   int64
	sample string
}

// open reads its source whole when it is small, else opens it and samples
// it. The caller closes what it returns.
func (st *stager) open(it *fileItem) (*source, error) {
	if it.Size <= smallMax {
		d, ok, err := readSmall(it.Src)
		if err != nil {
			return nil, sourceErr(it, err)
		}
		if ok {
			st.nas.Add(int64(len(d)))
			return &source{data: d, size: int64(len(d)), sample: ledger.SampleBytes(d)}, nil
		}
	}
	f, err := OpenSource(it.Src)
	if err != nil {
		return nil, sourceErr(it, err)
	}
	src := &source{f: f, size: f.Size()}
	if src.sample, err = sampleOpen(f.File, src.size); err != nil {
		f.Close()
		return nil, sourceErr(it, err)
	}
	st.nas.Add(ledger.SampledBytes(src.size))
	return src, nil
}

func (s *source) close() {
	if s.f != nil {
		s.f.Close()
	}
}

// fromSource checks the staged file against one look at the source and
// copies the source when it must.
func (st *stager) fromSource(ctx context.Context, it *fileItem, dst string) error {
	src, err := st.open(it)
	if err != nil {
		return err
	}
	defer src.close()
	state, ent, err := st.check(it, dst, src.size, src.sample, src.data)
	if err != nil {
		return err
	}
	switch state {
	case stVerified, stAdopted:
		return st.intact(it, dst, state, ent)
	}
	if st.opts.DryRun {
		st.mu.Lock()
		st.res.CopiedFiles++
		st.res.CopiedBytes += src.size
		st.mu.Unlock()
		st.prog.done(it.Rel, src.size)
		return nil
	}
	if src.data != nil {
		if err := st.opts.Pacer.Wait(ctx, int64(len(src.data))); err != nil {
			return err
		}
		ent, err = st.writeSmall(it, src.data, src.sample, dst)
	} else {
		ent, err = st.copy(ctx, it, src.f, src.sample, dst)
	}
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.res.CopiedFiles++
	st.led.Entries[it.Rel] = ent
	st.dirty = true
	st.dirs[filepath.Dir(dst)] = true
	st.mu.Unlock()
	st.prog.done(it.Rel, 0)
	return st.maybeSave()
}

// intact records a staged file found good (verified or adopted) with its
// ledger entry ent.
func (st *stager) intact(it *fileItem, dst string, state fileState, ent ledger.Entry) error {
	if !st.opts.DryRun {
		// A temp file a cancelled copy left beside it is garbage now.
		if d, name, err := st.dc.Parent(dst, false); err == nil && st.temps.has(d, tmpBase(name)) {
			d.Remove(tmpBase(name))
		}
	}
	st.mu.Lock()
	if state == stVerified {
		st.res.VerifiedFiles++
	} else {
		st.res.AdoptedFiles++
	}
	if old, known := st.led.Entries[it.Rel]; !st.opts.DryRun && (!known || !sameEntry(old, ent)) {
		st.led.Entries[it.Rel] = ent
		st.dirty = true
	}
	st.mu.Unlock()
	st.prog.done(it.Rel, ent.Size)
	return st.maybeSave()
}

// writeSmall writes a small file from memory to its temp name and renames
// it into place. It is not fsynced here: saveLedger syncs the filesystem
// before any ledger that lists it is written.
func (st *stager) writeSmall(it *fileItem, data []byte, sample, dst string) (ledger.Entry, error) {
	d, name, err := st.dc.Parent(dst, true)
	if err != nil {
		return ledger.Entry{}, classifyWrite(dst, err)
	}
	ent := ledger.Entry{Size: int64(len(data)), Sampled: sample, Source: it.SrcRel, VerifiedAt: time.Now().UTC()}
	if st.s.sha256 || it.WantSHA != "" {
		// The bytes read are the bytes written (readSmall saw the source
		// unchanged while it read them): a blob whose bytes are not its
		// name is a corrupt NAS copy, refused before anything is written.
		h := sha256.Sum256(data)
		ent.SHA256 = hex.EncodeToString(h[:])
		if it.WantSHA != "" && ent.SHA256 != it.WantSHA {
			return ledger.Entry{}, RefuseCorrupt(dst, it.Src, it.WantSHA, ent.SHA256)
		}
	}
	mode := it.Mode
	if mode == 0 {
		mode = 0o644
	}
	tmp := tmpBase(name)
	fd, err := d.OpenRaw(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o600)
	if err != nil {
		return ledger.Entry{}, classifyWrite(dst, fmt.Errorf("create: %w", err))
	}
	for off := 0; off < len(data) && err == nil; {
		var n int
		n, err = unix.Pwrite(fd, data[off:], int64(off))
		if err == unix.EINTR {
			err = nil
		}
		off += n
	}
	if err == nil {
		err = unix.Fchmod(fd, uint32(mode))
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.Rename(tmp, name)
	}
	if err != nil {
		d.Remove(tmp)
		return ledger.Entry{}, classifyWrite(dst, fmt.Errorf("write %s: %w", d.Join(tmp), err))
	}
	st.mu.Lock()
	st.unsynced = true
	st.res.CopiedBytes += int64(len(data))
	if _, ok := contentName(it.Rel); ok {
		st.written = append(st.written, written{rel: it.Rel})
	}
	st.mu.Unlock()
	st.prog.add(int64(len(data)))
	return ent, nil
}

// tempNames knows which temp names exist in the mirror's directories,
// listing each directory once: a verify-only pass over thousands of
// files then costs no failing unlink per file.
type tempNames struct {
	mu   sync.Mutex
	dirs map[string]*dirTemps
}

type dirTemps struct {
	once  sync.Once
	names map[string]bool
	err   error
}

// has reports whether name exists in d; when d cannot be listed it
// answers true, so the caller's remove still runs.
func (t *tempNames) has(d *staging.Dir, name string) bool {
	t.mu.Lock()
	if t.dirs == nil {
		t.dirs = map[string]*dirTemps{}
	}
	dt := t.dirs[d.Path]
	if dt == nil {
		dt = &dirTemps{}
		t.dirs[d.Path] = dt
	}
	t.mu.Unlock()
	dt.once.Do(func() {
		names, err := d.Names()
		if err != nil {
			dt.err = err
			return
		}
		dt.names = map[string]bool{}
		for _, n := range names {
			if strings.HasSuffix(n, tmpSuffix) {
				dt.names[n] = true
			}
		}
	})
	return dt.err != nil || dt.names[name]
}

// sameEntry compares ledger entries ignoring VerifiedAt, so a pass that
// only verifies leaves the ledger file untouched.
func sameEntry(a, b ledger.Entry) bool {
	return a.Size == b.Size && a.Sampled == b.Sampled && a.SHA256 == b.SHA256 && a.Source == b.Source && sameSeal(a.Seal, b.Seal)
}

func sameSeal(a, b *ledger.Seal) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

type fileState int

const (
	stCopy fileState = iota
	stVerified
	stAdopted
)

// check decides what a staged file needs without writing. The ledger is
// trusted only when the staged file's samples and the source's samples
// both still match it. data is the source's whole content when it was read
// whole (a small file), so a blob can be proved against its name and
// sealed (seal.go). A content-addressed blob (it.WantSHA) is good only
// with its full hash equal to its name, from the ledger (the hash taken as
// it was copied) or, once, from reading the staged file whole: sampling
// alone would take a copy torn between the samples for good.
func (st *stager) check(it *fileItem, dst string, size int64, srcSample string, data []byte) (fileState, ledger.Entry, error) {
	d, name, err := st.dc.Parent(dst, false)
	if err != nil {
		if missing(err) {
			return stCopy, ledger.Entry{}, nil
		}
		return stCopy, ledger.Entry{}, err // a link out of the roots
	}
	looked := sealClock()
	dfi, err := d.Lstat(name)
	if err != nil || !isReg(dfi) || dfi.Size != size {
		return stCopy, ledger.Entry{}, nil
	}
	now := time.Now().UTC()
	ent := ledger.Entry{Size: size, Sampled: srcSample, Source: it.SrcRel, VerifiedAt: now}
	if st.opts.Force {
		return st.checkWhole(it, d, name, ent)
	}
	dstSample, err := sampleDst(d, name, size)
	if err != nil || dstSample != srcSample {
		return stCopy, ent, nil
	}
	st.mu.Lock()
	old, known := st.led.Entries[it.Rel]
	st.mu.Unlock()
	trusted := known && old.Size == size && old.Sampled == dstSample && old.Source == it.SrcRel
	if trusted && (it.WantSHA == "" || old.SHA256 == it.WantSHA) {
		ent.SHA256 = old.SHA256
	} else if it.WantSHA != "" {
		trusted = false // a ledger without the blob's hash, or with another
	}
	if (st.s.sha256 || it.WantSHA != "") && ent.SHA256 == "" {
		// Checked whole once: against its LFS name, else (verify =
		// "sha256") the source.
		sum, err := st.stagedSHA(it, d, name, size, data)
		if err != nil {
			return 0, ent, err
		}
		if sum == "" {
			return stCopy, ent, nil
		}
		ent.SHA256 = sum
	}
	if proved(it.Rel, size, data, ent.SHA256) {
		// The identity looked at before the content was read: a change
		// since then moves it, and the next pass reads again.
		ent.Seal = st.sealFor(dfi, looked)
	}
	if trusted {
		return stVerified, ent, nil
	}
	return stAdopted, ent, nil
}

// checkWhole is check under --stage=force: whole contents, source against
// staged, and a content-addressed blob against its name.
func (st *stager) checkWhole(it *fileItem, d *staging.Dir, name string, ent ledger.Entry) (fileState, ledger.Entry, error) {
	a, err := fullSHA(it.Src)
	if err != nil {
		return 0, ent, sourceErr(it, err)
	}
	st.nas.Add(ent.Size)
	b, err := fullSHAIn(d, name)
	if err != nil || a != b || (it.WantSHA != "" && a != it.WantSHA) {
		return stCopy, ent, nil
	}
	ent.SHA256 = a
	return stVerified, ent, nil
}

// stagedSHA hashes the staged file name in d whole and returns the hash
// when it is what the file must be (its LFS name, else the source's full
// hash), "" when it is not (or cannot be read). A small file whose whole
// samples matched the source's is the source's bytes, data: they are
// hashed instead of reading it again.
func (st *stager) stagedSHA(it *fileItem, d *staging.Dir, name string, size int64, data []byte) (string, error) {
	var sum string
	if data != nil && int64(len(data)) == size && ledger.SampledBytes(size) == size {
		h := sha256.Sum256(data)
		sum = hex.EncodeToString(h[:])
	} else {
		var err error
		if sum, err = fullSHAIn(d, name); err != nil {
			return "", nil
		}
	}
	want := it.WantSHA
	if want == "" {
		var err error
		if want, err = fullSHA(it.Src); err != nil {
			return "", sourceErr(it, err)
		}
		st.nas.Add(size)
	}
	if sum != want {
		return "", nil
	}
	return sum, nil
}

func sourceErr(it *fileItem, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return fault.Permanent(fault.SourceMissing, fmt.Errorf("cannot read source file %s (for %s): %w: give the worker's user read access", it.Src, it.Rel, err))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fault.Permanent(fault.SourceMissing, fmt.Errorf("source file %s (for %s) vanished: %w: check the NAS", it.Src, it.Rel, err))
	}
	return fmt.Errorf("read source file %s (for %s): %w", it.Src, it.Rel, err)
}

func fullSHA(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	return fullSHAFile(f)
}

// fullSHAIn hashes the staged file name in d whole (not following a link).
func fullSHAIn(d *staging.Dir, name string) (string, error) {
	f, err := d.OpenFile(name, unix.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	return fullSHAFile(f)
}

// fullSHAFile hashes f whole and closes it.
func fullSHAFile(f *os.File) (string, error) {
	path := f.Name()
	defer f.Close()
	h := sha256.New()
	// The copy buffers' pool: a fresh 4 MiB buffer per file made a full
	// verify of many small files twice as slow as rsync --checksum.
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, *bp); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// classifyWrite turns what retrying cannot fix (disk full, read-only,
// permission denied, a file in the way) into a permanent fault naming the
// path: see staging.ClassifyWrite.
func classifyWrite(path string, err error) error { return staging.ClassifyWrite(path, err) }

// maybeSave persists the ledger at most every 2 s while files complete, so
// a kill -9 loses little (lost entries are re-adopted by sampling anyway).
func (st *stager) maybeSave() error {
	if st.opts.DryRun {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.dirty || time.Since(st.saved) < 2*time.Second {
		return nil
	}
	st.saved = time.Now()
	return st.saveLocked()
}

// saveLocked syncs what small files were written unsynced, then saves the
// ledger, so the ledger never lists a file that is not on disk.
func (st *stager) saveLocked() error {
	md, err := st.dc.Dir(st.s.mirror, true)
	if err != nil {
		return classifyWrite(st.s.mirror, err)
	}
	if st.unsynced {
		if err := md.Syncfs(); err != nil {
			return classifyWrite(st.s.mirror, err)
		}
		st.unsynced = false
	}
	if err := st.led.SaveIn(md, LedgerName); err != nil {
		return classifyWrite(md.Join(LedgerName), err)
	}
	st.dirty = false
	return nil
}

// links makes every snapshot entry a relative symlink into the mirror's
// blobs; correct links are left alone, wrong ones replaced atomically
// (temp link + rename), missing ones created (symlink(2) is atomic). Entries
// are handled in parallel: on a cold tree this is one lstat each.
func (st *stager) links() error {
	return forEach(context.Background(), len(st.p.Links), metaWorkers, func(_ context.Context, i int) error {
		return st.link(st.p.Links[i])
	})
}

func (st *stager) link(l linkItem) error {
	path := filepath.Join(st.s.mirror, l.Rel)
	dir := filepath.Dir(path)
	d, name, err := st.dc.Parent(path, true)
	if err != nil {
		return classifyWrite(path, err)
	}
	looked := sealClock()
	fi, err := d.Lstat(name)
	switch {
	case err == nil && isLink(fi):
		if st.linkSealed(l, fi) {
			return nil
		}
		if t, err := d.Readlink(name); err == nil && t == l.Target {
			st.sealLink(l, fi, looked)
			return nil
		}
	case err == nil && isDir(fi):
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("mirror entry %s is a directory where a link to %s belongs: remove it", path, l.Target))
	case missing(err):
		if err := d.Symlink(l.Target, name); err == nil {
			st.noteDir(dir)
			st.madeLink(l)
			return nil
		} else if !errors.Is(err, fs.ErrExist) {
			return classifyWrite(path, err)
		}
	case err != nil:
		return classifyWrite(path, err)
	}
	tmp := tmpBase(name)
	d.Remove(tmp)
	if err := d.Symlink(l.Target, tmp); err != nil {
		return classifyWrite(path, err)
	}
	if err := d.Rename(tmp, name); err != nil {
		d.Remove(tmp)
		return classifyWrite(path, fmt.Errorf("rename link into place: %w", err))
	}
	st.noteDir(dir)
	st.madeLink(l)
	return nil
}

func (st *stager) noteDir(dir string) {
	st.mu.Lock()
	st.dirs[dir] = true
	st.mu.Unlock()
}

// tracker throttles progress to ≤ 4 calls a second, except at flushes,
// where the fsynced offset must reach the heartbeat.
type tracker struct {
	mu       sync.Mutex
	cb       func(staging.Progress)
	p        staging.Progress
	inflight map[string]int64
	last     time.Time
}

func (t *tracker) add(n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.p.BytesDone += n
	t.emitLocked(false)
}

func (t *tracker) offset(rel string, off, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.p.BytesDone += n
	t.inflight[rel] = off
	t.emitLocked(true)
}

// undo takes back n bytes a failed copy of rel counted: it is made again.
func (t *tracker) undo(rel string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.p.BytesDone -= n
	delete(t.inflight, rel)
}

func (t *tracker) done(rel string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.p.BytesDone += n
	t.p.FilesDone++
	delete(t.inflight, rel)
	t.emitLocked(false)
}

func (t *tracker) emit(force bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.emitLocked(force)
}

func (t *tracker) emitLocked(force bool) {
	if t.cb == nil || (!force && time.Since(t.last) < 250*time.Millisecond) {
		return
	}
	t.last = time.Now()
	p := t.p
	p.InFlight = make([]staging.FileOffset, 0, len(t.inflight))
	for k, v := range t.inflight {
		p.InFlight = append(p.InFlight, staging.FileOffset{Path: k, Offset: v})
	}
	sort.Slice(p.InFlight, func(i, j int) bool { return p.InFlight[i].Path < p.InFlight[j].Path })
	t.cb(p)
}
