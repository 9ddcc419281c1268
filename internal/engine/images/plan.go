package images

import (
	"fmt"
	"strings"

	"github.com/sparklane/sparklane/internal/fault"
)

// Plan is how the image reaches the nodes that lack it: a chain from one
// node that has it through every node that does not, each receiving the
// stream and forwarding it to the next while it loads it, so the source's
// link carries one copy.
type Plan struct {
	// ID and DiffIDs are the image's, as the nodes that have it agree.
	ID      string   `json:"id"`
	DiffIDs []string `json:"diff_ids"`
	// Chain is the source, then the nodes that lack the image, in the
	// order the stream passes them; empty when every node has it.
	Chain []string `json:"chain,omitempty"`
	// From is the first layer the stream carries: every layer below it
	// is on every node of the chain.
	From int `json:"from"`
	// Present lists the nodes that already have the image.
	Present []string `json:"present,omitempty"`
}

// Source is the node the stream starts from ("" when nothing moves).
func (p Plan) Source() string {
	if len(p.Chain) == 0 {
		return ""
	}
	return p.Chain[0]
}

// Hop is one chain member's part: whom it receives from and whom it
// forwards to.
type Hop struct {
	Node string
	// Upstream is the node it receives from ("" for the source).
	Upstream string
	// Downstream is the node it sends to ("" for the chain's last).
	Downstream string
}

// Hops are the chain's members in order.
func (p Plan) Hops() []Hop {
	out := make([]Hop, len(p.Chain))
	for i, n := range p.Chain {
		out[i].Node = n
		if i > 0 {
			out[i].Upstream = p.Chain[i-1]
		}
		if i+1 < len(p.Chain) {
			out[i].Downstream = p.Chain[i+1]
		}
	}
	return out
}

// MakePlan plans ref's image over invs (one per node, in the lane's node
// order; the nodes that lack it must carry HaveLayers for the image's
// DiffIDs). Nodes that have it must agree on its ID, else the run is
// refused naming them; with no node that has it, the error names the
// nodes that lack it and the ways to provide it.
func MakePlan(ref Ref, invs []Inventory) (Plan, error) {
	var p Plan
	var lack []Inventory
	// With a pin, the image is what the nodes carrying the digest have.
	pinnedID := ""
	for _, inv := range invs {
		if inv.Present && !inv.Unpinned && pinnedID == "" {
			pinnedID = inv.ID
		}
	}
	for _, inv := range invs {
		if !inv.Present {
			lack = append(lack, inv)
			continue
		}
		if inv.Unpinned && inv.ID != pinnedID {
			found := "no repo digest (built or loaded there)"
			if len(inv.RepoDigests) > 0 {
				found = strings.Join(inv.RepoDigests, ", ")
			}
			want := ref.Digest
			if pinnedID != "" {
				want += " (image ID " + pinnedID + " on the nodes that have it)"
			}
			return Plan{}, fault.Permanent(DigestMismatch, fmt.Errorf("node %s: image %s: pinned %s, found %s (image ID %s): pull the pinned image there, remove the wrong one, or fix the recipe's pin", inv.Node, ref.Name, want, found, inv.ID))
		}
		if p.ID == "" {
			p.ID, p.DiffIDs = inv.ID, inv.DiffIDs
		} else if inv.ID != p.ID || !sameLayers(inv.DiffIDs, p.DiffIDs) {
			return Plan{}, fault.Permanent(DigestMismatch, fmt.Errorf("image %s differs between nodes: %s has %s, %s has %s: make every node's %s the same image (remove the wrong one, or pin a digest)", ref, p.Present[0], p.ID, inv.Node, inv.ID, ref))
		}
		p.Present = append(p.Present, inv.Node)
	}
	if len(lack) == 0 {
		return p, nil
	}
	if p.ID == "" {
		var names []string
		for _, inv := range lack {
			names = append(names, inv.Node)
		}
		return Plan{}, fault.Permanent(fault.ImageMissing, fmt.Errorf("image %s is on no node of the cluster (missing on %s): provide it one of three ways: put it on one node (docker load, or docker build -t %s …), name a registry that has it (image_registry in sparklane.toml or the recipe), or give the recipe a [build]; sparklane then moves it to the others", ref, strings.Join(names, ", "), ref.lookup()))
	}
	if ref.Name == "" {
		return Plan{}, fault.Permanent(fault.ImageMissing, fmt.Errorf("image %s is pinned without a tag: a loaded image cannot carry a repo digest, so give the recipe's image a tag (repo:tag@%s) for sparklane to move it", ref, ref.Digest))
	}
	p.Chain = []string{p.Present[0]}
	p.From = len(p.DiffIDs)
	for _, inv := range lack {
		p.Chain = append(p.Chain, inv.Node)
		h := inv.HaveLayers
		if inv.Containerd || h > len(p.DiffIDs) {
			h = 0
		}
		p.From = min(p.From, h)
	}
	return p, nil
}
