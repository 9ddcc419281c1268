package images

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// Puller is the part of the Docker API a registry pull uses;
// *client.Client satisfies it.
type Puller interface {
	ImagePull(ctx context.Context, ref string, options image.PullOptions) (io.ReadCloser, error)
	ImageTag(ctx context.Context, source, target string) error
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageRemove(ctx context.Context, imageID string, options image.RemoveOptions) ([]image.DeleteResponse, error)
}

// CheckRegistry checks an image_registry (host[:port][/path prefix], no
// scheme, no credentials) and its auth file (an absolute path on the
// node). Errors name the key and the fix.
func CheckRegistry(reg, authFile string) error {
	if reg == "" {
		return nil
	}
	host, _, _ := strings.Cut(reg, "/")
	switch {
	case strings.Contains(reg, "://"):
		return fmt.Errorf("image_registry %q carries a scheme: give host[:port][/prefix] (Docker picks https, or http on 127.0.0.0/8 and its insecure-registries)", reg)
	case strings.Contains(host, "@"):
		return fmt.Errorf("image_registry %q carries credentials: remove them and set image_registry_auth_file to a file on the node", reg)
	case host == "" || strings.ContainsAny(reg, " \t\n@") || strings.HasSuffix(reg, "/") || !(strings.ContainsAny(host, ".:") || host == "localhost"):
		return fmt.Errorf("image_registry %q is not a registry host: give host[:port][/prefix], e.g. \"mirror.lan:5000\" or \"registry.example.com/team\"", reg)
	case authFile != "" && (!filepath.IsAbs(authFile) || filepath.Clean(authFile) != authFile):
		return fmt.Errorf("image_registry_auth_file %q is not an absolute clean path: give the file's path on the nodes (a Docker config.json or a username:password line)", authFile)
	}
	return nil
}

// RegistryAuth reads the credentials for reg's host from authFile (a
// Docker config.json with "auths", or one username:password line) as the
// base64 header Docker's pull takes; "" without a file. The credentials
// never leave the node.
func RegistryAuth(authFile, reg string) (string, error) {
	if authFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(authFile)
	if err != nil {
		return "", fmt.Errorf("image_registry_auth_file %s: %w: put the registry's credentials there (a Docker config.json or username:password), readable by the node worker", authFile, err)
	}
	host, _, _ := strings.Cut(reg, "/")
	var ac registry.AuthConfig
	var cfg struct {
		Auths map[string]registry.AuthConfig `json:"auths"`
	}
	if json.Unmarshal(b, &cfg) == nil && cfg.Auths != nil {
		a, ok := cfg.Auths[host]
		if !ok {
			a, ok = cfg.Auths["https://"+host]
		}
		if !ok {
			return "", fmt.Errorf("image_registry_auth_file %s has no \"auths\" entry for %s: docker login %s with DOCKER_CONFIG pointing there, or add it", authFile, host, host)
		}
		ac = a
		if ac.Username == "" && ac.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(ac.Auth)
			if err != nil {
				return "", fmt.Errorf("image_registry_auth_file %s: the auth of %s is not base64 user:password", authFile, host)
			}
			ac.Username, ac.Password, _ = strings.Cut(string(dec), ":")
			ac.Auth = ""
		}
	} else {
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		u, p, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || u == "" {
			return "", fmt.Errorf("image_registry_auth_file %s is neither a Docker config.json nor a username:password line", authFile)
		}
		ac.Username, ac.Password = u, p
	}
	ac.ServerAddress = host
	return registry.EncodeAuthConfig(ac)
}

// RegistryRef is where ref's image is pulled from reg: REG/REPO:TAG, or
// REG/REPO@DIGEST for a pin without a tag.
func RegistryRef(reg string, ref contract.ImageRef) string {
	repo := ref.Repo
	// Docker Hub names (library/x, x) and foreign hosts keep only their path.
	if h, rest, ok := strings.Cut(repo, "/"); ok && (strings.ContainsAny(h, ".:") || h == "localhost") {
		repo = rest
	}
	name := reg + "/" + repo
	if ref.Name == "" {
		return name + "@" + ref.Digest
	}
	return name + strings.TrimPrefix(ref.Name, ref.Repo)
}

// Pulled is a finished pull: the image ID and the repo digest found.
type Pulled struct {
	ID     string `json:"id"`
	Digest string `json:"digest,omitempty"`
	From   string `json:"from"`
}

// Pull pulls ref's image from reg through d (auth, a RegistryAuth
// header), calling progress with each status line, tags it as the
// recipe's reference and checks a pinned digest: a registry that serves
// another digest is refused (DigestMismatch naming node, expected and
// found) and the pulled image untagged.
func Pull(ctx context.Context, d Puller, node, reg string, ref contract.ImageRef, auth string, progress func(string)) (Pulled, error) {
	from := RegistryRef(reg, ref)
	rc, err := d.ImagePull(ctx, from, image.PullOptions{RegistryAuth: auth})
	if err != nil {
		return Pulled{From: from}, pullErr(node, from, err)
	}
	defer rc.Close()
	dec := json.NewDecoder(bufio.NewReader(rc))
	for {
		var m struct {
			Status, ID, Progress, Error string
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Pulled{From: from}, fmt.Errorf("node %s: pull %s: read the pull's progress: %w", node, from, err)
		}
		if m.Error != "" {
			return Pulled{From: from}, pullErr(node, from, errors.New(m.Error))
		}
		if progress != nil {
			progress(strings.TrimSpace(m.ID + " " + m.Status + " " + m.Progress))
		}
	}
	ins, err := d.ImageInspect(ctx, from)
	if err != nil {
		return Pulled{From: from}, fmt.Errorf("node %s: inspect pulled image %s: %w", node, from, err)
	}
	p := Pulled{ID: ins.ID, From: from}
	fromRepo, _, _ := strings.Cut(from, "@")
	if i := strings.LastIndex(fromRepo, ":"); i > strings.LastIndex(fromRepo, "/") {
		fromRepo = fromRepo[:i]
	}
	var found []string
	for _, rd := range ins.RepoDigests {
		if r, dg, ok := strings.Cut(rd, "@"); ok && r == fromRepo {
			found = append(found, dg)
		}
	}
	if len(found) > 0 {
		p.Digest = found[0]
	}
	if ref.Digest != "" && !slices.Contains(found, ref.Digest) {
		if ref.Name != "" {
			_, _ = d.ImageRemove(ctx, from, image.RemoveOptions{})
		}
		f := "no repo digest"
		if len(found) > 0 {
			f = strings.Join(found, ", ")
		}
		return p, fault.Permanent(DigestMismatch, fmt.Errorf("node %s: image %s pulled from %s: pinned %s, the registry serves %s (image ID %s): push the pinned image to the registry, or fix the recipe's pin", node, ref.Name, from, ref.Digest, f, ins.ID))
	}
	if ref.Name != "" {
		if err := d.ImageTag(ctx, from, ref.Name); err != nil {
			return p, fmt.Errorf("node %s: tag %s as %s: %w", node, from, ref.Name, err)
		}
	}
	return p, nil
}

// pullErr is a failed pull: a registry that does not know the image, or
// refuses the credentials, is permanent (pulling again fails the same
// way); anything else (the network) may pass.
func pullErr(node, from string, err error) error {
	msg := err.Error()
	switch {
	case client.IsErrNotFound(err) || strings.Contains(msg, "manifest unknown") || strings.Contains(msg, "not found"):
		return fault.Permanent(fault.ImageMissing, fmt.Errorf("node %s: the registry has no %s (%v): push it there (docker push %s), or add a [build] to the recipe", node, from, err, from))
	case strings.Contains(msg, "unauthorized") || strings.Contains(msg, "authentication required") || strings.Contains(msg, "no basic auth"):
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: the registry refused pulling %s (%v): check image_registry_auth_file on the node", node, from, err))
	}
	return fmt.Errorf("node %s: pull %s: %w", node, from, err)
}
