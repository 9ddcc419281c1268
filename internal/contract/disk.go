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

// NodeDiskInput names the staged blocks the control side knows of for this
// node (every lane's recipe that places the node); the node worker reads
// its own disk, so a remote node is listed the same as a local one.
type NodeDiskInput struct {
	Blocks []DiskBlock `json:"blocks"`
	// Prune, when set, removes blocks (DiskPrune only).
	Prune *PruneSpec `json:"prune,omitempty"`
	// Images, when set, also lists the node's images: each lane's recipe
	// image reference → the lanes naming it (an LRU prune with
	// Prune.Images removes only images no lane names and no container uses).
	Images map[string][]string `json:"images,omitempty"`
}

// NodeDiskResult is one node's roots and blocks, and the lanes running here
// (whose blocks a prune never takes).
type NodeDiskResult struct {
	Node    string     `json:"node"`
	Roots   []DiskRoot `json:"roots"`
	Running []string   `json:"running,omitempty"`
	// Prune is the prune's outcome (DiskPrune only).
	Prune *PruneResult `json:"prune,omitempty"`
	// Images are the node's images (NodeDiskInput.Images set), ImageError why
	// they could not be listed, ImagePrune an LRU prune's part on them.
	Images     []ImageListed `json:"images,omitempty"`
	ImageError string        `json:"image_error,omitempty"`
	ImagePrune *ImagePrune   `json:"image_prune,omitempty"`
}

// DiskInput asks every listed node's worker for its staged blocks and,
// with Prune, to remove some. Blocks are per node: the blocks of every
// lane whose recipe places the node (the control side reads the recipes,
// the node reads its disk).
type DiskInput struct {
	Nodes  []string               `json:"nodes"`
	Blocks map[string][]DiskBlock `json:"blocks"`
	// Prune, when set, removes blocks on every node (least recently
	// served first with LRU), never of a lane running on any node.
	Prune *PruneSpec `json:"prune,omitempty"`
	// PickupTimeout is how long a node worker may take to answer.
	PickupTimeout Duration `json:"pickup_timeout,omitempty"`
	// Images, when set, lists every node's images too (starter images,
	// disk prune --lru): each lane's recipe image → the lanes naming it.
	Images map[string][]string `json:"images,omitempty"`
}

// DiskNode is one node's answer, or why there is none.
type DiskNode struct {
	Node  string          `json:"node"`
	Error string          `json:"error,omitempty"`
	Disk  *NodeDiskResult `json:"disk,omitempty"`
}

// DiskResult is the fleet's staged blocks (after a prune, when asked),
// and the lanes running anywhere (never pruned).
type DiskResult struct {
	Nodes   []DiskNode `json:"nodes"`
	Running []string   `json:"running,omitempty"`
}
