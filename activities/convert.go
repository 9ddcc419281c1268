package activities

import (
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/disk"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/engine/probe"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// The activity boundary: engines return their own types, histories hold
// internal/contract's. Each function here turns one engine type into its
// contract twin (or back, for inputs), field by field where the types
// nest and by Go's struct conversion where they are flat (a field added to
// either side then fails to compile here). convert_test.go fills every
// field of each engine value and checks that both encode alike.

// each converts every element of in with f; nil stays nil (a field without
// omitempty encodes nil and empty differently).
func each[E, C any](in []E, f func(E) C) []C {
	if in == nil {
		return nil
	}
	out := make([]C, len(in))
	for i, e := range in {
		out[i] = f(e)
	}
	return out
}

func byteSources(s staging.Sources) contract.ByteSources {
	return contract.ByteSources{FromNAS: s.FromNAS, FromPeers: s.FromPeers}
}

func blockResult(r staging.Result) contract.BlockResult {
	out := contract.BlockResult{
		CopiedFiles: r.CopiedFiles, CopiedBytes: r.CopiedBytes, VerifiedFiles: r.VerifiedFiles, AdoptedFiles: r.AdoptedFiles,
		SkippedFiles: r.SkippedFiles, SkippedBytes: r.SkippedBytes, Links: r.Links, TotalFiles: r.TotalFiles, TotalBytes: r.TotalBytes,
		Rows: r.Rows, Seconds: r.Seconds, DryRun: r.DryRun, Exports: r.Exports, ByteSources: byteSources(r.Sources),
	}
	if r.Relay != nil {
		rr := contract.RelayReport(*r.Relay)
		out.Relay = &rr
	}
	return out
}

func blockVerify(v staging.VerifyResult) contract.BlockVerify { return contract.BlockVerify(v) }

func stageProgress(p staging.Progress) contract.StageProgress {
	return contract.StageProgress{
		FilesTotal: p.FilesTotal, FilesDone: p.FilesDone, BytesTotal: p.BytesTotal, BytesDone: p.BytesDone,
		InFlight:  each(p.InFlight, func(f staging.FileOffset) contract.FileOffset { return contract.FileOffset(f) }),
		RowsTotal: p.RowsTotal, RowsDone: p.RowsDone, Layer: p.Layer, NextRow: p.NextRow,
		ByteSources: byteSources(p.Sources),
	}
}

// engineProgress is a heartbeat's progress as the staging engines resume from it.
func engineProgress(p contract.StageProgress) staging.Progress {
	return staging.Progress{
		FilesTotal: p.FilesTotal, FilesDone: p.FilesDone, BytesTotal: p.BytesTotal, BytesDone: p.BytesDone,
		InFlight:  each(p.InFlight, func(f contract.FileOffset) staging.FileOffset { return staging.FileOffset(f) }),
		RowsTotal: p.RowsTotal, RowsDone: p.RowsDone, Layer: p.Layer, NextRow: p.NextRow,
		Sources: staging.Sources{FromNAS: p.FromNAS, FromPeers: p.FromPeers},
	}
}

func diskUsage(u disk.Usage) contract.DiskUsage {
	return contract.DiskUsage{DiskBlock: contract.DiskBlock(u.Block), Root: u.Root, Present: u.Present, Bytes: u.Bytes,
		VerifiedAt: u.VerifiedAt, LastServed: u.LastServed, Error: u.Error}
}

func diskRoot(r disk.Root) contract.DiskRoot {
	return contract.DiskRoot{Root: r.Root, Free: r.Free, Error: r.Error, Blocks: each(r.Blocks, diskUsage)}
}

func engineBlock(b contract.DiskBlock) disk.Block { return disk.Block(b) }

func pruneResult(r disk.PruneResult) contract.PruneResult {
	return contract.PruneResult{
		Removals: each(r.Removals, func(x disk.Removal) contract.DiskRemoval {
			return contract.DiskRemoval{DiskUsage: diskUsage(x.Usage), Removed: x.Removed, Error: x.Error}
		}),
		Kept: r.Kept, FreeBefore: r.FreeBefore, FreeAfter: r.FreeAfter, Enough: r.Enough,
	}
}

func imageListed(l images.Listed) contract.ImageListed { return contract.ImageListed(l) }

func imagePrune(p images.ImagePrune) contract.ImagePrune {
	return contract.ImagePrune{Root: p.Root, Removed: each(p.Removed, imageListed), Kept: p.Kept, Error: p.Error,
		FreeBefore: p.FreeBefore, FreeAfter: p.FreeAfter, Enough: p.Enough, DryRun: p.DryRun}
}

func imageInventory(i images.Inventory) contract.ImageInventory { return contract.ImageInventory(i) }
func imageMoved(m images.Moved) contract.ImageMoved             { return contract.ImageMoved(m) }
func imagePulled(p images.Pulled) contract.ImagePulled          { return contract.ImagePulled(p) }
func engineSpec(s contract.ImageSpec) images.Spec               { return images.Spec(s) }

func foreign(f serve.Foreign) contract.ForeignContainer { return contract.ForeignContainer(f) }
func cleared(c serve.Cleared) contract.ClearedPath      { return contract.ClearedPath(c) }
func poolProbe(p probe.PoolResult) contract.PoolProbe   { return contract.PoolProbe(p) }
