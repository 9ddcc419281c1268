package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// PullSpec is one pull: the image, the registry it comes from and how to
// reach it. Only the node that pulls holds it (Auth is a secret).
type PullSpec struct {
	// Node pulls (named in every error).
	Node string
	// Ref is the recipe's image: the tag the pulled image gets, the
	// digest it must carry when pinned.
	Ref contract.ImageRef
	// Registry is host[:port][/prefix]: the image's own registry
	// (contract.ImageRef.Registry) or image_registry.
	Registry string
	// Insecure: the registry is in image_insecure_registries (plain HTTP
	// or unverified TLS allowed).
	Insecure bool
	// Auth is the registry's login (nil: anonymous); AuthFile is the
	// control host's file it came from and ConfigFile the fleet config,
	// both named in errors only.
	Auth       *Credentials
	AuthFile   string
	ConfigFile string
}

// PullOptions are a pull's knobs and a test's fault point.
type PullOptions struct {
	// Progress gets a line per layer fetched (nil: none).
	Progress func(string)
	// Spool is where fetched layers wait for their load ("": the system's
	// temporary directory).
	Spool string
	// Jobs is how many layers download at once (0: 3, as Docker).
	Jobs int
	// Durable, when set (a test's fault point; nil in production), runs
	// after the pull made the image's first layers durable in the daemon;
	// an error it returns ends the pull there, as a killed worker would.
	Durable func(spec Spec, layers int) error
}

// PullDocker is the node's Docker as a pull needs it; *client.Client
// satisfies it.
type PullDocker interface {
	Docker
	ImageTag(ctx context.Context, source, target string) error
}

// Pulled is a finished pull: the image ID, the digest the registry
// served for the reference, what crossed the network.
type Pulled struct {
	ID     string `json:"id"`
	Digest string `json:"digest,omitempty"`
	From   string `json:"from"`
	// Bytes are the compressed layers fetched, Layers how many.
	Bytes  int64 `json:"bytes,omitempty"`
	Layers int   `json:"layers,omitempty"`
	// Platform is the node's (os/arch) the image was chosen for.
	Platform string `json:"platform,omitempty"`
}

// DigestTag is the second tag a pull gives a pinned image,
// REPO:sha256-HEX: the pinned digest the pull checked against the
// registry. Docker records a repo digest only for its own pulls and a
// `docker load` sets none, so this tag is how Inspect still knows, on the
// pulling node, that the image is the pinned one (and, for a pin without
// a tag, the name it is found under).
func DigestTag(ref contract.ImageRef) string {
	return ref.Repo + ":" + strings.Replace(ref.Digest, ":", "-", 1)
}

// Pull pulls s's image into d (the pulling node's Docker) with
// sparklane's own registry client (go-containerregistry), so the node's
// Docker needs no registry configuration: the manifest for the node's
// platform (from an index when the registry serves one), the config and
// the layers the node lacks, each checked against its digest, loaded
// layer by layer as they arrive (an interrupted pull keeps what it
// loaded, see PartialRepo), then tagged as the recipe's image. A pinned
// digest must be the one the registry serves for the tag, else nothing
// is fetched (DigestMismatch naming node, expected and found).
func Pull(ctx context.Context, d PullDocker, s PullSpec, o PullOptions) (Pulled, error) {
	from := RegistryRef(s.Registry, s.Ref)
	out := Pulled{From: from}
	src, err := s.resolve(ctx, d, from)
	if err != nil {
		return out, err
	}
	out.ID, out.Digest, out.Platform = src.id, src.digest, src.platform.String()
	if s.Ref.Digest != "" && src.digest != s.Ref.Digest {
		return out, fault.Permanent(DigestMismatch, fmt.Errorf("node %s: image %s pulled from %s: pinned %s, the registry serves %s (image ID %s): push the pinned image to the registry, or fix the recipe's pin", s.Node, s.Ref, from, s.Ref.Digest, src.digest, src.id))
	}
	tag := s.Ref.Name
	if tag == "" {
		tag = DigestTag(s.Ref)
	}
	spec := Spec{ID: src.id, DiffIDs: src.diffIDs, Tag: tag}
	if _, err := d.ImageInspect(ctx, src.id); err != nil {
		if !cerrdefs.IsNotFound(err) {
			return out, fmt.Errorf("node %s: inspect image %s: %w", s.Node, src.id, err)
		}
		out.Layers, out.Bytes, err = s.load(ctx, d, src, spec, o)
		if err != nil {
			return out, err
		}
	}
	tags := []string{tag}
	if s.Ref.Digest != "" && s.Ref.Name != "" {
		tags = append(tags, DigestTag(s.Ref))
	}
	for _, t := range tags {
		if err := d.ImageTag(ctx, src.id, t); err != nil {
			return out, fmt.Errorf("node %s: tag image %s as %s: %w", s.Node, src.id, t, err)
		}
	}
	return out, nil
}

// pullSource is the image a registry serves for a pull: the digest of
// what the reference names (an index or a manifest), the image for the
// node's platform, its ID (config digest) and layers.
type pullSource struct {
	digest   string
	img      v1.Image
	id       string
	diffIDs  []string
	platform v1.Platform
}

// resolve asks the registry for from's manifest (the index's entry for
// the node's platform) and the image's config.
func (s PullSpec) resolve(ctx context.Context, d Docker, from string) (pullSource, error) {
	host := registryHost(s.Registry)
	var nopts []name.Option
	if s.Insecure || loopbackHost(host) {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.ParseReference(from, nopts...)
	if err != nil {
		return pullSource{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: %s is not a reference a registry serves (%v): fix the recipe's image or image_registry", s.Node, from, err))
	}
	plat, err := nodePlatform(ctx, d)
	if err != nil {
		return pullSource{}, fmt.Errorf("node %s: %w", s.Node, err)
	}
	auth := authn.Anonymous
	if s.Auth != nil {
		auth = authn.FromConfig(s.Auth.authConfig())
	}
	desc, err := remote.Get(ref, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithPlatform(plat),
		remote.WithTransport(transportFor(nil, host, s.Insecure)), remote.WithUserAgent("sparklane"))
	if err != nil {
		return pullSource{}, s.pullErr(ctx, from, err)
	}
	src := pullSource{digest: desc.Digest.String(), platform: plat}
	if src.img, err = s.platformImage(ctx, desc, plat, from); err != nil {
		return src, err
	}
	cfgName, err := src.img.ConfigName()
	if err != nil {
		return src, s.pullErr(ctx, from, err)
	}
	cf, err := src.img.ConfigFile()
	if err != nil {
		return src, s.pullErr(ctx, from, err)
	}
	src.id = cfgName.String()
	if cf.Architecture != "" && (cf.OS != plat.OS || cf.Architecture != plat.Architecture) {
		return src, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: image %s from %s is for %s/%s, this node runs %s: push an image for %s (docker buildx build --platform %s), or a multi-platform index", s.Node, s.Ref, from, cf.OS, cf.Architecture, plat, plat, plat))
	}
	for _, dd := range cf.RootFS.DiffIDs {
		src.diffIDs = append(src.diffIDs, dd.String())
	}
	if len(src.diffIDs) == 0 {
		return src, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: image %s from %s has no layers: nothing to load", s.Node, s.Ref, from))
	}
	return src, nil
}

// platformImage is desc's image for plat: desc itself, or the index's
// entry for plat (an error naming the platforms the index has).
func (s PullSpec) platformImage(ctx context.Context, desc *remote.Descriptor, plat v1.Platform, from string) (v1.Image, error) {
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, s.pullErr(ctx, from, err)
		}
		return img, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, s.pullErr(ctx, from, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, s.pullErr(ctx, from, err)
	}
	var has []string
	for _, m := range im.Manifests {
		if m.Platform == nil || !m.MediaType.IsImage() {
			continue
		}
		if m.Platform.Satisfies(plat) {
			img, err := idx.Image(m.Digest)
			if err != nil {
				return nil, s.pullErr(ctx, from, err)
			}
			return img, nil
		}
		has = append(has, m.Platform.String())
	}
	return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: %s (index %s) has no image for this node's platform %s (it has %s): push one for it (docker buildx build --platform %s --push)", s.Node, from, desc.Digest, plat, strings.Join(has, ", "), plat))
}

// nodePlatform is the platform of d's host, in the OCI's names.
func nodePlatform(ctx context.Context, d Docker) (v1.Platform, error) {
	info, err := d.Info(ctx)
	if err != nil {
		return v1.Platform{}, fmt.Errorf("docker info: %w", err)
	}
	p := v1.Platform{OS: info.OSType, Architecture: info.Architecture}
	if p.OS == "" {
		p.OS = "linux"
	}
	switch info.Architecture {
	case "x86_64":
		p.Architecture = "amd64"
	case "aarch64":
		p.Architecture = "arm64"
	case "armv7l":
		p.Architecture, p.Variant = "arm", "v7"
	case "i386", "i686":
		p.Architecture = "386"
	}
	return p, nil
}

// load fetches the layers of src the node lacks and loads them in chain
// order, then the image (see stager): what it fetched.
func (s PullSpec) load(ctx context.Context, d PullDocker, src pullSource, spec Spec, o PullOptions) (int, int64, error) {
	have, containerd, err := HaveLayers(ctx, d, s.Node, spec.DiffIDs)
	if err != nil {
		return 0, 0, err
	}
	if containerd {
		have = 0
	}
	// The last layer goes with the image's own load, so it is fetched
	// even when the node has it (a stale image with the same layers).
	have = min(have, len(spec.DiffIDs)-1)
	spec.From = have
	from := "registry " + registryHost(s.Registry)
	dropStaleSpools(o.Spool)
	dir, err := os.MkdirTemp(o.Spool, spoolPrefix)
	if err != nil {
		return 0, 0, fmt.Errorf("node %s: spool for the pull of %s: %w", s.Node, s.Ref, err)
	}
	defer os.RemoveAll(dir)
	st := newStager(ctx, receiver{d: d, spec: spec, have: have, from: from, durable: o.Durable}, dir)
	bytes, ferr := s.fetch(ctx, st, src, have, o)
	lerr := st.close()
	if ferr != nil {
		return 0, bytes, ferr
	}
	if lerr != nil {
		return 0, bytes, fmt.Errorf("node %s: %w", s.Node, lerr)
	}
	m := saveManifest{Config: "config.json"}
	for i := range spec.DiffIDs {
		m.Layers = append(m.Layers, "l"+strconv.Itoa(i)+"/layer.tar")
	}
	if err := st.final(m); err != nil {
		return 0, bytes, fmt.Errorf("node %s: docker load of image %s pulled from %s: %w", s.Node, spec.ID, from, err)
	}
	if err := checkLoaded(ctx, d, spec, from); err != nil {
		return 0, bytes, err
	}
	dropPartials(ctx, d, spec.ID, "")
	return len(spec.DiffIDs) - have, bytes, nil
}

// fetch spools src's config and its layers from have on into st (Jobs at
// once), each checked against its digest: the compressed bytes fetched.
func (s PullSpec) fetch(ctx context.Context, st *stager, src pullSource, have int, o PullOptions) (int64, error) {
	raw, err := src.img.RawConfigFile()
	if err != nil {
		return 0, s.pullErr(ctx, src.id, err)
	}
	if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != src.id {
		return 0, fault.Permanent(CorruptLayer, fmt.Errorf("node %s: the config of %s does not hash to %s", s.Node, s.Ref, src.id))
	}
	if err := spoolBytes(st, raw, src.id); err != nil {
		return 0, fmt.Errorf("node %s: %w", s.Node, err)
	}
	layers, err := src.img.Layers()
	if err != nil {
		return 0, s.pullErr(ctx, src.id, err)
	}
	if len(layers) != len(src.diffIDs) {
		return 0, fault.Permanent(CorruptLayer, fmt.Errorf("node %s: image %s lists %d layers, its config %d", s.Node, s.Ref, len(layers), len(src.diffIDs)))
	}
	jobs := o.Jobs
	if jobs <= 0 {
		jobs = 3
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(jobs)
	var mu sync.Mutex
	var total int64
	done := 0
	for i := have; i < len(layers); i++ {
		g.Go(func() error {
			size, err := fetchLayer(gctx, st, layers[i], src.diffIDs[i])
			if err != nil {
				if typ, ok := fault.TypeOf(err); ok && typ == CorruptLayer {
					return fmt.Errorf("node %s: layer %d of %s: %w", s.Node, i+1, s.Ref, err)
				}
				return s.pullErr(gctx, fmt.Sprintf("layer %d of %s", i+1, s.Ref), err)
			}
			mu.Lock()
			defer mu.Unlock()
			total += size
			done++
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("layer %d/%d fetched (%d of %d missing, %d bytes)", i+1, len(layers), done, len(layers)-have, total))
			}
			return nil
		})
	}
	err = g.Wait()
	return total, err
}

// spoolBytes spools b (whose digest is digest) into st.
func spoolBytes(st *stager, b []byte, digest string) error {
	f, err := st.file()
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("spool: %w", err)
	}
	st.took(f.Name(), digest)
	return nil
}

// fetchLayer spools l's uncompressed bytes into st, checked against
// diffID (the config's, which the manifest's digest pins): the
// compressed size fetched.
func fetchLayer(ctx context.Context, st *stager, l v1.Layer, diffID string) (int64, error) {
	if mt, err := l.MediaType(); err == nil && !mt.IsDistributable() {
		return 0, fault.Permanent(fault.InvalidSpec, fmt.Errorf("layer %s is not distributable (%s): such images cannot be pulled here", diffID, mt))
	}
	size, err := l.Size()
	if err != nil {
		return 0, err
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	f, err := st.file()
	if err != nil {
		return 0, fmt.Errorf("spool: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), ctxReader{ctx, rc})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
			err = fault.Permanent(CorruptLayer, fmt.Errorf("hashes to %s, its config says %s: corrupt bytes from the registry; nothing of it was loaded", got, diffID))
		}
	}
	if err != nil {
		os.Remove(f.Name())
		return 0, err
	}
	st.took(f.Name(), diffID)
	return size, nil
}

// ctxReader ends a read once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
