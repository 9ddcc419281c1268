package contract

import "time"

// A lane's engine image on the nodes, as it travels: the same JSON as
// internal/engine/images' types, owned here.

// ImageInventory is what one node has of an image.
type ImageInventory struct {
	Node string `json:"node"`
	// Present: the node has the image (under the recipe's tag, with the
	// pinned digest if any).
	Present bool `json:"present"`
	// ID, RepoDigests, DiffIDs and Size describe the image when Present.
	ID          string   `json:"id,omitempty"`
	RepoDigests []string `json:"repo_digests,omitempty"`
	DiffIDs     []string `json:"diff_ids,omitempty"`
	Size        int64    `json:"size,omitempty"`
	// Unpinned: the node has an image under the recipe's tag that does
	// not carry the pinned repo digest; it is the image only if its ID is
	// the one the nodes with the digest have.
	Unpinned bool `json:"unpinned,omitempty"`
	// HaveLayers, for a node without the image, is how many of the
	// image's layers (a prefix of its chain) the node already has.
	HaveLayers int `json:"have_layers,omitempty"`
	// Containerd: the node's Docker keeps images in the containerd store,
	// so the node is sent every layer.
	Containerd bool `json:"containerd,omitempty"`
}

// ImageSpec is what a transfer moves: the image, its layer chain, the
// first layer the stream carries and the tag it is loaded under.
type ImageSpec struct {
	ID      string   `json:"id"`
	DiffIDs []string `json:"diff_ids"`
	From    int      `json:"from"`
	Tag     string   `json:"tag"`
}

// ImageMoved is what one chain member of a transfer moved.
type ImageMoved struct {
	Node string `json:"node"`
	// BytesIn is what it received (0 for the source), BytesOut what it
	// sent to its downstream.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// Layers is how many layer files the stream carried.
	Layers int `json:"layers"`
}

// ImagePulled is an image a node pulled from a registry.
type ImagePulled struct {
	ID     string `json:"id"`
	Digest string `json:"digest,omitempty"`
	From   string `json:"from"`
}

// ImageListed is one image of a node's Docker (starter images).
type ImageListed struct {
	ID   string   `json:"id"`
	Tags []string `json:"tags,omitempty"`
	Size int64    `json:"size"`
	// Lanes name it in their recipe's image (tag or pinned digest).
	Lanes []string `json:"lanes,omitempty"`
	// Containers use it (any state); Running of them are running.
	Containers int `json:"containers,omitempty"`
	Running    int `json:"running,omitempty"`
	// LastUsed is the latest creation of a container from it, else when it
	// was last tagged here, else its creation.
	LastUsed time.Time `json:"last_used"`
}

// Unused reports whether no lane names the image and no container uses it.
func (l ImageListed) Unused() bool { return len(l.Lanes) == 0 && l.Containers == 0 }

// ImagePrune is what an LRU prune did to a node's images.
type ImagePrune struct {
	// Root is Docker's data root, whose free space the prune reaches for.
	Root string `json:"root,omitempty"`
	// Removed are the images taken (removed unless a dry run), Kept why
	// the others stay (when the free target was not reached).
	Removed []ImageListed `json:"removed,omitempty"`
	Kept    []string      `json:"kept,omitempty"`
	Error   string        `json:"error,omitempty"`
	// FreeBefore/FreeAfter on Root.
	FreeBefore int64 `json:"free_before"`
	FreeAfter  int64 `json:"free_after"`
	Enough     bool  `json:"enough"`
	// DryRun: Removed were chosen, not removed.
	DryRun bool `json:"dry_run,omitempty"`
}
