package hubmirror

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

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
	p, err := buildPlan(ctx, s)
	if err != nil {
		return res, err
	}
	led, err := ledger.Load(filepath.Join(s.mirror, LedgerName), Kind)
	if err != nil {
		led = ledger.New(Kind) // judge by the source alone
	}
	// Files are checked in parallel (sampled reads are latency-bound);
	// results are gathered in plan order.
	type outcome struct {
		missing, bad bool
		err          error
	}
	outs := make([]outcome, len(p.Files))
	parallelDo(len(p.Files), metaWorkers, func(i int) {
		if ctx.Err() != nil {
			outs[i].err = ctx.Err()
			return
		}
		it := p.Files[i]
		dst := filepath.Join(s.mirror, it.Rel)
		fi, err := os.Lstat(dst)
		switch {
		case err != nil:
			outs[i].missing = true
		case !fi.Mode().IsRegular():
			outs[i].bad = true
		default:
			good, err := verifyFile(s, it, dst, fi.Size(), led, full)
			outs[i].bad, outs[i].err = !good, err
		}
	})
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
	parallelDo(len(p.Links), metaWorkers, func(i int) {
		path := filepath.Join(s.mirror, p.Links[i].Rel)
		fi, err := os.Lstat(path)
		switch {
		case err != nil:
			linkState[i] = 1
		case fi.Mode()&fs.ModeSymlink == 0:
			linkState[i] = 2
		default:
			if t, err := os.Readlink(path); err != nil || t != p.Links[i].Target {
				linkState[i] = 2
			}
		}
	})
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
			ti, err := os.Lstat(target)
			if err != nil {
				res.Missing = append(res.Missing, target)
				continue
			}
			if en.Skipped {
				if ti.Mode().IsRegular() && ti.Size() == 0 {
					res.OK++
				} else {
					res.Bad = append(res.Bad, target)
				}
				continue
			}
			if mi, err := os.Stat(filepath.Join(s.mirror, en.File)); err == nil && os.SameFile(mi, ti) {
				res.OK++
			} else {
				res.Bad = append(res.Bad, target)
			}
		}
		if _, err := os.Stat(BindManifestPath(root)); err != nil {
			res.Missing = append(res.Missing, BindManifestPath(root))
		}
	}
	sort.Strings(res.Bad)
	sort.Strings(res.Missing)
	return res, nil
}

func verifyFile(s *spec, it *fileItem, dst string, size int64, led *ledger.Ledger, full bool) (bool, error) {
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
		sum, err := fullSHA(dst)
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
	_, dstSample, err := samplePath(dst)
	if err != nil || dstSample != srcSample {
		return false, nil
	}
	if e, ok := led.Entries[it.Rel]; ok && (e.Sampled != dstSample || e.Size != size) {
		return false, nil
	}
	return true, nil
}
