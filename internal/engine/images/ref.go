package images

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Ref is a recipe's image reference split into the name Docker tags
// (`repo[:tag]`) and the pinned repo digest (`sha256:…`, or "").
type Ref struct {
	// Name is the reference without its digest: what a loaded image is
	// tagged as. Empty when the recipe gives only `repo@sha256:…`.
	Name string
	// Repo is Name without its tag.
	Repo string
	// Digest is the pinned repo digest, "" when the recipe pins none.
	Digest string
}

// String is the reference as the recipe wrote it.
func (r Ref) String() string {
	switch {
	case r.Digest == "":
		return r.Name
	case r.Name == "":
		return r.Repo + "@" + r.Digest
	default:
		return r.Name + "@" + r.Digest
	}
}

// lookup is what a node's Docker is asked for: the tag when there is one
// (so a pin that does not match is reported as a mismatch, not as a
// missing image), else repo@digest.
func (r Ref) lookup() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Repo + "@" + r.Digest
}

// ParseRef splits image (a recipe's `image`) into name and pinned digest.
func ParseRef(image string) (Ref, error) {
	if image == "" || strings.ContainsAny(image, " \t\n") {
		return Ref{}, fmt.Errorf("image %q is not an image reference: give repo[:tag][@sha256:HEX]", image)
	}
	name, dig, pinned := strings.Cut(image, "@")
	r := Ref{Name: name, Repo: name}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		r.Repo = name[:i]
	}
	if pinned {
		hexd, ok := strings.CutPrefix(dig, "sha256:")
		if !ok || len(hexd) != 64 || !isHex(hexd) {
			return Ref{}, fmt.Errorf("image %s: the pinned digest %q is not sha256:<64 hex digits>", image, dig)
		}
		r.Digest = dig
		if r.Repo == name { // no tag: Docker tags nothing on load
			r.Name = ""
		}
	}
	if r.Repo == "" {
		return Ref{}, fmt.Errorf("image %q names no repository", image)
	}
	return r, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ChainIDs are the layer chain IDs of diffIDs (the OCI image spec's
// ChainID: the first is the first diffID, each next one the sha256 of
// "PREVIOUS DIFFID"). A daemon has a layer only with its whole chain
// below it, which is what `docker load` keys its skip on.
func ChainIDs(diffIDs []string) []string {
	out := make([]string, len(diffIDs))
	for i, d := range diffIDs {
		if i == 0 {
			out[i] = d
			continue
		}
		s := sha256.Sum256([]byte(out[i-1] + " " + d))
		out[i] = "sha256:" + hex.EncodeToString(s[:])
	}
	return out
}
