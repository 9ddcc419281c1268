package activities

import (
	"context"
	"fmt"
	"strings"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/disk"
	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// StageRoom says whether the lane's blocks fit on this node beside what
// is there now (the lane running here included): each block is planned as
// a dry run (nothing written; min_free left out so the plan always
// counts), its bytes still to write plus min_free's headroom are summed
// per filesystem and set against its free space, and with in.Room's
// MakeRoom what pruning least recently served blocks of lanes that do not
// run would free is counted too. A cutover stages ahead only when every
// node answers OK.
func (a *NodeActivities) StageRoom(ctx context.Context, in contract.StageRoomInput) (contract.StageRoomResult, error) {
	res := contract.StageRoomResult{Node: a.Node.Name}
	running, err := a.runningLanes(ctx)
	if err != nil {
		return res, classify(err)
	}
	res.Running = running
	stop := keepAlive(ctx)
	defer stop()
	byDev := map[uint64]*contract.StageRoomFit{}
	var order []uint64
	for _, b := range in.Blocks {
		need, dst, err := a.blockNeed(ctx, in, b)
		if err != nil {
			return res, classify(fmt.Errorf("node %s, block %s: %w", a.Node.Name, b.ID, err))
		}
		dev, err := staging.DevOf(dst)
		if err != nil {
			return res, classify(fmt.Errorf("node %s, block %s: %w", a.Node.Name, b.ID, err))
		}
		fit, ok := byDev[dev]
		if !ok {
			free, err := staging.FreeBytes(dst)
			if err != nil {
				return res, classify(fmt.Errorf("node %s, block %s: %w", a.Node.Name, b.ID, err))
			}
			fit = &contract.StageRoomFit{Path: dst, Free: free}
			byDev[dev] = fit
			order = append(order, dev)
		}
		fit.Need += need
	}
	res.OK, res.AfterStop = true, true
	var short []string
	for _, dev := range order {
		fit := byDev[dev]
		if fit.Need > fit.Free && in.Room != nil && in.Room.MakeRoom {
			fit.Freeable = a.freeable(in, fit, append([]string{in.Lane}, running...))
			fit.FreeableAfterStop = a.freeable(in, fit, []string{in.Lane})
		}
		res.Roots = append(res.Roots, *fit)
		if fit.Need > fit.Free+fit.Freeable {
			res.OK = false
			short = append(short, fmt.Sprintf("%s needs %s more than it has", fit.Path, contract.HumanBytes(fit.Need-fit.Free-fit.Freeable)))
		}
		res.AfterStop = res.AfterStop && fit.Need <= fit.Free+fit.FreeableAfterStop
	}
	if !res.OK {
		beside := "beside no running lane"
		if len(running) > 0 {
			beside = "beside lane " + strings.Join(running, ", ")
		}
		res.Why = fmt.Sprintf("%s: %s %s", a.Node.Name, strings.Join(short, "; "), beside)
		switch {
		case res.AfterStop || len(running) == 0:
		case in.Room != nil && in.Room.MakeRoom:
			res.Why += "; pruning after its stop would not free enough either"
		default:
			res.Why += "; stopping it frees no disk by itself (--make-room prunes its blocks once it stops)"
		}
	}
	return res, nil
}

// blockNeed is what block b still has to write on this node plus
// min_free's headroom (staging.CheckFreeToWrite's arithmetic), and the
// node-local path its bytes land under.
func (a *NodeActivities) blockNeed(ctx context.Context, in contract.StageRoomInput, b contract.Staging) (int64, string, error) {
	opts := staging.Options{DryRun: true}
	var r staging.Result
	var err error
	var dst string
	minFree := b.MinFree
	switch b.Kind {
	case "hub-mirror":
		spec := a.hubSpec(b)
		spec.MinFree = 0
		dst = spec.Dst
		r, err = hubmirror.Stage(ctx, spec, opts)
	case "sparse-rows":
		spec := a.rowsSpec(b, in.Rank, in.TP)
		spec.MinFree = 0
		dst = spec.Dst
		r, err = sparserows.Stage(ctx, spec, opts)
	default:
		return 0, "", fmt.Errorf("unknown kind %q (hub-mirror | sparse-rows)", b.Kind)
	}
	if err != nil {
		return 0, dst, err
	}
	if r.CopiedBytes <= 0 {
		return 0, dst, nil
	}
	return r.CopiedBytes + max(0, int64(minFree)-r.TotalBytes), dst, nil
}

// freeable is what pruning least recently served blocks of lanes outside
// protected would free on fit's filesystem (a dry run; 0 when it cannot
// tell).
func (a *NodeActivities) freeable(in contract.StageRoomInput, fit *contract.StageRoomFit, protected []string) int64 {
	room, err := disk.MakeRoom(a.roots(), a.localBlocks(in.Room.Blocks), fit.Path, fit.Need, protected, true)
	if err != nil {
		return 0
	}
	return room.Frees
}
