package sparserows

import (
	"bytes"
	"context"
	"io/fs"
	"os"

	"github.com/sparklane/sparklane/internal/engine/staging"
)

// Verify checks the staged tree without writing anything: every output's
// header and size, then every block of rows against its ledger entry
// (sampled), or against the same samples of the source rows when the ledger
// does not know it; with full, every byte against the source. OK counts
// good blocks and side files; Bad and Missing name outputs and block keys.
func Verify(ctx context.Context, spec Spec, full bool) (staging.VerifyResult, error) {
	vr := staging.VerifyResult{Full: full, Bad: []string{}, Missing: []string{}}
	if err := checkSpec(spec); err != nil {
		return vr, err
	}
	pi, err := plan(spec)
	if err != nil {
		return vr, err
	}
	r := &run{ctx: ctx, spec: spec, opts: staging.Options{Force: full}, pi: pi, dry: true, outs: map[string]*outFile{}, srcs: map[string]*os.File{}, resumeLi: -1,
		dc: staging.NewDirs(spec.Roots)}
	defer r.closeAll()
	if err := r.openDst(); err != nil {
		return vr, err
	}
	if err := r.decideOutputs(); err != nil {
		return vr, err
	}
	if err := r.openOutputs(); err != nil {
		return vr, err
	}
	broken := map[*outFile]bool{}
	for _, rel := range r.outNames() {
		o := r.outs[rel]
		switch {
		case o.mode == modeFresh:
			broken[o] = true
			if o.dir != nil && regularIn(o.dir, o.name) {
				vr.Bad = append(vr.Bad, rel+": header is for other rows or another checkpoint")
			} else {
				vr.Missing = append(vr.Missing, rel)
			}
		case o.repaired:
			vr.Bad = append(vr.Bad, rel+": header or size does not match the source")
		}
	}
	for _, b := range r.blocks() {
		if err := ctx.Err(); err != nil {
			return vr, err
		}
		skip := false
		for _, p := range b.pieces {
			skip = skip || broken[p.out]
		}
		if skip {
			continue
		}
		ok, _, err := r.checkBlock(b)
		if err != nil {
			return vr, err
		}
		if ok {
			vr.OK++
		} else {
			vr.Bad = append(vr.Bad, b.key)
		}
	}
	if spec.Format == FormatSparseCopy {
		files, err := pi.sidecars()
		if err != nil {
			return vr, err
		}
		for _, name := range []string{LocalManifestName, IndexName} {
			want, ok := files[name]
			if !ok {
				continue
			}
			var got []byte
			err := fs.ErrNotExist
			if r.dst != nil {
				got, err = r.dst.ReadFile(name)
			}
			switch {
			case err != nil:
				vr.Missing = append(vr.Missing, name)
			case !bytes.Equal(got, want):
				vr.Bad = append(vr.Bad, name+": differs from the plan or the source index")
			default:
				vr.OK++
			}
		}
	}
	return vr, nil
}

// outNames lists outputs in a stable order.
func (r *run) outNames() []string {
	var names []string
	if r.spec.Format == FormatPacked {
		for _, lp := range r.pi.Layers {
			names = append(names, lp.Output)
		}
		return names
	}
	return r.pi.Shards
}
