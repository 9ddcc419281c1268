package activities

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/imagespec"
)

// ImageTLS is a node's fleet identity for image transfers: the server
// side (client certificates of the fleet CA required) and the client side.
type ImageTLS struct {
	Server, Client *tls.Config
}

// imageDocker is the node's Docker as the image engine needs it.
func (a *NodeActivities) imageDocker(ctx context.Context) (images.Docker, error) {
	d, err := a.dockerClient(ctx)
	if err != nil {
		return nil, err
	}
	id, ok := d.(images.Docker)
	if !ok {
		return nil, fmt.Errorf("node %s: its Docker client cannot save or load images", a.Node.Name)
	}
	return id, nil
}

// imageAddr is where this node serves a transfer, or why it cannot.
func (a *NodeActivities) imageAddr() (addr, why string) {
	switch {
	case a.Node.Address == "":
		return "", "node " + a.Node.Name + " has no address in the config"
	case a.ImageTLS == nil:
		return "", "node " + a.Node.Name + " has no fleet identity (relay-" + a.Node.Name + " under STATE_DIR/pki: starter control certs, or starter fleet install)"
	}
	port := a.ImagePort
	if port == 0 {
		port = 7291
	}
	return net.JoinHostPort(a.Node.Address, strconv.Itoa(port)), ""
}

// ImageInventory reports what this node has of the image: the image
// (ID, repo digests, layers) or, given the layers, how many of them.
// A pinned digest the node's image does not carry is a permanent
// ImageDigestMismatch naming the node.
func (a *NodeActivities) ImageInventory(ctx context.Context, in contract.ImageInventoryInput) (contract.ImageInventoryResult, error) {
	ref := in.Image
	if ref.IsZero() {
		return contract.ImageInventoryResult{}, classify(fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: image inventory without an image", a.Node.Name)))
	}
	d, err := a.imageDocker(ctx)
	if err != nil {
		return contract.ImageInventoryResult{}, classify(err)
	}
	inv, err := images.Inspect(ctx, d, ref, a.Node.Name)
	if err != nil {
		return contract.ImageInventoryResult{}, classify(err)
	}
	if in.Want != "" && inv.Present && inv.ID != in.Want {
		// A stale image under the tag (the previous build): the new one
		// replaces it, sharing what layers it can.
		inv = images.Inventory{Node: inv.Node}
	}
	if !inv.Present && len(in.DiffIDs) > 0 {
		if inv.HaveLayers, inv.Containerd, err = images.HaveLayers(ctx, d, a.Node.Name, in.DiffIDs); err != nil {
			return contract.ImageInventoryResult{}, classify(err)
		}
	}
	res := contract.ImageInventoryResult{ImageInventory: imageInventory(inv)}
	res.Addr, res.NoTransfer = a.imageAddr()
	return res, nil
}

// TransferImage does this node's part of an image transfer: it binds its
// address:image_port only while it serves its downstream (mTLS, that
// node's certificate only), and sends (the source) or receives, checks,
// loads and forwards the stream. A receiver that finds the image already
// here sends it itself instead, so a retried chain converges.
func (a *NodeActivities) TransferImage(ctx context.Context, in contract.TransferImageInput) (contract.TransferImageResult, error) {
	d, err := a.imageDocker(ctx)
	if err != nil {
		return contract.TransferImageResult{}, classify(err)
	}
	addr, why := a.imageAddr()
	if why != "" {
		return contract.TransferImageResult{}, classify(fault.Permanent(fault.InvalidSpec, fmt.Errorf("image transfer: %s", why)))
	}
	m := images.Member{Docker: d, Node: a.Node.Name, Spec: engineSpec(in.Spec), Have: in.Have, Upstream: in.Upstream, UpstreamAddr: in.UpstreamAddr,
		Downstream: in.Downstream, ListenAddr: addr, ServerTLS: a.ImageTLS.Server, ClientTLS: a.ImageTLS.Client, Wait: 5 * time.Minute,
		Durable: a.Seams.imageDurable(ctx, a.Node.Name)}
	if in.Upstream != "" {
		if ins, err := d.ImageInspect(ctx, in.Spec.Tag); err == nil && ins.ID == in.Spec.ID {
			m.Upstream, m.UpstreamAddr = "", ""
		}
	}
	stop := keepAlive(ctx)
	defer stop()
	moved, err := m.Run(ctx)
	if m.Upstream != "" {
		a.Metrics.ImageReceived(in.Lane, a.Node.Name, m.Upstream, moved.BytesIn)
	}
	if err != nil {
		return contract.TransferImageResult{ImageMoved: imageMoved(moved)}, classify(err)
	}
	if a.Log != nil {
		a.Log.Info("image transfer done", zap.String("image", in.Spec.Tag), zap.Int64("bytes_in", moved.BytesIn), zap.Int64("bytes_out", moved.BytesOut), zap.Int("layers", moved.Layers))
	}
	return contract.TransferImageResult{ImageMoved: imageMoved(moved)}, nil
}

// BuildImage builds the lane's image here from its recipe's [build]
// (images.Build: a context under this node's shared roots, symlinks
// refused, or a git URL), heartbeating the build log line by line. A
// failing step is a permanent ImageBuildFailed carrying the last lines.
func (a *NodeActivities) BuildImage(ctx context.Context, in contract.BuildImageInput) (contract.BuildImageResult, error) {
	ref := in.Image
	if ref.Name == "" {
		return contract.BuildImageResult{}, classify(fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: image %q cannot tag a build: give repo:tag", a.Node.Name, ref)))
	}
	d, err := a.dockerClient(ctx)
	if err != nil {
		return contract.BuildImageResult{}, classify(err)
	}
	b, ok := d.(images.Builder)
	if !ok {
		return contract.BuildImageResult{}, classify(fmt.Errorf("node %s: its Docker client cannot build images", a.Node.Name))
	}
	stop := keepAlive(ctx) // a long RUN step prints nothing for minutes
	defer stop()
	built, err := images.Build(ctx, b, a.Node.Name, ref.Name, in.Build, a.SharedRoots, func(l string) {
		heartbeat(ctx, contract.BuildProgress{Line: l})
	})
	if err != nil {
		return contract.BuildImageResult{Node: a.Node.Name, Tail: built.Tail}, classify(err)
	}
	if a.Log != nil {
		a.Log.Info("image built", zap.String("image", ref.Name), zap.String("id", built.ID))
	}
	return contract.BuildImageResult{Node: a.Node.Name, ID: built.ID, Tail: built.Tail}, nil
}

// PullImage pulls the lane's image here from its registry with
// sparklane's own registry client (images.Pull: the manifest for this
// node's platform, the layers it lacks, each checked, loaded into this
// node's Docker, which needs no registry configuration), heartbeating
// the pull's progress, tags it as the recipe's reference and checks a
// pinned digest. Credentials come in a one-pull file the control service
// wrote here (SendRegistryAuth): read and removed as the pull starts.
func (a *NodeActivities) PullImage(ctx context.Context, in contract.PullImageInput) (contract.PullImageResult, error) {
	res := contract.PullImageResult{Node: a.Node.Name}
	if err := imagespec.CheckRegistry(in.Registry, ""); err != nil || in.Registry == "" {
		return res, classify(fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: pull %s from registry %q: %v", a.Node.Name, in.Image, in.Registry, err)))
	}
	auth, err := a.pullCredentials(in)
	if err != nil {
		return res, classify(err)
	}
	d, err := a.dockerClient(ctx)
	if err != nil {
		return res, classify(err)
	}
	p, ok := d.(images.PullDocker)
	if !ok {
		return res, classify(fmt.Errorf("node %s: its Docker client cannot load images", a.Node.Name))
	}
	stop := keepAlive(ctx)
	defer stop()
	from := in.AuthFrom
	if from == "" {
		from = in.AuthFile
	}
	pulled, err := images.Pull(ctx, p, images.PullSpec{Node: a.Node.Name, Ref: in.Image, Registry: in.Registry, Insecure: in.Insecure, Auth: auth, AuthFile: from, ConfigFile: in.ConfigFile},
		images.PullOptions{Progress: func(l string) { heartbeat(ctx, contract.BuildProgress{Line: l}) }})
	res.ImagePulled = imagePulled(pulled)
	if err != nil {
		return res, classify(err)
	}
	if a.Log != nil {
		a.Log.Info("image pulled", zap.Stringer("image", in.Image), zap.String("from", pulled.From), zap.String("id", pulled.ID),
			zap.Int("layers", pulled.Layers), zap.Int64("bytes", pulled.Bytes), zap.Bool("login", auth != nil))
	}
	return res, nil
}

// pullCredentials are the pull's login: the one-pull file the control
// service wrote (taken: read and removed), else a file on this node that
// a run started before the credentials moved to the control host names;
// nil for an anonymous pull.
func (a *NodeActivities) pullCredentials(in contract.PullImageInput) (*images.Credentials, error) {
	switch {
	case in.Credentials != "":
		if err := images.CheckCredentialPath(in.Credentials); err != nil {
			return nil, fmt.Errorf("node %s: %w", a.Node.Name, err)
		}
		c, err := images.TakeCredentials(a.local(images.CredentialDir), filepath.Base(in.Credentials), in.Registry)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", a.Node.Name, err)
		}
		return &c, nil
	case in.AuthFile != "":
		c, err := images.LookupCredentials(a.local(in.AuthFile), in.Registry)
		if err != nil {
			return nil, fmt.Errorf("node %s (a run started before image_registry_auth_file moved to the control host reads it here): %w", a.Node.Name, err)
		}
		return c, nil
	}
	return nil, nil
}
