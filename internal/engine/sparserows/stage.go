package sparserows

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// copyChunk is the unit of one pread/pwrite or copy_file_range call.
const copyChunk = 16 << 20

// progressEvery throttles mid-block progress reports (≤ 4/s).
const progressEvery = 250 * time.Millisecond

// Output modes.
const (
	modeExisting = iota // the final file was there at the start of the pass
	modeResumed         // a temp file of an interrupted pass, continued
	modeFresh           // a new temp file
)

// outFile is one output: a packed layer file or a sparse shard copy.
type outFile struct {
	rel   string // name under Dst
	final string
	tmp   string
	// dir is the output's directory opened beneath the node's roots (nil
	// while it does not exist); name and tmpName are the base names in it.
	dir           *staging.Dir
	name, tmpName string
	mode          int
	header        []byte // expected bytes at offset 0
	size          int64  // expected file size
	f             *os.File
	last          int // index of the last layer using it (finalized after it)

	wrote, adopted, repaired, done bool
}

// piece is a byte range copied verbatim from a source shard to an output.
type piece struct {
	src    string // shard file name
	srcOff int64
	out    *outFile
	outOff int64
	n      int64
}

// block is the unit of ledger entries, verification, rewrite and resume.
type block struct {
	li           int // index into plan layers
	first, count int64
	bytes        int64
	key, source  string
	pieces       []piece
}

type run struct {
	ctx  context.Context
	spec Spec
	opts staging.Options
	pi   PlanInfo
	dry  bool
	led  *ledger.Ledger
	dc   *staging.Dirs // destination directories, opened beneath the roots
	dst  *staging.Dir  // spec.Dst (nil in a dry run while it does not exist)
	outs map[string]*outFile
	srcs map[string]*os.File
	res  staging.Result

	useCFR bool
	buf    []byte
	prog   staging.Progress
	lastPr time.Time

	resumeLi   int // -1: no resume point
	resumeNext int64
	dirty      bool // ledger entries changed since the last save
	// failedAt is the index of the block a failed pass stopped at.
	failedAt int
}

// Stage brings the rank's rows of every layer's table into spec.Dst in
// spec.Format, verifying what is there against the ledger (or adopting it
// after a sampled comparison with the source rows), rewriting only blocks
// that do not match, and continuing an interrupted pass from opts.Resume.
// With opts.DryRun it returns the plan's counts and writes nothing.
//
// Result: CopiedBytes and Rows are the row bytes and rows written (to be
// written, in a dry run); CopiedFiles the outputs created, changed or with
// a repaired header; AdoptedFiles the existing outputs the ledger did not
// know that matched the source; VerifiedFiles the outputs found intact;
// TotalBytes the rank's share. opts.Parallel is not used: one sequential
// stream per rank is what saturates the disks.
func Stage(ctx context.Context, spec Spec, opts staging.Options) (staging.Result, error) {
	start := time.Now()
	if err := checkSpec(spec); err != nil {
		return staging.Result{}, err
	}
	pi, err := plan(spec)
	if err != nil {
		return staging.Result{}, err
	}
	r := &run{ctx: ctx, spec: spec, opts: opts, pi: pi, dry: opts.DryRun, outs: map[string]*outFile{}, srcs: map[string]*os.File{},
		useCFR: spec.CopyMode != CopyReadWrite, resumeLi: -1, dc: staging.NewDirs(spec.Roots)}
	r.res.DryRun = r.dry
	r.res.TotalBytes = pi.Bytes
	defer r.closeAll()
	if err := r.openDst(); err != nil {
		return r.res, err
	}
	if opts.Resume != nil {
		for i, lp := range pi.Layers {
			if lp.Layer == opts.Resume.Layer && opts.Resume.NextRow >= lp.First && opts.Resume.NextRow <= lp.First+lp.Count {
				r.resumeLi, r.resumeNext = i, opts.Resume.NextRow
			}
		}
	}
	if r.resumeLi < 0 {
		r.resumeFromDisk()
	}
	if err := r.decideOutputs(); err != nil {
		return r.res, err
	}
	r.advanceResume()
	blocks := r.blocks()
	if !r.dry {
		// Before any temp file exists: a NoSpace failure leaves dst as it was.
		var need int64
		for _, b := range blocks {
			if r.mustWrite(b) {
				need += b.bytes
			}
		}
		if err := staging.CheckFreeToWrite(spec.Dst, spec.MinFree, pi.Bytes, need); err != nil {
			return r.res, err
		}
	}
	if err := r.openOutputs(); err != nil {
		return r.res, err
	}
	r.pruneLedger(blocks)
	r.prog = staging.Progress{FilesTotal: len(r.outs), RowsTotal: pi.Rows, BytesTotal: pi.Bytes}
	err = r.runBlocks(blocks)
	if err != nil && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		// What was written stays in the temp files, resumed by the next
		// pass: it needs room for the rest only.
		err = staging.ShortAfterFull(spec.Dst, spec.MinFree, pi.Bytes, r.leftToWrite(blocks), err)
	}
	if serr := r.saveLedger(); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return r.res, err
	}
	if spec.Format == FormatSparseCopy {
		if err := r.writeSidecars(); err != nil {
			return r.res, err
		}
	}
	for _, o := range r.outs {
		switch {
		case o.wrote || o.repaired || o.mode != modeExisting:
			r.res.CopiedFiles++
		case o.adopted:
			r.res.AdoptedFiles++
		default:
			r.res.VerifiedFiles++
		}
	}
	r.res.TotalFiles += len(r.outs)
	r.res.Seconds = time.Since(start).Seconds()
	return r.res, nil
}

// openDst opens Dst beneath the node's roots (made unless dry: a link out
// of the roots fails here, before any write) and loads its ledger.
func (r *run) openDst() error {
	d, err := r.dc.Dir(filepath.Clean(r.spec.Dst), !r.dry)
	if err != nil && !(r.dry && errors.Is(err, fs.ErrNotExist)) {
		return staging.ClassifyWrite(r.spec.Dst, fmt.Errorf("open dst %s: %w", r.spec.Dst, err))
	}
	r.dst = d
	r.led = ledger.New(LedgerKind)
	if d != nil {
		// A ledger is a cache of verified hashes: a broken one is dropped
		// and the tree re-verified against the source by adoption.
		if l, err := ledger.LoadIn(d, LedgerName, LedgerKind); err == nil {
			r.led = l
		}
	}
	return nil
}

// outDir opens o's directory beneath the roots: made when create, else
// nil (no error) while it does not exist.
func (r *run) outDir(o *outFile, create bool) (*staging.Dir, error) {
	if o.dir != nil {
		return o.dir, nil
	}
	d, err := r.dc.Dir(filepath.Dir(o.final), create)
	if err != nil {
		if !create && errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, staging.ClassifyWrite(o.final, err)
	}
	o.dir = d
	return d, nil
}

// regularIn reports whether name in d is a regular file (links not followed).
func regularIn(d *staging.Dir, name string) bool {
	if d == nil {
		return false
	}
	st, err := d.Lstat(name)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// packedHeaderIn reads and checks the packed header of name in d.
func packedHeaderIn(d *staging.Dir, name string) (PackedHeader, error) {
	f, err := d.OpenFile(name, unix.O_RDONLY, 0)
	if err != nil {
		return PackedHeader{}, err
	}
	return readPackedHeaderFile(f, d.Join(name))
}

// resumeFromDisk sets a resume point from the temp files an interrupted
// pass left when no heartbeat says where it stopped (a new run after a
// cancel, a heartbeat that never reached the server): temp files are keyed
// by their destination and judged by content, whichever run finds them.
// Packed layers are written in order, so the first layer with a temp file
// and no final file is the one in flight: the point is its first row, which
// advanceResume moves past the blocks the file already holds (those are
// then checked against the source, not rewritten). A sparse-copy pass
// writes several shards at once: with any temp file left, every block of a
// resumed shard is checked (sampled against the ledger or the source) and
// only the blocks that do not match are rewritten.
func (r *run) resumeFromDisk() {
	if r.dst == nil {
		return
	}
	if r.spec.Format == FormatPacked {
		for i, lp := range r.pi.Layers {
			d, err := r.dc.Dir(filepath.Dir(filepath.Join(r.spec.Dst, lp.Output)), false)
			if err != nil {
				continue
			}
			name := filepath.Base(lp.Output)
			if !regularIn(d, name) && regularIn(d, "."+name+".partial") {
				r.resumeLi, r.resumeNext = i, lp.First
				return
			}
		}
		return
	}
	for _, sh := range r.pi.Shards {
		d, err := r.dc.Dir(filepath.Dir(filepath.Join(r.spec.Dst, sh)), false)
		if err == nil && !regularIn(d, filepath.Base(sh)) && regularIn(d, "."+filepath.Base(sh)+".partial") && len(r.pi.Layers) > 0 {
			last := len(r.pi.Layers) - 1
			r.resumeLi, r.resumeNext = last, r.pi.Layers[last].First+r.pi.Layers[last].Count
			return
		}
	}
}

// advanceResume moves the resume point of a resumed packed file past the
// blocks its temp file already holds beyond the last heartbeat (heartbeats
// reach the server throttled, seconds late). Blocks are written in order,
// each fdatasynced before the next begins, so every block before the one
// holding the last written byte is complete; those blocks are then checked
// against the source like the ones before the heartbeat instead of being
// rewritten, and a kill -9 costs at most one block however stale the
// heartbeat. Without SEEK_HOLE support the point stays where it was.
func (r *run) advanceResume() {
	if r.resumeLi < 0 || r.spec.Format != FormatPacked || r.dry {
		return
	}
	lp := r.pi.Layers[r.resumeLi]
	o := r.outs[lp.Output]
	if o == nil || o.mode != modeResumed {
		return
	}
	if o.dir == nil {
		return
	}
	f, err := o.dir.OpenFile(o.tmpName, unix.O_RDONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	from := PackedHeaderSize + (r.resumeNext-lp.First)*lp.RecordSize
	hole, err := unix.Seek(int(f.Fd()), from, unix.SEEK_HOLE)
	if err != nil || hole <= from || hole >= o.size {
		// Nothing past the resume point, or data up to the end (no holes
		// reported): keep the heartbeat's point.
		return
	}
	lastRow := lp.First + (hole-1-PackedHeaderSize)/lp.RecordSize
	next := lp.First + (lastRow-lp.First)/lp.BlockRows*lp.BlockRows
	if next > r.resumeNext {
		r.resumeNext = next
	}
}

// expectedPackedHeader is the header a layer's packed file must carry.
func (r *run) expectedPackedHeader(lp LayerPlan) PackedHeader {
	return PackedHeader{Version: PackedVersion, Layer: lp.Layer, Rank: r.spec.Rank, TP: r.spec.TP, FirstRow: lp.First, RowCount: lp.Count,
		RecordSize: lp.RecordSize, Tensor: lp.Tensor, Checkpoint: r.pi.Checkpoint}
}

// decideOutputs decides each output's mode: existing final, resumed temp
// file, or fresh temp file.
func (r *run) decideOutputs() error {
	if r.spec.Format == FormatPacked {
		for i, lp := range r.pi.Layers {
			h := r.expectedPackedHeader(lp)
			hb, err := h.Marshal()
			if err != nil {
				return fault.Permanent(fault.InvalidSpec, fmt.Errorf("tensor %s: %w", lp.Tensor, err))
			}
			o := &outFile{rel: lp.Output, header: hb, size: h.FileSize(), last: i}
			o.final = filepath.Join(r.spec.Dst, o.rel)
			o.name, o.tmpName = filepath.Base(o.final), "."+filepath.Base(o.final)+".partial"
			o.tmp = filepath.Join(filepath.Dir(o.final), o.tmpName)
			o.mode = modeFresh
			d, err := r.outDir(o, false)
			if err != nil {
				return err
			}
			if !regularIn(d, o.name) {
				// Missing, or a symlink (never written through: it may
				// point at the NAS): a fresh file replaces it.
			} else if got, err := packedHeaderIn(d, o.name); err == nil && got == h {
				o.mode = modeExisting
			} else if st, serr := d.Lstat(o.name); serr == nil && st.Size == o.size {
				// Right size but a header that does not decode (torn or
				// zeroed): repair the header and check the rows block by
				// block. A valid header for other rows or another
				// checkpoint means a rebuild.
				if hb, rerr := readHeaderBytes(d, o.name); rerr == nil {
					if _, perr := UnmarshalPackedHeader(hb); perr != nil {
						o.mode = modeExisting
					}
				}
			}
			if o.mode == modeFresh && r.resumeLi == i && regularIn(d, o.tmpName) {
				if got, err := packedHeaderIn(d, o.tmpName); err == nil && got == h {
					o.mode = modeResumed
				}
			}
			r.outs[o.rel] = o
		}
	} else {
		lastUse := map[string]int{}
		for i, lp := range r.pi.Layers {
			for _, p := range lp.Parts {
				if p.RankCount > 0 {
					lastUse[p.Shard] = i
				}
			}
		}
		for _, s := range r.pi.Shards {
			h := r.pi.headers[s]
			o := &outFile{rel: s, header: h.Raw, size: h.FileSize, last: lastUse[s]}
			o.final = filepath.Join(r.spec.Dst, s)
			o.name, o.tmpName = filepath.Base(s), "."+filepath.Base(s)+".partial"
			o.tmp = filepath.Join(filepath.Dir(o.final), o.tmpName)
			o.mode = modeFresh
			d, err := r.outDir(o, false)
			if err != nil {
				return err
			}
			if regularIn(d, o.name) {
				o.mode = modeExisting
			} else if r.resumeLi >= 0 && regularIn(d, o.tmpName) {
				o.mode = modeResumed
			}
			r.outs[o.rel] = o
		}
	}
	return nil
}

// openOutputs opens every output for its mode.
func (r *run) openOutputs() error {
	for _, o := range r.outs {
		if err := r.openOut(o); err != nil {
			return err
		}
	}
	return nil
}

func readHeaderBytes(d *staging.Dir, name string) ([]byte, error) {
	f, err := d.OpenFile(name, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, PackedHeaderSize)
	if err := readFull(f, b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// openOut opens an output for its mode, checks and repairs its header and
// size. In a dry run nothing is created or changed.
func (r *run) openOut(o *outFile) error {
	var err error
	switch {
	case o.mode == modeFresh && r.dry:
		return nil
	case o.mode == modeFresh:
		d, err := r.outDir(o, true)
		if err != nil {
			return err
		}
		o.f, err = d.OpenFile(o.tmpName, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return staging.ClassifyWrite(o.tmp, fmt.Errorf("create: %w", err))
		}
		if err := o.f.Truncate(o.size); err != nil {
			return staging.ClassifyWrite(o.tmp, fmt.Errorf("size %s to %d bytes: %w", o.tmp, o.size, err))
		}
		if _, err := o.f.WriteAt(o.header, 0); err != nil {
			return staging.ClassifyWrite(o.tmp, fmt.Errorf("write header of %s: %w", o.tmp, err))
		}
		return nil
	}
	path, name := o.final, o.name
	if o.mode == modeResumed {
		path, name = o.tmp, o.tmpName
	}
	flag := os.O_RDWR
	if r.dry {
		flag = os.O_RDONLY
	}
	d, err := r.outDir(o, false)
	if err == nil && d == nil {
		err = fmt.Errorf("directory %s vanished", filepath.Dir(path))
	}
	if err == nil {
		o.f, err = d.OpenFile(name, flag, 0)
	}
	if err != nil {
		return staging.ClassifyWrite(path, fmt.Errorf("open %s: %w", path, err))
	}
	st, err := o.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != o.size {
		o.repaired = true
		if !r.dry {
			if err := o.f.Truncate(o.size); err != nil {
				return fmt.Errorf("resize %s from %d to %d bytes: %w", path, st.Size(), o.size, err)
			}
		}
	}
	got := make([]byte, len(o.header))
	n, _ := o.f.ReadAt(got, 0)
	if n != len(got) || !bytes.Equal(got, o.header) {
		o.repaired = true
		if !r.dry {
			if _, err := o.f.WriteAt(o.header, 0); err != nil {
				return fmt.Errorf("repair header of %s: %w", path, err)
			}
			if err := o.f.Sync(); err != nil {
				return fmt.Errorf("fsync %s: %w", path, err)
			}
		}
	}
	return nil
}

// blocks lists every block of every layer with its pieces.
func (r *run) blocks() []block {
	var out []block
	for li, lp := range r.pi.Layers {
		for a := lp.First; a < lp.First+lp.Count; a += lp.BlockRows {
			b := block{li: li, first: a, count: min(lp.BlockRows, lp.First+lp.Count-a)}
			end := a + b.count
			b.bytes = b.count * lp.RecordSize
			b.key = fmt.Sprintf("l%d/r%d/rows-%d-%d", lp.Layer, r.spec.Rank, a, end-1)
			b.source = fmt.Sprintf("%s %s rows %d-%d checkpoint %s", r.spec.Format, lp.Tensor, a, end-1, r.pi.Checkpoint)
			for _, p := range lp.Parts {
				x, y := max(a, p.FirstRow), min(end, p.FirstRow+p.Rows)
				if x >= y {
					continue
				}
				pc := piece{src: p.Shard, srcOff: p.DataOffset + (x-p.FirstRow)*lp.RecordSize, n: (y - x) * lp.RecordSize}
				if r.spec.Format == FormatPacked {
					pc.out = r.outs[lp.Output]
					pc.outOff = PackedHeaderSize + (x-lp.First)*lp.RecordSize
				} else {
					pc.out = r.outs[p.Shard]
					pc.outOff = pc.srcOff
				}
				b.pieces = append(b.pieces, pc)
			}
			out = append(out, b)
		}
	}
	return out
}

// mustWrite: a block touching a fresh file, or one past the resume point
// in a resumed temp file, is written without looking.
func (r *run) mustWrite(b block) bool {
	for _, p := range b.pieces {
		if p.out.mode == modeFresh {
			return true
		}
		if p.out.mode == modeResumed && !(b.li < r.resumeLi || (b.li == r.resumeLi && b.first+b.count <= r.resumeNext)) {
			return true
		}
	}
	return false
}

func (r *run) srcFile(shard string) (*os.File, error) {
	if f, ok := r.srcs[shard]; ok {
		return f, nil
	}
	p := filepath.Join(r.spec.Src, shard)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open source shard %s: %w", p, err)
	}
	// Rank ranges are read front to back: ask for aggressive read-ahead.
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
	r.srcs[shard] = f
	return f, nil
}

func (r *run) readers(b block) (src, out spanReader, err error) {
	for _, p := range b.pieces {
		f, err := r.srcFile(p.src)
		if err != nil {
			return nil, nil, err
		}
		src = append(src, span{f: f, off: p.srcOff, n: p.n})
		if p.out.f != nil {
			out = append(out, span{f: p.out.f, off: p.outOff, n: p.n})
		}
	}
	return src, out, nil
}

// leftToWrite is what a pass that stopped at block r.failedAt must still
// write: that block and every later one it would write without looking.
func (r *run) leftToWrite(blocks []block) int64 {
	var n int64
	for j := r.failedAt; j < len(blocks); j++ {
		if j == r.failedAt || r.mustWrite(blocks[j]) {
			n += blocks[j].bytes
		}
	}
	return n
}

func (r *run) runBlocks(blocks []block) error {
	for i, b := range blocks {
		r.failedAt = i
		if err := r.ctx.Err(); err != nil {
			return err
		}
		lp := r.pi.Layers[b.li]
		write := r.mustWrite(b)
		adopt := false
		if !write {
			ok, adopted, err := r.checkBlock(b)
			if err != nil {
				return err
			}
			write, adopt = !ok, adopted
		}
		if write {
			r.res.CopiedBytes += b.bytes
			r.res.Rows += b.count
			if !r.dry {
				if err := r.writeBlock(b); err != nil {
					return err
				}
			}
			for _, p := range b.pieces {
				p.out.wrote = true
			}
		} else if adopt {
			for _, p := range b.pieces {
				p.out.adopted = true
			}
		}
		r.prog.RowsDone += b.count
		if !write {
			r.prog.BytesDone += b.bytes
		}
		r.prog.Layer, r.prog.NextRow = lp.Layer, b.first+b.count
		last := i+1 == len(blocks) || blocks[i+1].li != b.li
		if last {
			if err := r.finishLayer(b.li); err != nil {
				return err
			}
			if i+1 < len(blocks) {
				r.prog.Layer, r.prog.NextRow = r.pi.Layers[blocks[i+1].li].Layer, blocks[i+1].first
			}
		}
		r.progress(true)
	}
	return nil
}

// checkBlock verifies a block in place: against its ledger entry when the
// ledger knows it, else (adoption) against the same samples of the source
// rows; with opts.Force byte for byte against the source.
func (r *run) checkBlock(b block) (ok, adopted bool, err error) {
	src, out, err := r.readers(b)
	if err != nil {
		return false, false, err
	}
	if r.opts.Force {
		ok, err := equalContent(src, out, b.bytes)
		if err != nil || !ok {
			return false, false, err
		}
		sum, err := sampleBlock(out, b.bytes)
		if err == nil {
			r.record(b, sum)
		}
		return err == nil, false, err
	}
	outSum, err := sampleBlock(out, b.bytes)
	if err != nil {
		return false, false, nil // unreadable: rewrite
	}
	if e, found := r.led.Entries[b.key]; found && e.Source == b.source && e.Size == b.bytes {
		if e.Sampled != outSum {
			return false, false, nil
		}
		r.record(b, outSum)
		return true, false, nil
	}
	srcSum, err := sampleBlock(src, b.bytes)
	if err != nil {
		return false, false, fmt.Errorf("block %s of %s: read source: %w", b.key, r.pi.Layers[b.li].Tensor, err)
	}
	if srcSum != outSum {
		return false, false, nil
	}
	r.record(b, outSum)
	return true, true, nil
}

func (r *run) record(b block, sum string) {
	if r.dry {
		return
	}
	if e, ok := r.led.Entries[b.key]; ok && e.Size == b.bytes && e.Sampled == sum && e.Source == b.source {
		return // unchanged: a verify-only pass leaves the ledger file alone
	}
	r.led.Entries[b.key] = ledger.Entry{Size: b.bytes, Sampled: sum, Source: b.source, VerifiedAt: time.Now().UTC()}
	r.dirty = true
}

// pruneLedger drops entries of this rank's layers that no current block
// has (left by another block size or table shape); other keys are kept.
func (r *run) pruneLedger(blocks []block) {
	if r.dry {
		return
	}
	keep := map[string]bool{}
	for _, b := range blocks {
		keep[b.key] = true
	}
	for k := range r.led.Entries {
		for _, lp := range r.pi.Layers {
			if strings.HasPrefix(k, fmt.Sprintf("l%d/r%d/", lp.Layer, r.spec.Rank)) && !keep[k] {
				delete(r.led.Entries, k)
				r.dirty = true
			}
		}
	}
}

// saveLedger writes the ledger when entries changed.
func (r *run) saveLedger() error {
	if r.dry || !r.dirty {
		return nil
	}
	if err := r.led.SaveIn(r.dst, LedgerName); err != nil {
		return staging.ClassifyWrite(filepath.Join(r.spec.Dst, LedgerName), err)
	}
	r.dirty = false
	return nil
}

// writeBlock copies a block's pieces, fsyncs, checks the written samples
// against the source and records the block in the ledger.
func (r *run) writeBlock(b block) error {
	if _, ok := r.led.Entries[b.key]; ok {
		delete(r.led.Entries, b.key)
		r.dirty = true
	}
	touched := map[*outFile]bool{}
	for _, p := range b.pieces {
		sf, err := r.srcFile(p.src)
		if err != nil {
			return err
		}
		if err := r.copyRange(sf, p.srcOff, p.out.f, p.outOff, p.n); err != nil {
			return staging.ClassifyWrite(p.out.f.Name(), fmt.Errorf("tensor %s rows %d-%d: copy %s → %s: %w", r.pi.Layers[b.li].Tensor, b.first, b.first+b.count-1, sf.Name(), p.out.f.Name(), err))
		}
		touched[p.out] = true
	}
	for o := range touched {
		if err := unix.Fdatasync(int(o.f.Fd())); err != nil {
			return staging.ClassifyWrite(o.f.Name(), fmt.Errorf("fsync %s: %w", o.f.Name(), err))
		}
	}
	src, out, err := r.readers(b)
	if err != nil {
		return err
	}
	outSum, err := sampleBlock(out, b.bytes)
	if err != nil {
		return fmt.Errorf("block %s: read back: %w", b.key, err)
	}
	srcSum, err := sampleBlock(src, b.bytes)
	if err != nil {
		return fmt.Errorf("block %s: read source: %w", b.key, err)
	}
	if outSum != srcSum {
		return fault.Permanent(fault.ContentMismatch, fmt.Errorf("block %s of tensor %s: written bytes in %s differ from the source after copy: the source changed during the copy or the disk is failing", b.key, r.pi.Layers[b.li].Tensor, out[0].f.Name()))
	}
	r.record(b, outSum)
	r.dropBehind(b)
	return nil
}

// dropBehind drops a block just written, fsynced and checked from the
// page cache, on both sides, while the pass stages beside a serving lane
// (a pacer is set): the engine beside it shares the memory the page
// cache takes (on a DGX Spark, the GPU's). What the source's readahead
// fetched past the rank's rows is dropped as the pass ends (closeAll).
// Advice only; on a node serving nothing the pass leaves the cache to the
// kernel, as before.
func (r *run) dropBehind(b block) {
	if r.opts.Pacer == nil {
		return
	}
	for _, p := range b.pieces {
		_ = unix.Fadvise(int(p.out.f.Fd()), p.outOff, p.n, unix.FADV_DONTNEED)
		if sf, err := r.srcFile(p.src); err == nil {
			_ = unix.Fadvise(int(sf.Fd()), p.srcOff, p.n, unix.FADV_DONTNEED)
		}
	}
}

// copyRange copies n bytes from src at soff to dst at doff: copy_file_range
// when allowed and supported, else pread/pwrite in copyChunk pieces.
func (r *run) copyRange(src *os.File, soff int64, dst *os.File, doff int64, n int64) error {
	for n > 0 {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		c := min(n, copyChunk)
		// Beside a serving lane, the chunk waits for the rate and the
		// memory floor (nil pacer: at once).
		if err := r.opts.Pacer.Wait(r.ctx, c); err != nil {
			return err
		}
		if r.useCFR {
			m, err := unix.CopyFileRange(int(src.Fd()), &soff, int(dst.Fd()), &doff, int(c), 0)
			if err != nil {
				if r.spec.CopyMode == CopyAuto && (errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EINVAL) ||
					errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EBADF)) {
					r.useCFR = false
					continue
				}
				return fmt.Errorf("copy_file_range: %w", err)
			}
			if m == 0 {
				return fmt.Errorf("source ends early at offset %d (truncated shard?)", soff)
			}
			startWriteback(dst, doff-int64(m), int64(m))
			n -= int64(m)
			r.prog.BytesDone += int64(m)
		} else {
			if r.buf == nil {
				r.buf = make([]byte, copyChunk)
			}
			if err := readFull(src, r.buf[:c], soff); err != nil {
				return err
			}
			if _, err := dst.WriteAt(r.buf[:c], doff); err != nil {
				return err
			}
			startWriteback(dst, doff, c)
			soff += c
			doff += c
			n -= c
			r.prog.BytesDone += c
		}
		r.progress(false)
	}
	return nil
}

// startWriteback asks the kernel to start writing a just-copied range to
// disk now (sync_file_range, asynchronous), so the fsync at the block
// boundary finds little left to flush and the disk stays busy while the
// next chunk is read. Failure is harmless: the fsync still covers it.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

func (r *run) progress(force bool) {
	if r.opts.OnProgress == nil || r.dry {
		return
	}
	now := time.Now()
	if !force && now.Sub(r.lastPr) < progressEvery {
		return
	}
	r.lastPr = now
	r.prog.FilesDone = 0
	for _, o := range r.outs {
		if o.done {
			r.prog.FilesDone++
		}
	}
	r.opts.OnProgress(r.prog)
}

// finishLayer finalizes the outputs whose last layer this was: fsync the
// temp file and rename it into place; then saves the ledger.
func (r *run) finishLayer(li int) error {
	if r.dry {
		return nil
	}
	for _, o := range r.outs {
		if o.last != li || o.f == nil {
			continue
		}
		if o.wrote || o.repaired || o.mode != modeExisting {
			if err := o.f.Sync(); err != nil {
				return fmt.Errorf("fsync %s: %w", o.f.Name(), err)
			}
		}
		if err := o.f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", o.f.Name(), err)
		}
		o.f = nil
		o.done = true
		if o.mode != modeExisting {
			if err := o.dir.Rename(o.tmpName, o.name); err != nil {
				return staging.ClassifyWrite(o.final, err)
			}
			o.dir.Sync()
		}
	}
	return r.saveLedger()
}

func (r *run) closeAll() {
	for _, o := range r.outs {
		if o.f != nil {
			o.f.Close()
			o.f = nil
		}
	}
	for _, f := range r.srcs {
		if r.opts.Pacer != nil {
			// What readahead brought in beyond the rank's rows (the next
			// rank's) was never copied, so never dropped behind.
			_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		f.Close()
	}
	r.dc.Close()
}

// LocalManifest is engram-local.json of a sparse-copy tree: where the
// rank's rows of each table are, so the runtime (and engine-sim) can check
// it reads only rows it owns.
type LocalManifest struct {
	Format     string          `json:"format"`
	Rank       int             `json:"rank"`
	TP         int             `json:"tp"`
	Checkpoint string          `json:"checkpoint"`
	Tensors    []LocalTableRef `json:"tensors"`
}

// LocalTableRef is one table's rank rows in the sparse copy.
type LocalTableRef struct {
	TableShare
	Parts []LocalRef `json:"parts"`
}

// LocalRef is one part's rank rows: shard, global row range [begin, end)
// and absolute byte range [begin, end) in the shard.
type LocalRef struct {
	Shard  string   `json:"shard"`
	Tensor string   `json:"tensor"`
	Rows   [2]int64 `json:"rows"`
	Bytes  [2]int64 `json:"bytes"`
}

// ReadLocalManifest reads engram-local.json of a sparse-copy tree, for the
// runtime stand-in and tools that check which rows a node holds.
func ReadLocalManifest(path string) (LocalManifest, error) {
	var m LocalManifest
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: not a sparse-rows manifest (%v): re-run staging", path, err)
	}
	return m, nil
}

// localManifest builds the manifest from the plan.
func localManifest(pi PlanInfo) LocalManifest {
	m := LocalManifest{Format: FormatSparseCopy, Rank: pi.Rank, TP: pi.TP, Checkpoint: pi.Checkpoint}
	for _, lp := range pi.Layers {
		t := LocalTableRef{TableShare: lp.TableShare}
		for _, p := range lp.Parts {
			if p.RankCount == 0 {
				continue
			}
			t.Parts = append(t.Parts, LocalRef{Shard: p.Shard, Tensor: p.Tensor, Rows: [2]int64{p.RankFirst, p.RankFirst + p.RankCount}, Bytes: [2]int64{p.ByteBegin, p.ByteEnd}})
		}
		m.Tensors = append(m.Tensors, t)
	}
	return m
}

// sidecars are the small files of a sparse-copy tree: name → content.
func (pi PlanInfo) sidecars() (map[string][]byte, error) {
	mb, err := json.MarshalIndent(localManifest(pi), "", " ")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{LocalManifestName: append(mb, '\n')}
	ib, err := os.ReadFile(filepath.Join(pi.src, IndexName))
	if err == nil {
		out[IndexName] = ib
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(pi.src, IndexName), err)
	}
	return out, nil
}

// writeSidecars writes engram-local.json and the index copy when missing
// or different.
func (r *run) writeSidecars() error {
	files, err := r.pi.sidecars()
	if err != nil {
		return err
	}
	for name, want := range files {
		r.res.TotalFiles++
		if r.dst != nil {
			if got, err := r.dst.ReadFile(name); err == nil && bytes.Equal(got, want) {
				r.res.VerifiedFiles++
				continue
			}
		}
		r.res.CopiedFiles++
		if r.dry {
			continue
		}
		if err := ledger.WriteFileAtomicIn(r.dst, name, want, 0o644); err != nil {
			return staging.ClassifyWrite(r.dst.Join(name), err)
		}
	}
	return nil
}
