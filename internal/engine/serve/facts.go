package serve

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/ranklogs"
)

// ContainerFacts is what a running rank container really runs, read back
// from Docker: a bench report records these, not the recipe's, because an
// image tag can move and a container can be started by hand.
type ContainerFacts struct {
	Node string `json:"node"`
	Rank int    `json:"rank"`
	Name string `json:"name"`
	// Image is the reference the container was created from; ImageID the
	// content-addressed ID Docker resolved it to; ImageDigest the
	// registry digest (repo@sha256:…) when the image came from one
	// (empty for images built on the node).
	Image       string `json:"image"`
	ImageID     string `json:"image_id"`
	ImageDigest string `json:"image_digest,omitempty"`
	// Args is the process the container runs: entrypoint path, then its
	// arguments.
	Args []string `json:"args"`
}

// LaneFacts inspects the running containers of lane on node (simulated
// nodes may share one engine, so the node label is matched too), ordered by
// rank.
func LaneFacts(ctx context.Context, d Docker, lane, node string) ([]ContainerFacts, error) {
	cs, err := d.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", contract.LabelLane+"="+lane), filters.Arg("label", contract.LabelNode+"="+node), filters.Arg("status", "running"))})
	if err != nil {
		return nil, fmt.Errorf("node %s: list lane %s containers: %w", node, lane, err)
	}
	var out []ContainerFacts
	for _, c := range cs {
		ins, err := d.ContainerInspect(ctx, c.ID)
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("node %s: inspect container %s: %w", node, ranklogs.ContainerName(c), err)
		}
		f := ContainerFacts{Node: node, Name: strings.TrimPrefix(ins.Name, "/"), ImageID: ins.Image}
		if ins.Config != nil {
			f.Image = ins.Config.Image
			if l := ins.Config.Labels[contract.LabelImage]; l != "" {
				f.Image = l
			}
			f.Rank, _ = strconv.Atoi(ins.Config.Labels[contract.LabelRank])
		}
		f.Args = append([]string{ins.Path}, ins.Args...)
		img, err := d.ImageInspect(ctx, ins.Image)
		if err != nil && !cerrdefs.IsNotFound(err) {
			return out, fmt.Errorf("node %s: inspect image %s of container %s: %w", node, ins.Image, f.Name, err)
		}
		if len(img.RepoDigests) > 0 {
			ds := append([]string(nil), img.RepoDigests...)
			sort.Strings(ds)
			f.ImageDigest = ds[0]
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out, nil
}
