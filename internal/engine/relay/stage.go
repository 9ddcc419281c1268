package relay

import (
	"context"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// MinRelaySize is the size below which a file is not relayed: hubmirror
// reads such files whole to sample them, so a peer would save no NAS read.
const MinRelaySize = 4 * hubmirror.SmallMax

// HubMirror stages one hub-mirror block on one node through the relay.
type HubMirror struct {
	// Receiver is the node's (its Registry is what its Server serves).
	Receiver *Receiver
	// Key names the block identically on every node (LANE/INDEX).
	Key string
	// Node is this node; Nodes every node staging the block, in cluster
	// order; Peers their relay servers' host:port by name.
	Node  string
	Nodes []string
	Peers map[string]string
	// Chunk is the relay's fsync granularity (0: hubmirror's).
	Chunk int64
}

// Stage relays the block's large LFS blobs (at least MinRelaySize; their
// name confirms them whole on every receiver), then
// runs hubmirror.Stage, which adopts what the relay placed (a sampled
// check against the NAS), copies what it did not deliver and the small
// files from the NAS, and writes the ledger, links and exports. A relay
// that fails for a reason retrying might fix costs NAS reads, not the
// stage; a permanent fault (disk full, a path out of the roots) fails it.
func (h HubMirror) Stage(ctx context.Context, spec hubmirror.Spec, opts staging.Options, log *zap.Logger) (staging.Result, error) {
	if log == nil {
		log = zap.NewNop()
	}
	mirror, all, err := hubmirror.Files(ctx, spec)
	if err != nil {
		return staging.Result{}, err
	}
	files := relayed(all)
	var rr Result
	var report *staging.RelayReport
	if !opts.DryRun && !opts.Force && len(files) > 0 {
		if err := staging.CheckFree(spec.Dst, spec.MinFree); err != nil {
			return staging.Result{}, err
		}
		var rerr error
		rr, rerr = h.Receiver.Run(ctx, h.job(spec, opts, mirror, files))
		report = &staging.RelayReport{Files: rr.Files, Present: rr.Present, Refetched: rr.Refetched, PeerFailures: rr.PeerFailures, Resumed: rr.Resumed}
		if rerr != nil {
			if _, perm := fault.TypeOf(rerr); perm || ctx.Err() != nil {
				return staging.Result{Relay: report, Sources: staging.Sources{FromNAS: rr.FromNAS, FromPeers: rr.FromPeers}}, rerr
			}
			report.Error = rerr.Error()
			log.Warn("relay stopped early; the hub-mirror pass reads the rest from the NAS", zap.String("block", h.Key), zap.Error(rerr))
		}
	}
	res, err := hubmirror.Stage(ctx, spec, ledgerPass(opts, rr))
	res.Relay = report
	// The hub-mirror pass reads the NAS too (it counts what).
	res.FromNAS = rr.FromNAS + res.NASRead
	res.FromPeers = rr.FromPeers
	// What the relay wrote is this pass's copying too (the ledger pass
	// adopted those files without copying).
	res.CopiedBytes += rr.Written
	res.CopiedFiles += rr.Received
	return res, err
}

// relayed picks the files worth relaying out of a block's listing: large
// enough to save NAS reads, and content-addressed blobs, which every
// receiver confirms whole by their name whatever the verify mode (a peer
// may have read a torn source; samples could miss it). Other files are
// rare at that size and are read from the NAS by each node.
func relayed(all []File) []File {
	var files []File
	for _, f := range all {
		if f.Size < MinRelaySize || f.WantSHA == "" {
			continue
		}
		files = append(files, f)
	}
	return files
}

// job is this node's relay job for the block's files, reporting its
// progress as staging progress.
func (h HubMirror) job(spec hubmirror.Spec, opts staging.Options, mirror string, files []File) Job {
	job := Job{Key: h.Key, Node: h.Node, Nodes: h.Nodes, Peers: h.Peers, Mirror: mirror, Roots: spec.Roots,
		Files: files, SHA256: spec.Verify == "sha256", Parallel: opts.Parallel, Chunk: h.Chunk, Pacer: opts.Pacer}
	if opts.OnProgress != nil {
		job.OnProgress = func(p Progress) {
			opts.OnProgress(staging.Progress{FilesTotal: p.FilesTotal, FilesDone: p.FilesDone, BytesTotal: p.BytesTotal, BytesDone: p.BytesDone,
				Sources: staging.Sources{FromNAS: p.FromNAS, FromPeers: p.FromPeers}})
		}
	}
	return job
}

// ledgerPass is the options of the hub-mirror pass after the relay: it
// takes the relay's checks against the NAS instead of sampling again, and
// its progress carries the relay's counts (what it copies itself from the
// NAS shows in the result).
func ledgerPass(opts staging.Options, rr Result) staging.Options {
	inner := opts
	inner.Checked = rr.Checked // compared with the NAS just now: not sampled again
	if opts.OnProgress != nil {
		inner.OnProgress = func(p staging.Progress) {
			p.FromNAS = rr.FromNAS
			p.FromPeers = rr.FromPeers
			opts.OnProgress(p)
		}
	}
	return inner
}
