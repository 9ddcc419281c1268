package activities

import (
	"context"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
)

// Seams are the activities' fault points: hooks a test sets through the
// worker's options (workers.Options) to stop, hold or fail an activity
// at a place it chooses — a byte count, a boot, the moment after a write —
// instead of racing a sleep against the code. Production workers have
// none: every field is optional, a nil *Seams is the production value,
// and nothing here is ever armed from the environment or a file. A test
// that must kill a worker kills it itself, from outside, at the point a
// hook reports (internal/testkit/testworker).
type Seams struct {
	// FetchProgress is called as a Hub fetch (FetchRepo) starts, with 0,
	// and as its bytes arrive, with the bytes downloaded over HTTP so far
	// in this attempt. It may block: the download waits for it (a kill -9
	// test blocks here, and kills the worker's process once it has seen
	// the count; a later attempt in the same process blocks as it starts).
	FetchProgress func(ctx context.Context, repo string, downloaded int64)
	// StageHold is called as a staging pass (StageBlock) reports its
	// progress. nil lets the pass go on; a channel holds it there: it
	// copies nothing more and heartbeats its progress with Paused set
	// (so the run shows where it holds, and a cancel still reaches it)
	// until the channel is closed or the activity's context ends. A pass
	// holds at most once.
	StageHold func(ctx context.Context, lane, block string, p contract.StageProgress) <-chan struct{}
	// BootID, when it returns non-empty, is node's boot id instead of the
	// kernel's (/proc/sys/kernel/random/boot_id): workers on one test
	// machine share its boot, so a test simulates a node's reboot here.
	BootID func(node string) string
	// MemAvailable, when set, is the node's MemAvailable in bytes instead
	// of /proc/meminfo's, for the memory floor a staging pass beside a
	// serving lane keeps ([staging] min_available): simulated nodes share
	// one machine's memory, so a test makes one node short of it here.
	MemAvailable func(node string) int64
	// BenchWritten runs after a Bench attempt wrote its bundle and before
	// it recorded it; an error it returns fails the attempt there, as a
	// worker lost at that moment would.
	BenchWritten func(ctx context.Context) error
	// ImageLayers runs after a node receiving an image made its first
	// layers durable (a helper tag holds them: images.PartialRepo), with
	// their count. It may block: the receiver's loads wait for it (a test
	// holds a transfer at a layer boundary and stops the node's Docker
	// there); an error it returns ends the receive there.
	ImageLayers func(ctx context.Context, node, image string, layers int) error
}

// fetchProgress calls the FetchProgress seam, if set.
func (s *Seams) fetchProgress(ctx context.Context, repo string, downloaded int64) {
	if s != nil && s.FetchProgress != nil {
		s.FetchProgress(ctx, repo, downloaded)
	}
}

// stageHold asks the StageHold seam about p and, when it holds the pass,
// heartbeats p (Paused set) every half second until it lets go or ctx
// ends. It reports whether it held.
func (s *Seams) stageHold(ctx context.Context, lane, block string, p contract.StageProgress) bool {
	if s == nil || s.StageHold == nil {
		return false
	}
	release := s.StageHold(ctx, lane, block, p)
	if release == nil {
		return false
	}
	p.Paused = true
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		heartbeat(ctx, p)
		select {
		case <-release:
			return true
		case <-ctx.Done():
			return true
		case <-tick.C:
		}
	}
}

// bootID is the BootID seam's answer for node ("" when unset).
func (s *Seams) bootID(node string) string {
	if s == nil || s.BootID == nil {
		return ""
	}
	return s.BootID(node)
}

// imageDurable is the image receiver's Member.Durable calling the
// ImageLayers seam for node (nil when unset: the production value).
func (s *Seams) imageDurable(ctx context.Context, node string) func(images.Spec, int) error {
	if s == nil || s.ImageLayers == nil {
		return nil
	}
	return func(spec images.Spec, layers int) error { return s.ImageLayers(ctx, node, spec.Tag, layers) }
}

// benchWritten runs the BenchWritten seam, if set.
func (s *Seams) benchWritten(ctx context.Context) error {
	if s == nil || s.BenchWritten == nil {
		return nil
	}
	return s.BenchWritten(ctx)
}

// memAvailable is the MemAvailable seam's reader for node, or nil when
// unset (the worker reads the node's meminfo).
func (s *Seams) memAvailable(node string) func() (int64, error) {
	if s == nil || s.MemAvailable == nil {
		return nil
	}
	return func() (int64, error) { return s.MemAvailable(node), nil }
}
