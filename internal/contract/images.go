package contract

import (
	"slices"
	"strings"
	"time"
)

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
	// Bytes and Layers are what crossed the network: the compressed
	// layers the node lacked (0 when it had the image's layers).
	Bytes  int64 `json:"bytes,omitempty"`
	Layers int   `json:"layers,omitempty"`
	// Platform is the node's (os/arch) the image was chosen for.
	Platform string `json:"platform,omitempty"`
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

// BuildImageInput builds a lane's image on this node from its [build].
type BuildImageInput struct {
	// Image is the tag the result gets (the recipe's image).
	Image ImageRef `json:"image"`
	Build Build    `json:"build"`
}

// BuildImageResult is the image built and the build log's last lines.
type BuildImageResult struct {
	Node string   `json:"node"`
	ID   string   `json:"id"`
	Tail []string `json:"tail,omitempty"`
}

// PullImageInput pulls a lane's image on this node from a registry
// through sparklane's own registry client, into the node's Docker: paths
// and names only, never credentials.
type PullImageInput struct {
	// Image is the recipe's image: the tag the pulled image gets and the
	// digest it must carry when pinned.
	Image    ImageRef `json:"image"`
	Registry string   `json:"registry"`
	// AuthFile is a credentials file on the node: only runs started
	// before the credentials moved to the control host set it.
	AuthFile string `json:"auth_file,omitempty"`
	// Credentials is the path on the node of the one-pull credentials
	// file the control service wrote there (SendRegistryAuth): the node
	// reads and removes it as the pull starts. "" pulls anonymously.
	Credentials string `json:"credentials,omitempty"`
	// AuthFrom is the control host's auth file the credentials came from
	// (image_registry_auth_file), named in errors only.
	AuthFrom string `json:"auth_from,omitempty"`
	// Insecure lets the pull use plain HTTP or unverified TLS
	// (image_insecure_registries); ConfigFile is the fleet config errors
	// tell the operator to edit.
	Insecure   bool   `json:"insecure,omitempty"`
	ConfigFile string `json:"config_file,omitempty"`
}

// RegistryAuthInput asks the control service to hand Node the
// credentials for Registry's host from AuthFile (a Docker config.json on
// the control host) as a file only one pull reads.
type RegistryAuthInput struct {
	Node     string `json:"node"`
	Registry string `json:"registry"`
	AuthFile string `json:"auth_file"`
}

// RegistryAuthResult is where the credentials file is on the node ("":
// AuthFile has no credentials for that registry; the pull is anonymous).
type RegistryAuthResult struct {
	Path string `json:"path,omitempty"`
}

// RegistryAuthDrop removes a credentials file SendRegistryAuth wrote,
// once its pull has ended (however it ended).
type RegistryAuthDrop struct {
	Node string `json:"node"`
	Path string `json:"path"`
}

// PullImageResult is the image pulled.
type PullImageResult struct {
	Node string `json:"node"`
	ImagePulled
}

// BuildProgress is a build's heartbeat: the log's latest line.
type BuildProgress struct {
	Line string `json:"line"`
}

// EnsureImageInput names the image a node must have.
type EnsureImageInput struct {
	Image ImageRef `json:"image"`
	// Build is how the recipe builds the image (builder, build_args), for
	// the error of a node that lacks it.
	Build string `json:"build,omitempty"`
	// Resolve: a pinned repo:tag@sha256:D this node has only under its
	// tag (moved here: `docker load` sets no repo digest) is reported
	// Unpinned with its ID instead of missing; the workflow accepts it
	// only with the ID of the nodes that carry the digest.
	Resolve bool `json:"resolve,omitempty"`
}

// EnsureImageResult is the image found.
type EnsureImageResult struct {
	Node   string `json:"node"`
	ID     string `json:"id"`
	Digest string `json:"digest,omitempty"`
	// Unpinned: found under the pinned reference's tag without its digest
	// (EnsureImageInput.Resolve).
	Unpinned bool `json:"unpinned,omitempty"`
}

// ImageInventoryInput asks a node what it has of a lane's image.
type ImageInventoryInput struct {
	Image ImageRef `json:"image"`
	// DiffIDs, when given (the image's layers, from a node that has it),
	// ask how many of them a node without the image already has.
	DiffIDs []string `json:"diff_ids,omitempty"`
	// Want, when set, is the image ID the run moves (one it just built):
	// a node with another image under the tag reports it lacks the image.
	Want string `json:"want,omitempty"`
}

// ImageInventoryResult is one node's inventory of the image, and where
// it would serve a transfer to the next node.
type ImageInventoryResult struct {
	ImageInventory
	// Addr is the node's address:image_port ("" when the node has no
	// address or no fleet identity: it cannot take part in a transfer).
	Addr string `json:"addr,omitempty"`
	// NoTransfer says why Addr is empty.
	NoTransfer string `json:"no_transfer,omitempty"`
}

// TransferImageInput is one chain member's part of an image transfer
// (images.Plan): the source sends, the others receive from Upstream and
// forward to Downstream.
type TransferImageInput struct {
	Spec ImageSpec `json:"spec"`
	// Have is how many of the image's layers this node had when planned.
	Have         int    `json:"have,omitempty"`
	Upstream     string `json:"upstream,omitempty"`
	UpstreamAddr string `json:"upstream_addr,omitempty"`
	Downstream   string `json:"downstream,omitempty"`
	// Lane labels the bytes received in sparklane_image_bytes_total (runs
	// before it: "").
	Lane string `json:"lane,omitempty"`
}

// TransferImageResult is what the member moved.
type TransferImageResult struct {
	ImageMoved
}

// ImageBuild is how the image step builds a lane's image.
type ImageBuild struct {
	// Image is the recipe's image: the tag the build gives.
	Image ImageRef `json:"image"`
	Spec  Build    `json:"spec"`
	// Node builds it (the recipe's [build] node, --node, or the head).
	Node  string `json:"node"`
	Force bool   `json:"force,omitempty"`
}

// ImagePull is how the image step pulls a lane's image from a registry
// on one node: the registry and the path of its auth file, never
// credentials.
type ImagePull struct {
	Image    ImageRef `json:"image"`
	Registry string   `json:"registry"`
	// AuthFile is a Docker config.json on the control host (runs started
	// before versionPullCredentials: a file on the node).
	AuthFile string `json:"auth_file,omitempty"`
	// Node pulls it (the node the stage is for, or the cluster's head).
	Node string `json:"node"`
	// Insecure: the registry is in image_insecure_registries of
	// ConfigFile (plain HTTP or unverified TLS allowed).
	Insecure   bool   `json:"insecure,omitempty"`
	ConfigFile string `json:"config_file,omitempty"`
}

// ImageNodeResult is one node's part of the image step of stage (and so
// cutover): whether the image was there, what moved to it and from where.
type ImageNodeResult struct {
	Node  string   `json:"node"`
	Image ImageRef `json:"image"`
	// State: "present ID", "missing: has N of M layers, K would move" (a
	// dry run), or "received N layers (B bytes)".
	State string `json:"state"`
	ID    string `json:"id,omitempty"`
	// From is the node it receives from (its upstream in the chain).
	From     string `json:"from,omitempty"`
	BytesIn  int64  `json:"bytes_in,omitempty"`
	BytesOut int64  `json:"bytes_out,omitempty"`
	Layers   int    `json:"layers,omitempty"`
	// Error is a dry run's refusal (the run would stop with it).
	Error string `json:"error,omitempty"`
}

// BuildFor is how a run builds r's image when no node of plan has it: its
// [build] on only (stage --node), else the recipe's build node, else the
// plan's head; tagged as the plan's image (rendered and parsed). Nil when
// the recipe has no [build] or the plan no node.
func (r Recipe) BuildFor(plan LanePlan, only string) *ImageBuild {
	if r.Build == nil || len(plan.Nodes) == 0 {
		return nil
	}
	node := only
	switch {
	case node != "":
	case r.Build.Node != "":
		node = r.Build.Node
	default:
		node = plan.Nodes[0].Node
	}
	return &ImageBuild{Image: plan.Nodes[0].Image, Spec: *r.Build, Node: node}
}

// PullFor is how a run pulls r's image when no node of plan has it: on
// only (stage --node), else the plan's head, from image_registry when the
// recipe or the config sets one, else from the registry the image names
// (ImageRef.Registry: Docker Hub for a name without a host). Docker Hub
// by default comes after the recipe's [build] (nil then: the build is
// the source), so a recipe that builds its image never reaches out to
// the Internet for it. Nil when the plan has no node.
func (r Recipe) PullFor(plan LanePlan, only string) *ImagePull {
	if len(plan.Nodes) == 0 || plan.Nodes[0].Image.IsZero() {
		return nil
	}
	img := plan.Nodes[0].Image
	reg := r.ImageRegistry
	if reg == "" {
		if !img.NamesRegistry() && r.Build != nil {
			return nil
		}
		reg = img.Registry()
	}
	node := only
	if node == "" {
		node = plan.Nodes[0].Node
	}
	host, _, _ := strings.Cut(reg, "/")
	insecure := slices.ContainsFunc(plan.ImageInsecureRegistries, func(h string) bool { return strings.EqualFold(h, host) })
	return &ImagePull{Image: img, Registry: reg, AuthFile: r.ImageRegistryAuthFile, Node: node, Insecure: insecure, ConfigFile: plan.ConfigFile}
}
