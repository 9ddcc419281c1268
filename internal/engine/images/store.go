package images

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/contract"
)

// Store is the part of the Docker API listing and pruning a node's images
// uses; *client.Client satisfies it.
type Store interface {
	ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageRemove(ctx context.Context, image string, options image.RemoveOptions) ([]image.DeleteResponse, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	Info(ctx context.Context) (system.Info, error)
}

var _ Store = (*client.Client)(nil)

// Listed is one image on a node: what `starter images` shows and what an
// LRU prune may take.
type Listed struct {
	ID   string   `json:"id"`
	Tags []string `json:"tags,omitempty"`
	Size int64    `json:"size"`
	// Lanes name it in their recipe's image (tag or pinned digest).
	Lanes []string `json:"lanes,omitempty"`
	// Containers use it (any state); Running of them are running.
	Containers int `json:"containers,omitempty"`
	Running    int `json:"running,omitempty"`
	// LastUsed is the latest creation of a container from it (now for a
	// running one), else when it was last tagged here (loaded, built,
	// pulled), else its creation.
	LastUsed time.Time `json:"last_used"`
}

// Unused: no lane names it and no container (running or not) uses it.
func (l Listed) Unused() bool { return len(l.Lanes) == 0 && l.Containers == 0 }

// List lists node's images, each with the lanes whose image it is (lanes:
// a recipe image reference → the lanes naming it), the containers using
// it and when it was last used; lanes' images first, then by last use,
// newest first.
func List(ctx context.Context, d Store, node string, lanes map[string][]string, now time.Time) ([]Listed, error) {
	sums, err := d.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s: list images: %w", node, err)
	}
	cs, err := d.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("node %s: list containers: %w", node, err)
	}
	out := make([]Listed, 0, len(sums))
	for _, s := range sums {
		l := Listed{ID: s.ID, Size: s.Size}
		for _, t := range s.RepoTags {
			if t != "<none>:<none>" && !strings.HasPrefix(t, PartialRepo) { // a transfer's progress, not an image
				l.Tags = append(l.Tags, t)
			}
		}
		l.LastUsed = time.Unix(s.Created, 0).UTC()
		if ins, err := d.ImageInspect(ctx, s.ID); err == nil && ins.Metadata.LastTagTime.After(l.LastUsed) {
			l.LastUsed = ins.Metadata.LastTagTime.UTC()
		}
		for ref, ls := range lanes {
			if names(ref, s.RepoTags, s.RepoDigests) {
				l.Lanes = append(l.Lanes, ls...)
			}
		}
		slices.Sort(l.Lanes)
		l.Lanes = slices.Compact(l.Lanes)
		for _, c := range cs {
			if c.ImageID != s.ID {
				continue
			}
			l.Containers++
			used := time.Unix(c.Created, 0).UTC()
			if c.State == container.StateRunning {
				l.Running++
				used = now.UTC()
			}
			if used.After(l.LastUsed) {
				l.LastUsed = used
			}
		}
		out = append(out, l)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if (len(out[i].Lanes) > 0) != (len(out[j].Lanes) > 0) {
			return len(out[i].Lanes) > 0
		}
		return out[i].LastUsed.After(out[j].LastUsed)
	})
	return out, nil
}

// names reports whether a recipe's image reference names an image with
// these tags and repo digests.
func names(ref string, tags, digests []string) bool {
	r, err := contract.ParseImageRef(ref)
	if err != nil {
		return false
	}
	if r.Digest != "" && slices.Contains(digests, r.Repo+"@"+r.Digest) {
		return true
	}
	name := r.Name
	if name != "" && !strings.Contains(name[strings.LastIndex(name, "/")+1:], ":") {
		name += ":latest"
	}
	return name != "" && slices.Contains(tags, name)
}

// ImagePrune is an LRU prune's part on a node's images.
type ImagePrune struct {
	// Root is Docker's data root, whose free space the prune reaches for.
	Root string `json:"root,omitempty"`
	// Removed are the images taken (removed unless a dry run), Kept why
	// the others stay (when the free target was not reached).
	Removed []Listed `json:"removed,omitempty"`
	Kept    []string `json:"kept,omitempty"`
	Error   string   `json:"error,omitempty"`
	// FreeBefore/FreeAfter on Root.
	FreeBefore int64 `json:"free_before"`
	FreeAfter  int64 `json:"free_after"`
	Enough     bool  `json:"enough"`
	// DryRun: Removed were chosen, not removed.
	DryRun bool `json:"dry_run,omitempty"`
}

// Prune removes node's unused images (Listed.Unused: no lane names one,
// no container, running or not, uses it), least recently used first,
// until Docker's data root has want bytes free, as an LRU prune of staged
// blocks does. free reads the free bytes of a path. Docker itself refuses
// to remove an image a container uses (no force), so a container created
// meanwhile keeps its image.
func Prune(ctx context.Context, d Store, node string, listed []Listed, want int64, dryRun bool, free func(string) (int64, error)) ImagePrune {
	p := ImagePrune{DryRun: dryRun}
	info, err := d.Info(ctx)
	if err != nil {
		p.Error = fmt.Sprintf("node %s: docker info: %v", node, err)
		return p
	}
	p.Root = info.DockerRootDir
	if p.FreeBefore, err = free(p.Root); err != nil {
		p.Error = fmt.Sprintf("node %s: free space of Docker's data root %s: %v: no image pruned (run the node worker where it can read it)", node, p.Root, err)
		return p
	}
	cands := slices.Clone(listed)
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].LastUsed.Before(cands[j].LastUsed) })
	have := p.FreeBefore
	for _, l := range cands {
		if have >= want {
			break
		}
		if !l.Unused() {
			continue
		}
		if !dryRun {
			if err := untagImage(ctx, d, l); err != nil {
				p.Kept = append(p.Kept, fmt.Sprintf("image %s (%s): not removed: %v", short(l.ID), strings.Join(l.Tags, ", "), err))
				continue
			}
		}
		p.Removed = append(p.Removed, l)
		have += l.Size
		if !dryRun {
			if f, err := free(p.Root); err == nil {
				have = f
			}
		}
	}
	p.FreeAfter, p.Enough = have, have >= want
	if !p.Enough {
		for _, l := range listed {
			switch {
			case l.Running > 0:
				p.Kept = append(p.Kept, fmt.Sprintf("image %s (%s): kept, a running container uses it", short(l.ID), strings.Join(l.Tags, ", ")))
			case len(l.Lanes) > 0:
				p.Kept = append(p.Kept, fmt.Sprintf("image %s (%s): kept, lane %s uses it", short(l.ID), strings.Join(l.Tags, ", "), strings.Join(l.Lanes, ", ")))
			case l.Containers > 0:
				p.Kept = append(p.Kept, fmt.Sprintf("image %s (%s): kept, %d stopped container(s) use it", short(l.ID), strings.Join(l.Tags, ", "), l.Containers))
			}
		}
	}
	return p
}

// untagImage untags each of l's tags (the last removes the image) or
// removes an untagged image by ID, never forced.
func untagImage(ctx context.Context, d Store, l Listed) error {
	refs := l.Tags
	if len(refs) == 0 {
		refs = []string{l.ID}
	}
	for _, r := range refs {
		if _, err := d.ImageRemove(ctx, r, image.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
	}
	return nil
}
