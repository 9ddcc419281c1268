package hubmirror

import (
	"context"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/ledger"
	"github.com/sparklane/sparklane/internal/staging"
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
	// Files are checked in parallel (sampled reads are latency-bound);
	// results are gathered in plan order.
	type outcome struct {
		missing, bad bool
		err          error
	}
	outs := make([]outcome, len(p.Files))
	if err := forEach(ctx, len(p.Files), metaWorkers, func(ctx context.Context, i int) error {
		if ctx.Err() != nil {
			outs[i].err = ctx.Err()
			return nil
		}
		it := p.Files[i]
		dst := filepath.Join(s.mirror, it.Rel)
		d, name, err := dc.Parent(dst, false)
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
			good, err := verifyFile(s, it, d, name, fi.Size, led, full)
			outs[i].bad, outs[i].err = !good, err
		}
		return nil
	}); err != nil {
		return res, err
	}
	for i, o := range outs {
		dst := filepath.Join(s.mirror, p.Files[i].Rel)
		switch {
		case o.err != nil:
			return res, o.err
		case o.missing:
			res.Missing = append(res.Missing, dst)
		case o.bad:
			res.Bad = append(res.Bad, dst)
		default:
			res.OK++
		}
	}
	linkState := make([]int, len(p.Links)) // 0 ok, 1 missing, 2 bad
	if err := forEach(ctx, len(p.Links), metaWorkers, func(_ context.Context, i int) error {
		path := filepath.Join(s.mirror, p.Links[i].Rel)
		d, name, err := dc.Parent(path, false)
		var fi unix.Stat_t
		if err == nil {
			fi, err = d.Lstat(name)
		}
		switch {
		case err != nil:
			linkState[i] = 1
		case !isLink(fi):
			linkState[i] = 2
		default:
			if t, err := d.Readlink(name); err != nil || t != p.Links[i].Target {
				linkState[i] = 2
			}
		}
		return nil
	}); err != nil {
		return res, err
	}
	for i, st := range linkState {
		path := filepath.Join(s.mirror, p.Links[i].Rel)
		switch st {
		case 0:
			res.OK++
		case 1:
			res.Missing = append(res.Missing, path)
		default:
			res.Bad = append(res.Bad, path)
		}
	}
	for _, e := range s.Exports {
		rp := p.Repos[e.Repo]
		rev, err := rp.exportRev()
		if err != nil {
			return res, err
		}
		root := filepath.Clean(e.Path)
		for _, en := range rp.Revs[rev] {
			target := filepath.Join(root, en.Path)
			ti, err := dc.Lstat(target)
			if err != nil {
				if !missing(err) {
					return res, err
				}
				res.Missing = append(res.Missing, target)
				continue
			}
			if en.Skipped {
				if isReg(ti) && ti.Size == 0 {
					res.OK++
				} else {
					res.Bad = append(res.Bad, target)
				}
				continue
			}
			if mi, err := dc.Lstat(filepath.Join(s.mirror, en.File)); err == nil && isReg(mi) && mi.Dev == ti.Dev && mi.Ino == ti.Ino {
				res.OK++
			} else {
				res.Bad = append(res.Bad, target)
			}
		}
		if _, err := dc.Lstat(BindManifestPath(root)); err != nil {
			res.Missing = append(res.Missing, BindManifestPath(root))
		}
	}
	sort.Strings(res.Bad)
	sort.Strings(res.Missing)
	return res, nil
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
	if e, ok := led.Entries[it.Rel]; ok && (e.Sampled != dstSample || e.Size != size) {
		return false, nil
	}
	return true, nil
}
