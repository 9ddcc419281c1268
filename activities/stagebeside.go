package activities

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/memfit"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// stageBeat is what a StageBlock heartbeats: its engine's last progress,
// with the lanes it stages beside and why its writes wait. The engine's
// progress and the pacer's reasons arrive on different goroutines (the
// relay reports from each file's), hence the lock.
type stageBeat struct {
	mu      sync.Mutex
	p       staging.Progress
	beside  []string
	waiting string
	last    time.Time // the last progress heartbeated
	held    bool      // the StageHold seam held the pass (it holds once)
}

// set records the engine's progress p.
func (b *stageBeat) set(p staging.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.p = p
}

// due says whether the progress just set is heartbeated now: at most
// every half second, but always while files are in flight or rows resume
// (their fsynced offsets must reach the heartbeat).
func (b *stageBeat) due() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.last) < 500*time.Millisecond && len(b.p.InFlight) == 0 && b.p.NextRow == 0 {
		return false
	}
	b.last = time.Now()
	return true
}

// wait records why the writes wait ("" once they go on) and reports
// whether that changed.
func (b *stageBeat) wait(why string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := b.waiting != why
	b.waiting = why
	return changed
}

// details is the heartbeat: the progress, beside whom, waiting on what.
func (b *stageBeat) details() contract.StageProgress {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := stageProgress(b.p)
	d.Beside = b.beside
	d.Waiting = b.waiting
	return d
}

// hold asks the StageHold seam once whether to hold the pass here.
func (a *NodeActivities) hold(ctx context.Context, in contract.StageBlockInput, b *stageBeat) {
	if a.Seams == nil {
		return
	}
	b.mu.Lock()
	held := b.held
	b.mu.Unlock()
	if held || !a.Seams.stageHold(ctx, in.Lane, in.Block.ID, b.details()) {
		return
	}
	b.mu.Lock()
	b.held = true
	b.mu.Unlock()
}

// pacer is how a StageBlock's writes are paced: beside the lanes whose
// containers run on this node (a cutover staging the next lane while the
// previous one serves), at most [staging] serving_rate, and paused while
// the node's MemAvailable is under [staging] min_available, each reason
// heartbeated. A node that serves nothing stages unpaced (nil): the
// floor guards a running engine from the OOM killer, and an idle node
// has none. When the running lanes cannot be listed (Docker not
// answering), the floor still applies — an engine may run, and the floor
// costs nothing while memory is plentiful — but not the rate. A dry run
// writes nothing and is never paced.
func (a *NodeActivities) pacer(ctx context.Context, in contract.StageBlockInput, b *stageBeat) *staging.Pacer {
	if in.DryRun {
		return nil
	}
	lanes, err := a.runningLanes(ctx)
	if err == nil && len(lanes) == 0 {
		return nil
	}
	c := staging.PacerConfig{MinAvailable: a.Staging.Floor(), MemAvailable: a.memAvailable()}
	if err != nil {
		a.Log.Warn("could not list the lanes running here: staging keeps the memory floor, without the serving rate", zap.String("block", in.Block.ID), zap.Int64("min_available", c.MinAvailable), zap.Error(err))
	} else {
		c.Rate = a.Staging.ServingRate
		b.mu.Lock()
		b.beside = lanes
		b.mu.Unlock()
		a.Log.Info("staging beside serving lanes", zap.String("block", in.Block.ID), zap.String("beside", strings.Join(lanes, ",")),
			zap.Int64("serving_rate", c.Rate), zap.Int64("min_available", c.MinAvailable))
	}
	c.OnWait = func(why string) {
		if b.wait(why) {
			if why != "" {
				a.Log.Warn("staging "+why, zap.String("lane", in.Lane), zap.String("block", in.Block.ID))
			} else {
				a.Log.Info("staging resumed: MemAvailable is back over min_available", zap.String("lane", in.Lane), zap.String("block", in.Block.ID))
			}
		}
		heartbeat(ctx, b.details())
	}
	return staging.NewPacer(c)
}

// memAvailable reads this node's MemAvailable: the test seam's, else
// the node's meminfo (MemInfo; empty: /proc/meminfo).
func (a *NodeActivities) memAvailable() func() (int64, error) {
	if f := a.Seams.memAvailable(a.Node.Name); f != nil {
		return f
	}
	return func() (int64, error) { return memfit.ReadMemAvailable(a.MemInfo) }
}
