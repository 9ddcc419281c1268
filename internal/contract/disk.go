package contract

import "time"

// Staged blocks on a node's disk as they travel (starter disk, disk prune,
// make-room): the same JSON as internal/engine/disk's types, owned here.

// DiskBlock is one block a lane's recipe stages on a node.
type DiskBlock struct {
	// Lanes are every lane whose recipe stages this dst on the node.
	Lanes []string `json:"lanes"`
	// ID is the block's id in the (first) lane's recipe.
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Dst is the block's dst as configured; Local the same path as the
	// node's worker sees it (fs_root applied).
	Dst   string `json:"dst"`
	Local string `json:"local"`
	// Exports are a hub-mirror block's export trees, as configured and local.
	Exports      []string `json:"exports,omitempty"`
	LocalExports []string `json:"local_exports,omitempty"`
}

// DiskUsage is a block as found on the node.
type DiskUsage struct {
	DiskBlock
	// Root is the node root holding the block (local path).
	Root string `json:"root"`
	// Present is false when nothing is staged at dst.
	Present bool `json:"present"`
	// Bytes are the bytes the block occupies on disk: what a prune frees.
	Bytes int64 `json:"bytes"`
	// VerifiedAt is the newest verification in the block's ledger;
	// LastServed the last time a serve mounted it (zero: never).
	VerifiedAt time.Time `json:"verified_at,omitempty"`
	LastServed time.Time `json:"last_served,omitempty"`
	// Error is why the block could not be read; it is then never pruned.
	Error string `json:"error,omitempty"`
}

// DiskRoot is one node root: its free space and the blocks under it.
type DiskRoot struct {
	Root   string      `json:"root"`
	Free   int64       `json:"free"`
	Error  string      `json:"error,omitempty"`
	Blocks []DiskUsage `json:"blocks"`
}

// PruneSpec says which blocks (and images) a prune removes.
type PruneSpec struct {
	// Lanes prunes every block of these lanes (a block another, kept lane
	// shares is kept too, and said so).
	Lanes []string `json:"lanes,omitempty"`
	// LRU prunes least recently served blocks first until every root
	// holding blocks has Free bytes free.
	LRU  bool  `json:"lru,omitempty"`
	Free int64 `json:"free,omitempty"`
	// Protected lanes are running somewhere: their blocks are never removed.
	Protected []string `json:"protected,omitempty"`
	// DryRun chooses and reports, removing nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Images: an LRU prune also removes unused images, least recently used
	// first, until Docker's data root has Free bytes free.
	Images bool `json:"images,omitempty"`
}

// PruneResult is what a prune removed (or would).
type PruneResult struct {
	Removals []DiskRemoval `json:"removals"`
	// Kept are the blocks a lane prune or LRU could not take, with why.
	Kept []string `json:"kept,omitempty"`
	// FreeBefore/FreeAfter per root; Enough is false when the free target
	// could not be reached with the blocks allowed.
	FreeBefore map[string]int64 `json:"free_before"`
	FreeAfter  map[string]int64 `json:"free_after"`
	Enough     bool             `json:"enough"`
}

// DiskRemoval is one block a prune took.
type DiskRemoval struct {
	DiskUsage
	// Removed is true once it is gone; Error when removing it failed.
	Removed bool   `json:"removed"`
	Error   string `json:"error,omitempty"`
}
