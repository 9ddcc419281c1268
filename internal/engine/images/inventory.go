package images

import (
	"context"
	"fmt"
	"io"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// Type names of this package's permanent errors.
const (
	// DigestMismatch: a node has the recipe's image under its tag but not
	// with the pinned repo digest, or sources disagree on the image ID.
	DigestMismatch = "ImageDigestMismatch"
	// CorruptLayer: bytes received for a layer or the config do not hash
	// to their digest (the source's disk or the link corrupted them).
	CorruptLayer = "ImageCorruptLayer"
)

// Docker is the part of the Docker API the engine uses; *client.Client
// satisfies it.
type Docker interface {
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ImageSave(ctx context.Context, images []string, opts ...client.ImageSaveOption) (io.ReadCloser, error)
	ImageLoad(ctx context.Context, input io.Reader, opts ...client.ImageLoadOption) (image.LoadResponse, error)
	ImageRemove(ctx context.Context, image string, options image.RemoveOptions) ([]image.DeleteResponse, error)
	Info(ctx context.Context) (system.Info, error)
}

var _ Docker = (*client.Client)(nil)

// Inventory is what one node has of one image.
type Inventory struct {
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
	// image's layers (a prefix of its chain) the node already has; only
	// the others must reach it.
	HaveLayers int `json:"have_layers,omitempty"`
	// Containerd: the node's Docker keeps images in the containerd store,
	// where `docker load` imports every layer it is given, so the node is
	// sent every layer.
	Containerd bool `json:"containerd,omitempty"`
}

// Inspect reports whether node's Docker has ref; with a pinned digest, an
// image that has the tag but not the digest is reported Unpinned (MakePlan
// decides), and with only repo@digest, other images of the repo are a
// permanent DigestMismatch naming the node, the expected digest and what
// the node has.
func Inspect(ctx context.Context, d Docker, ref contract.ImageRef, node string) (Inventory, error) {
	inv := Inventory{Node: node}
	ins, err := d.ImageInspect(ctx, ref.Lookup())
	if cerrdefs.IsNotFound(err) && ref.Name == "" {
		// A pin without a tag that sparklane pulled: under its DigestTag.
		ins, err = d.ImageInspect(ctx, DigestTag(ref))
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return inv, fmt.Errorf("node %s: inspect image %s: %w", node, ref, err)
	}
	if err != nil {
		if ref.Name == "" {
			// repo@digest only: another image of the repo is a mismatch.
			if other := repoDigests(ctx, d, ref.Repo); len(other) > 0 {
				return inv, fault.Permanent(DigestMismatch, fmt.Errorf("node %s: image %s: pinned %s, but this node's %s images have %s: load the pinned image there, or fix the recipe's pin", node, ref, ref.Digest, ref.Repo, strings.Join(other, ", ")))
			}
		}
		return inv, nil
	}
	// Under the tag but without the pinned digest: an image moved here
	// from a node that has the digest (a load sets no repo digest), or a
	// wrong one. MakePlan tells them apart by the ID the pinned nodes have.
	inv.Unpinned = ref.Digest != "" && !hasDigest(ins.RepoDigests, ref.Digest) && !digestTagged(ctx, d, ref, ins.ID)
	inv.Present, inv.ID, inv.RepoDigests, inv.Size = true, ins.ID, ins.RepoDigests, ins.Size
	inv.DiffIDs = ins.RootFS.Layers
	return inv, nil
}

// digestTagged reports whether ref's DigestTag names image id here: a
// sparklane pull checked the pinned digest for it.
func digestTagged(ctx context.Context, d Docker, ref contract.ImageRef, id string) bool {
	ins, err := d.ImageInspect(ctx, DigestTag(ref))
	return err == nil && ins.ID == id
}

func hasDigest(repoDigests []string, dig string) bool {
	for _, rd := range repoDigests {
		if _, d, ok := strings.Cut(rd, "@"); ok && d == dig {
			return true
		}
	}
	return false
}

// repoDigests are the repo digests of the node's images of repo (best
// effort: for the error message only).
func repoDigests(ctx context.Context, d Docker, repo string) []string {
	l, err := d.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", repo))})
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range l {
		if len(s.RepoDigests) > 0 {
			out = append(out, s.RepoDigests...)
		} else {
			out = append(out, s.ID+" (no repo digest)")
		}
	}
	return out
}

// HaveLayers is how many of diffIDs' layers (a prefix: a layer counts
// only with its whole chain below it) node's Docker already has among the
// layers of its images. A containerd image store has none that `docker
// load` would skip.
func HaveLayers(ctx context.Context, d Docker, node string, diffIDs []string) (n int, containerd bool, err error) {
	info, err := d.Info(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("node %s: docker info: %w", node, err)
	}
	for _, kv := range info.DriverStatus {
		if kv[0] == "driver-type" && strings.Contains(kv[1], "containerd") {
			return 0, true, nil
		}
	}
	want := ChainIDs(diffIDs)
	l, err := d.ImageList(ctx, image.ListOptions{All: true})
	if err != nil {
		return 0, false, fmt.Errorf("node %s: list images: %w", node, err)
	}
	have := map[string]bool{}
	for _, s := range l {
		ins, err := d.ImageInspect(ctx, s.ID)
		if err != nil {
			if cerrdefs.IsNotFound(err) { // removed while we looked
				continue
			}
			return 0, false, fmt.Errorf("node %s: inspect image %s: %w", node, s.ID, err)
		}
		for _, c := range ChainIDs(ins.RootFS.Layers) {
			have[c] = true
		}
	}
	for n < len(want) && have[want[n]] {
		n++
	}
	return n, false, nil
}

func short(id string) string { return contract.ShortID(id) }
