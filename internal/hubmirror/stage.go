package hubmirror

import (
	"bytes"
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
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/ledger"
	"github.com/sparklane/sparklane/internal/staging"
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
	p, err := buildPlan(ctx, s)
	if err != nil {
		return staging.Result{}, err
	}
	if err := staging.CheckFree(s.Dst, s.MinFree); err != nil {
		return staging.Result{}, err
	}
	st, err := newStager(s, p, opts)
	if err != nil {
		return staging.Result{}, err
	}
	res, err := st.run(ctx)
	res.Seconds = time.Since(start).Seconds()
	return res, err
}

type stager struct {
	s    *spec
	p    *plan
	opts staging.Options

	mu     sync.Mutex // guards led, res, dirs, lastSave
	led    *ledger.Ledger
	res    staging.Result
	dirs   map[string]bool
	saved  time.Time
	dirty  bool
	resume map[string]int64
	noCFR  bool
	prog   *tracker
	// unsynced: small files were renamed into place without fsync; the
	// filesystem is synced before the ledger is saved.
	unsynced bool
}

func newStager(s *spec, p *plan, opts staging.Options) (*stager, error) {
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	led, err := ledger.Load(filepath.Join(s.mirror, LedgerName), Kind)
	if err != nil {
		// A corrupt ledger is rebuilt by adoption (sampling), never trusted.
		led = ledger.New(Kind)
	}
	st := &stager{s: s, p: p, opts: opts, led: led, dirs: map[string]bool{}, resume: map[string]int64{}}
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

func (st *stager) ledgerPath() string { return filepath.Join(st.s.mirror, LedgerName) }

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
	if st.opts.DryRun {
		return st.res, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for d := range st.dirs {
		syncDir(d)
	}
	if st.dirty {
		if serr := st.saveLocked(); serr != nil && err == nil {
			err = serr
		}
	}
	return st.res, err
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// files runs the per-file work: opts.Parallel large files in flight, and
// beside them smallWorkers×Parallel small ones (latency-bound). The first
// error cancels the rest (whose temp files stay for a resume).
func (st *stager) files(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var big, small []*fileItem
	for _, it := range st.p.Files {
		if it.Size <= smallMax {
			small = append(small, it)
		} else {
			big = append(big, it)
		}
	}
	var once sync.Once
	var first error
	pool := func(items []*fileItem, workers int) {
		parallelDo(len(items), workers, func(i int) {
			if ctx.Err() != nil {
				return
			}
			if err := st.file(ctx, items[i]); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); pool(small, smallWorkers*st.opts.Parallel) }()
	pool(big, st.opts.Parallel)
	wg.Wait()
	if first != nil {
		// Prefer the real failure over the cancellations it caused.
		return first
	}
	return ctx.Err()
}

// file brings one file up to date: verified (ledger + samples agree),
// adopted (already there, matches the source) or copied.
func (st *stager) file(ctx context.Context, it *fileItem) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dst := filepath.Join(st.s.mirror, it.Rel)
	var data []byte // whole content of a small file
	var src *os.File
	var size int64
	var srcSample string
	if it.Size <= smallMax {
		d, ok, err := readSmall(it.Src)
		if err != nil {
			return sourceErr(it, err)
		}
		if ok {
			data, size = d, int64(len(d))
			if srcSample, err = ledger.SampleHash(bytes.NewReader(data), size); err != nil {
				return sourceErr(it, err)
			}
		}
	}
	if data == nil {
		f, err := os.Open(it.Src)
		if err != nil {
			return sourceErr(it, err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return sourceErr(it, err)
		}
		src, size = f, fi.Size()
		if srcSample, err = sampleOpen(src, size); err != nil {
			return sourceErr(it, err)
		}
	}
	state, ent, err := st.check(it, dst, size, srcSample)
	if err != nil {
		return err
	}
	switch state {
	case stVerified, stAdopted:
		if !st.opts.DryRun {
			os.Remove(tmpName(dst))
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
		st.prog.done(it.Rel, size)
		return st.maybeSave()
	}
	if st.opts.DryRun {
		st.mu.Lock()
		st.res.CopiedFiles++
		st.res.CopiedBytes += size
		st.mu.Unlock()
		st.prog.done(it.Rel, size)
		return nil
	}
	if data != nil {
		ent, err = st.writeSmall(it, data, srcSample, dst)
	} else {
		ent, err = st.copy(ctx, it, src, size, srcSample, dst)
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

// writeSmall writes a small file from memory to its temp name and renames
// it into place. It is not fsynced here: saveLedger syncs the filesystem
// before any ledger that lists it is written.
func (st *stager) writeSmall(it *fileItem, data []byte, sample, dst string) (ledger.Entry, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return ledger.Entry{}, classifyWrite(dst, err)
	}
	ent := ledger.Entry{Size: int64(len(data)), Sampled: sample, Source: it.SrcRel, VerifiedAt: time.Now().UTC()}
	if st.s.sha256 {
		h := sha256.Sum256(data)
		ent.SHA256 = hex.EncodeToString(h[:])
		if it.WantSHA != "" && ent.SHA256 != it.WantSHA {
			return ledger.Entry{}, fault.Permanent(fault.ContentMismatch, fmt.Errorf("source blob %s: content sha256 is %s, not its name %s: the NAS copy is corrupt, re-download it", it.Src, ent.SHA256, it.WantSHA))
		}
	}
	mode := it.Mode
	if mode == 0 {
		mode = 0o644
	}
	tmp := tmpName(dst)
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return ledger.Entry{}, classifyWrite(dst, fmt.Errorf("create %s: %w", tmp, err))
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
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return ledger.Entry{}, classifyWrite(dst, fmt.Errorf("write %s: %w", tmp, err))
	}
	st.mu.Lock()
	st.unsynced = true
	st.res.CopiedBytes += int64(len(data))
	st.mu.Unlock()
	st.prog.add(int64(len(data)))
	return ent, nil
}

// sameEntry compares ledger entries ignoring VerifiedAt, so a pass that
// only verifies leaves the ledger file untouched.
func sameEntry(a, b ledger.Entry) bool {
	return a.Size == b.Size && a.Sampled == b.Sampled && a.SHA256 == b.SHA256 && a.Source == b.Source
}

type fileState int

const (
	stCopy fileState = iota
	stVerified
	stAdopted
)

// check decides what a staged file needs without writing. The ledger is
// trusted only when the staged file's samples and the source's samples
// both still match it.
func (st *stager) check(it *fileItem, dst string, size int64, srcSample string) (fileState, ledger.Entry, error) {
	dfi, err := os.Lstat(dst)
	if err != nil || !dfi.Mode().IsRegular() || dfi.Size() != size {
		return stCopy, ledger.Entry{}, nil
	}
	now := time.Now().UTC()
	ent := ledger.Entry{Size: size, Sampled: srcSample, Source: it.SrcRel, VerifiedAt: now}
	if st.opts.Force {
		// --stage=force: whole contents, source against staged.
		a, err := fullSHA(it.Src)
		if err != nil {
			return 0, ent, sourceErr(it, err)
		}
		b, err := fullSHA(dst)
		if err != nil || a != b {
			return stCopy, ent, nil
		}
		ent.SHA256 = a
		return stVerified, ent, nil
	}
	dstSample, err := sampleDst(dst, size)
	if err != nil || dstSample != srcSample {
		return stCopy, ent, nil
	}
	st.mu.Lock()
	old, known := st.led.Entries[it.Rel]
	st.mu.Unlock()
	trusted := known && old.Size == size && old.Sampled == dstSample && old.Source == it.SrcRel
	if trusted {
		ent.SHA256 = old.SHA256
	}
	if st.s.sha256 && ent.SHA256 == "" {
		// Under verify = "sha256" a file the ledger has no full hash for is
		// checked whole once: against its LFS name, else the source.
		sum, err := fullSHA(dst)
		if err != nil {
			return stCopy, ent, nil
		}
		want := it.WantSHA
		if want == "" {
			if want, err = fullSHA(it.Src); err != nil {
				return 0, ent, sourceErr(it, err)
			}
		}
		if sum != want {
			return stCopy, ent, nil
		}
		ent.SHA256 = sum
	}
	if trusted {
		return stVerified, ent, nil
	}
	return stAdopted, ent, nil
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
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 4<<20)
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// classifyWrite turns ENOSPC into a permanent NoSpace naming the path.
func classifyWrite(path string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fault.Permanent(fault.NoSpace, fmt.Errorf("%s: disk full: %w: free space on the node and rerun (finished files are kept and not copied again)", path, err))
	}
	return err
}

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
	if err := os.MkdirAll(st.s.mirror, 0o755); err != nil {
		return classifyWrite(st.s.mirror, err)
	}
	if st.unsynced {
		d, err := os.Open(st.s.mirror)
		if err != nil {
			return fmt.Errorf("open %s: %w", st.s.mirror, err)
		}
		err = unix.Syncfs(int(d.Fd()))
		d.Close()
		if err != nil {
			return classifyWrite(st.s.mirror, fmt.Errorf("syncfs %s: %w", st.s.mirror, err))
		}
		st.unsynced = false
	}
	if err := st.led.Save(st.ledgerPath()); err != nil {
		return classifyWrite(st.ledgerPath(), err)
	}
	st.dirty = false
	return nil
}

// links makes every snapshot entry a relative symlink into the mirror's
// blobs; correct links are left alone, wrong ones replaced atomically
// (temp link + rename), missing ones created (symlink(2) is atomic). Entries
// are handled in parallel: on a cold tree this is one lstat each.
func (st *stager) links() error {
	errs := make([]error, len(st.p.Links))
	var mkdirs sync.Map
	parallelDo(len(st.p.Links), metaWorkers, func(i int) {
		errs[i] = st.link(st.p.Links[i], &mkdirs)
	})
	return firstErr(errs)
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (st *stager) link(l linkItem, mkdirs *sync.Map) error {
	path := filepath.Join(st.s.mirror, l.Rel)
	dir := filepath.Dir(path)
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		if t, err := os.Readlink(path); err == nil && t == l.Target {
			return nil
		}
	case err == nil && fi.IsDir():
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("mirror entry %s is a directory where a link to %s belongs: remove it", path, l.Target))
	case errors.Is(err, fs.ErrNotExist):
		if _, done := mkdirs.Load(dir); !done {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return classifyWrite(path, err)
			}
			mkdirs.Store(dir, true)
		}
		if err := os.Symlink(l.Target, path); err == nil {
			st.noteDir(dir)
			return nil
		} else if !errors.Is(err, fs.ErrExist) {
			return classifyWrite(path, fmt.Errorf("symlink %s: %w", path, err))
		}
	case err != nil:
		return fmt.Errorf("lstat %s: %w", path, err)
	}
	tmp := tmpName(path)
	os.Remove(tmp)
	if err := os.Symlink(l.Target, tmp); err != nil {
		return classifyWrite(path, fmt.Errorf("symlink %s: %w", tmp, err))
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return classifyWrite(path, fmt.Errorf("rename link into %s: %w", path, err))
	}
	st.noteDir(dir)
	return nil
}

func (st *stager) noteDir(dir string) {
	st.mu.Lock()
	st.dirs[dir] = true
	st.mu.Unlock()
}

// tracker throttles progress to ≤ 4 calls a second, except at chunk
// boundaries, where the fsynced offset must reach the heartbeat.
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
