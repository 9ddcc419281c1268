package disk

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// Room is how MakeRoom would free (or freed) the filesystem holding a
// stage's dst: the blocks it takes, least recently served first, and what
// removing them frees there. A block frees only its inodes on that
// filesystem whose every link goes with the blocks taken: a file hard
// linked from a block that stays (another lane's mirror, an export kept)
// or a block on another filesystem frees nothing, and is never named.
type Room struct {
	// Path is the directory short of space; Need the free bytes it must
	// have, Free what it has.
	Path       string
	Need, Free int64
	// Take are the blocks chosen (removed unless a dry run): a smallest
	// set in LRU order whose removal frees enough, or nothing when no set
	// does.
	Take []Removal
	// Frees is what removing Take frees on Path's filesystem; All what
	// removing every block that may be pruned would free there.
	Frees, All int64
	// Nothing are the lanes whose blocks may be pruned but would free
	// nothing there.
	Nothing []string
	// Enough says Take frees enough.
	Enough bool
}

// MakeRoom frees the filesystem holding path until it has need bytes
// free, pruning least recently served blocks (never one of a protected
// lane) beneath any of the node's roots; with dryRun it only says which
// it would take. A block counts for what removing it would actually free
// on that filesystem (frees), so one that frees nothing is never taken.
func MakeRoom(roots []string, blocks []Block, path string, need int64, protected []string, dryRun bool) (Room, error) {
	room := Room{Path: path, Need: need}
	if _, err := staging.RootFor(path, roots); err != nil {
		return room, err
	}
	dev, err := staging.DevOf(path)
	if err != nil {
		return room, err
	}
	if room.Free, err = staging.FreeBytes(path); err != nil {
		return room, err
	}
	cands, nothing := candidates(Scan(roots, blocks), protected, dev)
	room.Nothing = nothing
	room.All = frees(cands, dev)
	take := chooseRoom(cands, dev, need-room.Free)
	room.Enough = take != nil || room.Free >= need
	room.Frees = frees(take, dev)
	for _, u := range take {
		rm := Removal{Usage: u}
		if !dryRun {
			if err := removeBlock(u, roots); err != nil {
				rm.Error = err.Error()
			} else {
				rm.Removed = true
			}
		}
		room.Take = append(room.Take, rm)
	}
	return room, nil
}

// candidates are the scanned blocks a prune may take that would free
// something on dev, least recently served first; nothing names the lanes
// of those that would free nothing there.
func candidates(scan []Root, protected []string, dev uint64) (cands []Usage, nothing []string) {
	hold := map[string]bool{}
	for _, l := range protected {
		hold[l] = true
	}
	for _, r := range scan {
		for _, u := range r.Blocks {
			held := false
			for _, l := range u.Lanes {
				held = held || hold[l]
			}
			if held || !u.Present || u.Error != "" {
				continue
			}
			if frees([]Usage{u}, dev) > 0 {
				cands = append(cands, u)
				continue
			}
			nothing = append(nothing, u.Lanes...)
		}
	}
	sort.SliceStable(cands, func(a, b int) bool {
		x, y := cands[a], cands[b]
		if !x.LastServed.Equal(y.LastServed) {
			return x.LastServed.Before(y.LastServed)
		}
		return x.VerifiedAt.Before(y.VerifiedAt)
	})
	slices.Sort(nothing)
	return cands, slices.Compact(nothing)
}

// chooseRoom takes candidates in order until removing them frees want
// bytes on dev, then drops, newest first, each one the rest frees enough
// without: a smallest set, nil when want ≤ 0 or no set frees enough.
func chooseRoom(cands []Usage, dev uint64, want int64) []Usage {
	if want <= 0 {
		return nil
	}
	var take []Usage
	for _, u := range cands {
		take = append(take, u)
		if frees(take, dev) >= want {
			break
		}
	}
	if frees(take, dev) < want {
		return nil
	}
	for i := len(take) - 1; i >= 0 && len(take) > 1; i-- {
		rest := append(append([]Usage(nil), take[:i]...), take[i+1:]...)
		if frees(rest, dev) >= want {
			take = rest
		}
	}
	return take
}

// frees is what removing the blocks bs together frees on the filesystem
// dev: the allocated bytes of each of their files there whose every link
// is in them. Directories are left out: the few KiB they hold would make
// a block of links to files that stay look like one that frees something.
func frees(bs []Usage, dev uint64) int64 {
	links := map[[2]uint64]uint64{}
	uses := map[[2]uint64]*inodeUse{}
	for _, u := range bs {
		for k, in := range u.inodes {
			if k[0] == dev {
				links[k] += in.links
				uses[k] = in
			}
		}
	}
	var n int64
	for k, in := range uses {
		if !in.dir && links[k] >= in.nlink {
			n += in.bytes
		}
	}
	return n
}

// Lanes are the lanes of the blocks taken, each once, sorted.
func (r Room) Lanes() []string {
	var out []string
	for _, t := range r.Take {
		out = append(out, t.Lanes...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Hint says what would make room on node: the lanes whose blocks would
// free enough and the prune command, or, when none would, so, with what
// the blocks that may be pruned would free and what to do instead.
func (r Room) Hint(node string) string {
	where := fmt.Sprintf("on the filesystem of %s (need %s free, have %s)", r.Path, contract.HumanBytes(r.Need), contract.HumanBytes(r.Free))
	if r.Free >= r.Need {
		return fmt.Sprintf("there is enough free now %s: stage again", where)
	}
	if r.Enough && len(r.Take) > 0 {
		lanes := r.Lanes()
		return fmt.Sprintf("the blocks of lanes %s would free enough (%s %s): starter disk prune --lane %s --node %s, or stage again with --make-room",
			strings.Join(lanes, ", "), contract.HumanBytes(r.Frees), where, strings.Join(lanes, " --lane "), node)
	}
	var zero string
	if len(r.Nothing) > 0 {
		zero = fmt.Sprintf("; the blocks of lanes %s would free 0 B there (their files are linked from blocks that stay, or lie on another filesystem)", strings.Join(r.Nothing, ", "))
	}
	if r.All == 0 {
		return fmt.Sprintf("no lane's blocks would free any space %s%s: free space there by hand (see starter disk --node %s) or lower min_free", where, zero, node)
	}
	return fmt.Sprintf("no lane's blocks would free enough %s: even the blocks of every lane not staging or running here would free only %s%s: free space there by hand (see starter disk --node %s) or lower min_free",
		where, contract.HumanBytes(r.All), zero, node)
}
