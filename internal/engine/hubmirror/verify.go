package hubmirror

import (
	"context"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// Verify checks a staged mirror (and its exports) against the ledger and
// the source without writing anything. Sampled (full = false) reads
// O(samples) per file; full hashes every staged file whole and compares it
// with its LFS blob name, or with the source's hash for non-LFS files.
// Bad and Missing list node-local paths.
func Verify(ctx context.Context, in Spec, full bool) (staging.VerifyResult, error) {
	res := staging.VerifyResult{Full: full, Bad: []string{}, Missing: []string{}}
	s, err := validate(in)
	if err != nil {
		return res, err
	}
	p, err := buildPlan(ctx, s, nil)
	if err != nil {
		return res, err
	}
	// Staged paths are read through directories opened beneath the roots:
	// a link out of them is reported, never followed.
	dc := staging.NewDirs(s.Roots)
	defer dc.Close()
	led := ledger.New(Kind) // judge by the source alone when there is none
	md, err := dc.Dir(s.mirror, false)
	if err != nil && !missing(err) {
		return res, err
	}
	if md != nil {
		if l, err := ledger.LoadIn(md, LedgerName, Kind); err == nil {
			led = l
		}
	}
	v := &verifier{s: s, p: p, dc: dc, led: led, full: full, res: &res}
	for _, step := range []func(context.Context) error{v.files, v.links, v.exports} {
		if err := step(ctx); err != nil {
			return res, err
		}
	}
	sort.Strings(res.Bad)
	sort.Strings(res.Missing)
	return res, nil
}

// verifier is one Verify pass: what it checks against, and its result.
type verifier struct {
	s    *spec
	p    *plan
	dc   *staging.Dirs
	led  *ledger.Ledger
	full bool
	res  *staging.VerifyResult
}

// files checks the mirror's files in parallel (sampled reads are
// latency-bound) and gathers the results in plan order.
func (v *verifier) files(ctx context.Context) error {
	type outcome struct {
		missing, bad bool
		err          error
	}
	outs := make([]outcome, len(v.p.Files))
	if err := forEach(ctx, len(v.p.Files), metaWorkers, func(ctx context.Context, i int) error {
		if ctx.Err() != nil {
			outs[i].err = ctx.Err()
			return nil
		}
		it := v.p.Files[i]
		dst := filepath.Join(v.s.mirror, it.Rel)
		d, name, err := v.dc.Parent(dst, false)
		if err != nil && !missing(err) {
			outs[i].err = err
			return nil
		}
		var fi unix.Stat_t
		if err == nil {
			fi, err = d.Lstat(name)
		}
		switch {
		case err != nil:
			outs[i].missing = true
		case !isReg(fi):
			outs[i].bad = true
		default:
			good, err := verifyFile(v.s, it, d, name, fi.Size, v.led, v.full)
			outs[i].bad, outs[i].err = !good, err
		}
		return nil
	}); err != nil {
		return err
	}
	for i, o := range outs {
		if o.err != nil {
			return o.err
		}
		v.count(filepath.Join(v.s.mirror, v.p.Files[i].Rel), o.missing, o.bad)
	}
	return nil
}

// links checks the mirror's snapshot links in parallel, gathered in plan
// order.
func (v *verifier) links(ctx context.Context) error {
	const linkMissing, linkBad = 1, 2 // 0: as planned
	state := make([]int, len(v.p.Links))
	if err := forEach(ctx, len(v.p.Links), metaWorkers, func(_ context.Context, i int) error {
		path := filepath.Join(v.s.mirror, v.p.Links[i].Rel)
		d, name, err := v.dc.Parent(path, false)
		var fi unix.Stat_t
		if err == nil {
			fi, err = d.Lstat(name)
		}
		switch {
		case err != nil:
			state[i] = linkMissing
		case !isLink(fi):
			state[i] = linkBad
		default:
			if t, err := d.Readlink(name); err != nil || t != v.p.Links[i].Target {
				state[i] = linkBad
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for i, st := range state {
		v.count(filepath.Join(v.s.mirror, v.p.Links[i].Rel), st == linkMissing, st == linkBad)
	}
	return nil
}

// exports checks each export: an empty placeholder for every skipped
// entry, a hard link to the mirror file for every other, and its bind
// manifest.
func (v *verifier) exports(context.Context) error {
	for _, e := range v.s.Exports {
		rp := v.p.Repos[e.Repo]
		rev, err := rp.exportRev()
		if err != nil {
			return err
		}
		root := filepath.Clean(e.Path)
		for _, en := range rp.Revs[rev] {
			target := filepath.Join(root, en.Path)
			ti, err := v.dc.Lstat(target)
			if err != nil {
				if !missing(err) {
					return err
				}
				v.count(target, true, false)
				continue
			}
			if en.Skipped {
				v.count(target, false, !isReg(ti) || ti.Size != 0)
				continue
			}
			mi, err := v.dc.Lstat(filepath.Join(v.s.mirror, en.File))
			v.count(target, false, err != nil || !isReg(mi) || mi.Dev != ti.Dev || mi.Ino != ti.Ino)
		}
		if _, err := v.dc.Lstat(BindManifestPath(root)); err != nil {
			v.count(BindManifestPath(root), true, false)
		}
	}
	return nil
}

// count records path as missing, bad, or else OK.
func (v *verifier) count(path string, missing, bad bool) {
	switch {
	case missing:
		v.res.Missing = append(v.res.Missing, path)
	case bad:
		v.res.Bad = append(v.res.Bad, path)
	default:
		v.res.OK++
	}
}

func verifyFile(s *spec, it *fileItem, d *staging.Dir, name string, size int64, led *ledger.Ledger, full bool) (bool, error) {
	src, err := os.Open(it.Src)
	if err != nil {
		return false, sourceErr(it, err)
	}
	defer src.Close()
	sfi, err := src.Stat()
	if err != nil {
		return false, sourceErr(it, err)
	}
	if sfi.Size() != size {
		return false, nil
	}
	if full {
		sum, err := fullSHAIn(d, name)
		if err != nil {
			return false, nil
		}
		want := it.WantSHA
		if want == "" {
			if want, err = fullSHA(it.Src); err != nil {
				return false, sourceErr(it, err)
			}
		}
		return sum == want, nil
	}
	srcSample, err := sampleOpen(src, size)
	if err != nil {
		return false, sourceErr(it, err)
	}
	dstSample, err := sampleDst(d, name, size)
	if err != nil || dstSample != srcSample {
		return false, nil
	}
	if e, ok := led.Entries[it.Rel]; ok && (e.Sampled != dstSample || e.Size != size || (it.WantSHA != "" && e.SHA256 != "" && e.SHA256 != it.WantSHA)) {
		// The ledger recorded other samples, or a full hash that is not
		// the blob's name: what was written is not what the name says.
		return false, nil
	}
	return true, nil
}
