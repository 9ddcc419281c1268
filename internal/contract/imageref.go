package contract

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// ImageRef is a recipe's image reference, parsed once where the recipe is
// read (internal/lane) and carried typed: the name Docker tags
// (`repo[:tag]`) and the pinned repo digest (`sha256:…`, or ""). It
// travels as the string the recipe wrote (MarshalJSON), so histories hold
// what they always held.
type ImageRef struct {
	// Name is the reference without its digest: what a loaded image is
	// tagged as. Empty when the recipe gives only `repo@sha256:…`.
	Name string
	// Repo is Name without its tag.
	Repo string
	// Digest is the pinned repo digest, "" when the recipe pins none.
	Digest string
}

// ParseImageRef splits image (a recipe's `image`) into name and pinned
// digest. The error says what a reference looks like. A digest of fewer
// than 64 hex digits is kept, marked Incomplete: operators' logs give
// digests in part, such a lane still renders and lists, and recipe check
// and every run that would move or start the image refuse it (Pinned).
func ParseImageRef(image string) (ImageRef, error) {
	if image == "" || strings.ContainsAny(image, " \t\n") {
		return ImageRef{}, fmt.Errorf("image %q is not an image reference: give repo[:tag][@sha256:HEX]", image)
	}
	name, dig, pinned := strings.Cut(image, "@")
	r := ImageRef{Name: name, Repo: name}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		r.Repo = name[:i]
	}
	if pinned {
		hexd, ok := strings.CutPrefix(dig, "sha256:")
		if !ok || len(hexd) > 64 || !IsHex(hexd) {
			return ImageRef{}, fmt.Errorf("image %s: the pinned digest %q is not sha256:<64 hex digits>", image, dig)
		}
		r.Digest = dig
		if r.Repo == name { // no tag: Docker tags nothing on load
			r.Name = ""
		}
	}
	if r.Repo == "" {
		return ImageRef{}, fmt.Errorf("image %q names no repository", image)
	}
	return r, nil
}

// MustImageRef is ParseImageRef for references known to be valid (tests,
// constants); it panics on a bad one.
func MustImageRef(image string) ImageRef {
	r, err := ParseImageRef(image)
	if err != nil {
		panic(err)
	}
	return r
}

// IsHex reports whether s is lowercase hexadecimal (a digest, a commit).
func IsHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// String is the reference as the recipe wrote it ("" for the zero ref).
func (r ImageRef) String() string {
	switch {
	case r.Digest == "":
		return r.Name
	case r.Name == "":
		return r.Repo + "@" + r.Digest
	default:
		return r.Name + "@" + r.Digest
	}
}

// Incomplete reports whether the pinned digest has fewer than 64 hex
// digits (a pin copied in part from a log).
func (r ImageRef) Incomplete() bool {
	return r.Digest != "" && len(strings.TrimPrefix(r.Digest, "sha256:")) != 64
}

// Pinned is nil unless the reference pins an incomplete digest, which no
// run may move or start: the error says how many digits it has and where
// to read the whole digest.
func (r ImageRef) Pinned() error {
	if !r.Incomplete() {
		return nil
	}
	return fmt.Errorf("image %s: the pinned digest has %d of 64 hex digits: complete it in the recipe (docker image inspect --format '{{index .RepoDigests 0}}' on a node that runs the image)", r, len(strings.TrimPrefix(r.Digest, "sha256:")))
}

// IsZero reports whether no image is named.
func (r ImageRef) IsZero() bool { return r == ImageRef{} }

// Lookup is what a node's Docker is asked for: the tag when there is one
// (so a pin that does not match is reported as a mismatch, not as a
// missing image), else repo@digest.
func (r ImageRef) Lookup() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Repo + "@" + r.Digest
}

// DockerHub is the registry of an image whose name carries no host, by
// Docker's rules (`vllm/vllm-openai`, `ubuntu`).
const DockerHub = "docker.io"

// NamesRegistry reports whether the reference's first path component is
// a registry host, by Docker's rules: it has a '.' or a ':' or is
// `localhost` (`nvcr.io/nvidia/x`, `10.0.0.5:5000/x`, `localhost/x`).
func (r ImageRef) NamesRegistry() bool {
	h, _, ok := strings.Cut(r.Repo, "/")
	return ok && (strings.ContainsAny(h, ".:") || h == "localhost")
}

// Registry is the registry host the image is pulled from by default: the
// host the reference names, else DockerHub.
func (r ImageRef) Registry() string {
	if !r.NamesRegistry() {
		return DockerHub
	}
	h, _, _ := strings.Cut(r.Repo, "/")
	return h
}

// MarshalJSON writes the reference as its string.
func (r ImageRef) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// UnmarshalJSON parses the string form ("" is the zero ref).
func (r *ImageRef) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		*r = ImageRef{}
		return nil
	}
	p, err := ParseImageRef(s)
	if err != nil {
		return err
	}
	*r = p
	return nil
}

// Image error types: an image on no node, or nodes that disagree on it.
// They are fault types (the workflow fails with them).
const (
	ImageMissing   = "ImageMissing"
	DigestMismatch = "ImageDigestMismatch"
	// DockerUnreachable: a node's Docker daemon does not answer (it is
	// restarting, or the node is half way through a reboot): retryable,
	// and the image step waits for it within the node outage budget.
	DockerUnreachable = "DockerUnreachable"
)

// ImageError is a refusal of PlanImage, with its error type.
type ImageError struct {
	Type string
	Msg  string
}

func (e *ImageError) Error() string { return e.Msg }

// ImagePlan is how an image reaches the nodes that lack it: a chain from
// one node that has it through every node that does not, each receiving
// the stream and forwarding it to the next while it loads it, so the
// source's link carries one copy.
type ImagePlan struct {
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
func (p ImagePlan) Source() string {
	if len(p.Chain) == 0 {
		return ""
	}
	return p.Chain[0]
}

// ImageHop is one chain member's part: whom it receives from and whom it
// forwards to.
type ImageHop struct {
	Node string
	// Upstream is the node it receives from ("" for the source).
	Upstream string
	// Downstream is the node it sends to ("" for the chain's last).
	Downstream string
}

// Hops are the chain's members in order.
func (p ImagePlan) Hops() []ImageHop {
	out := make([]ImageHop, len(p.Chain))
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

// PlanImage is the one owner of "is this image on this node, and under
// which ID": it plans ref's image over invs (one per node, in the lane's
// node order; the nodes that lack it carry HaveLayers for the image's
// DiffIDs). A node with the pinned image only under its tag (moved there:
// a load sets no repo digest) has it when its ID is the one the nodes that
// carry the digest have. Nodes that have it must agree on its ID, else the
// plan is refused naming them (DigestMismatch); with no node that has it,
// the error names the nodes that lack it and the ways to provide it
// (ImageMissing).
func PlanImage(ref ImageRef, invs []ImageInventory) (ImagePlan, error) {
	var p ImagePlan
	var lack []ImageInventory
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
			return ImagePlan{}, &ImageError{DigestMismatch, fmt.Sprintf("node %s: image %s: pinned %s, found %s (image ID %s): pull the pinned image there, remove the wrong one, or fix the recipe's pin", inv.Node, ref.Name, want, found, inv.ID)}
		}
		if p.ID == "" {
			p.ID, p.DiffIDs = inv.ID, inv.DiffIDs
		} else if inv.ID != p.ID || !slices.Equal(inv.DiffIDs, p.DiffIDs) {
			return ImagePlan{}, &ImageError{DigestMismatch, fmt.Sprintf("image %s differs between nodes: %s has %s, %s has %s: make every node's %s the same image (remove the wrong one, or pin a digest)", ref, p.Present[0], p.ID, inv.Node, inv.ID, ref)}
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
		return ImagePlan{}, &ImageError{ImageMissing, fmt.Sprintf("image %s is on no node of the cluster (missing on %s): provide it one of three ways: put it on one node (docker load, or docker build -t %s …), name a registry that has it (image_registry in sparklane.toml or the recipe), or give the recipe a [build]; sparklane then moves it to the others", ref, strings.Join(names, ", "), ref.Lookup())}
	}
	if ref.Name == "" {
		return ImagePlan{}, &ImageError{ImageMissing, fmt.Sprintf("image %s is pinned without a tag: a loaded image cannot carry a repo digest, so give the recipe's image a tag (repo:tag@%s) for sparklane to move it", ref, ref.Digest)}
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

// DescribeImage is a one-line account of inv for dry runs and progress:
// the ID a node has, or how many of the image's total layers it has and
// would receive.
func DescribeImage(inv ImageInventory, total int) string {
	if inv.Present {
		return "present " + ShortID(inv.ID)
	}
	if inv.Containerd {
		return fmt.Sprintf("missing: all %d layers would move (containerd image store)", total)
	}
	return fmt.Sprintf("missing: has %d of %d layers, %d would move", inv.HaveLayers, total, total-inv.HaveLayers)
}

// ShortID is an image ID's first 12 hex digits.
func ShortID(id string) string {
	s := strings.TrimPrefix(id, "sha256:")
	return s[:min(12, len(s))]
}
