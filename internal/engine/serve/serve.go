package serve

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// Docker is the part of the Docker API this package uses; *client.Client
// satisfies it (locally or through node.DockerClient over SSH). Kept narrow
// so the engine's needs are visible in one place.
type Docker interface {
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerStop(ctx context.Context, containerID string, options container.StopOptions) error
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerLogs(ctx context.Context, containerID string, options container.LogsOptions) (io.ReadCloser, error)
	CopyToContainer(ctx context.Context, containerID, dstPath string, content io.Reader, options container.CopyToContainerOptions) error
}

var _ Docker = (*client.Client)(nil)

// ImageInfo identifies the image a lane runs, for the run's history.
type ImageInfo struct {
	ID string `json:"id"`
	// Digest is the first repo digest (empty for images built or loaded
	// locally, which have none).
	Digest string `json:"digest,omitempty"`
}

// EnsureImage checks that image is present on node's Docker. Nothing is
// pulled (nodes have no registry): a missing image is a permanent
// ImageMissing error saying how to get it there.
//
// build, when given, says how the recipe builds the image (its builder
// and build_args), quoted in the error so the operator can build it on
// that node.
func EnsureImage(ctx context.Context, d Docker, image, node string, build ...string) (ImageInfo, error) {
	if image == "" {
		return ImageInfo{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: no image given: set the recipe's image", node))
	}
	ins, err := d.ImageInspect(ctx, image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			how := "build or load it on that node"
			if len(build) > 0 && build[0] != "" {
				how = "build it there as the recipe says (" + build[0] + "), or load it"
			}
			return ImageInfo{}, fault.Permanent(fault.ImageMissing, fmt.Errorf("image %s missing on node %s: %s (docker save %s | ssh %s docker load; the demo builds sparklane/engine-sim)", image, node, how, image, node))
		}
		return ImageInfo{}, fmt.Errorf("inspect image %s on node %s: %w", image, node, err)
	}
	info := ImageInfo{ID: ins.ID}
	if len(ins.RepoDigests) > 0 {
		info.Digest = ins.RepoDigests[0]
	}
	return info, nil
}

// RankSpec is one rank's container on one node.
type RankSpec struct {
	Lane string `json:"lane"`
	Node string `json:"node"`
	Rank int    `json:"rank"`
	// RecipeHash identifies the rendered recipe: a running container with
	// the same hash is left alone, any other is replaced.
	RecipeHash string `json:"recipe_hash"`
	Image      string `json:"image"`
	// ImageID, when set, is the image ID the serve step's image check
	// resolved on this node: the container is created from it (and
	// labelled LabelImage with Image), so a pinned repo:tag@sha256:D that
	// was moved here — `docker load` sets no repo digest — starts, and
	// runs exactly the image that was checked.
	ImageID string `json:"image_id,omitempty"`
	// Argv is the container command (the image's entrypoint, if any, stays).
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env,omitempty"`
	// SecretEnv names the Env keys whose values are secrets (labelled
	// LabelSecretEnv; their values are masked in the logs read back).
	SecretEnv []string `json:"secret_env,omitempty"`
	// Mounts have node-local sources (fs_root already applied).
	Mounts []contract.Mount `json:"mounts,omitempty"`
	// Roots and SharedRoots bound the mount sources (fs_root applied to
	// Roots): a source outside them, lexically or through a symlink, is
	// refused before any container exists unless its mount says Host.
	Roots       []string `json:"roots,omitempty"`
	SharedRoots []string `json:"shared_roots,omitempty"`
	// CreateSources lists mount sources StartRank may create when missing
	// (JIT cache dirs, create = true); any other missing source is an
	// error. Each is made beneath one of Roots (openat2 RESOLVE_BENEATH: no
	// link followed out of the root), mode 0755.
	CreateSources []string `json:"create_sources,omitempty"`
	// CreateOwner is "UID[:GID]" (numeric) the created sources are given:
	// the container's user, so an engine that does not run as root can
	// write its cache. Empty: the node worker's user.
	CreateOwner string `json:"create_owner,omitempty"`
	// GPUs requests every NVIDIA GPU (real runtimes; false for sim).
	GPUs        bool              `json:"gpus"`
	ExtraLabels map[string]string `json:"extra_labels,omitempty"`
	// Container is the rendered container shape (network, IPC, shm,
	// ulimits, devices, user, security options); its zero value is the
	// shape plans rendered before it existed had: host network and IPC.
	Container contract.ContainerSpec `json:"container"`
	// PreExec runs in the container before Argv: copies (a mod's
	// directory) go in between create and start, shell commands run
	// first and the serve command is exec'd after them, so the engine is
	// still the container's main process.
	PreExec []contract.PreExec `json:"pre_exec,omitempty"`
}

// RankStarted says which container serves the rank and whether this call
// created it (false: an identical one was already running).
type RankStarted struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Created bool   `json:"created"`
}

// ContainerName is the deterministic name of a lane's rank container,
// sparklane-LANE-rRANK: contract.ContainerName, the one place names are made
// (lane names are validated there, so they are valid Docker names).
func ContainerName(lane string, rank int) string { return contract.ContainerName(lane, rank) }

// StartRank starts one rank's container, looking before it creates: an
// existing container of that name with the same recipe hash that is running
// is left alone (one only created is started); one that exited, or runs
// another recipe, is removed and recreated. A container of that name not
// made by sparklane is not touched.
func StartRank(ctx context.Context, d Docker, spec RankSpec) (RankStarted, error) {
	name := ContainerName(spec.Lane, spec.Rank)
	if spec.Lane == "" || spec.Image == "" {
		return RankStarted{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("rank %d on node %s: lane and image are required", spec.Rank, spec.Node))
	}
	mounts, err := CheckMountSources(spec.Node, spec.Mounts, spec.Roots, spec.SharedRoots)
	if err != nil {
		return RankStarted{}, fmt.Errorf("container %s: %w", name, err)
	}
	spec.Mounts = mounts
	if err := checkSources(spec, name); err != nil {
		return RankStarted{}, err
	}
	for attempt := 0; ; attempt++ {
		ex, err := d.ContainerInspect(ctx, name)
		switch {
		case err == nil:
			if ex.Config == nil || ex.Config.Labels[contract.LabelLane] == "" {
				return RankStarted{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: container %s exists but was not made by sparklane (no %s label): remove or rename it by hand (docker rm -f %s)", spec.Node, name, contract.LabelLane, name))
			}
			sameHash := ex.Config.Labels[contract.LabelRecipeHash] == spec.RecipeHash
			if ex.State != nil && ex.State.Running && sameHash {
				return RankStarted{ID: ex.ID, Name: name}, nil
			}
			if ex.State != nil && ex.State.Status == "created" && sameHash {
				// Created but never started: another StartRank of the same
				// rank is between create and start. Starting twice is fine.
				if err := d.ContainerStart(ctx, ex.ID, container.StartOptions{}); err != nil {
					return RankStarted{}, fmt.Errorf("node %s: start container %s: %w", spec.Node, name, err)
				}
				return RankStarted{ID: ex.ID, Name: name}, nil
			}
			if err := d.ContainerRemove(ctx, ex.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				return RankStarted{}, fmt.Errorf("node %s: remove stale container %s (recipe hash %s, want %s): %w", spec.Node, name, ex.Config.Labels[contract.LabelRecipeHash], spec.RecipeHash, err)
			}
		case !cerrdefs.IsNotFound(err):
			return RankStarted{}, fmt.Errorf("node %s: inspect container %s: %w", spec.Node, name, err)
		}
		cfg, hc, err := containerConfig(ctx, d, spec)
		if err != nil {
			return RankStarted{}, err
		}
		created, err := d.ContainerCreate(ctx, cfg, hc, nil, nil, name)
		if err != nil {
			if cerrdefs.IsConflict(err) && attempt < 10 {
				// Someone is creating it meanwhile (the engine reserves the
				// name before the container can be inspected): look again.
				select {
				case <-ctx.Done():
					return RankStarted{}, fmt.Errorf("node %s: create container %s: %w", spec.Node, name, ctx.Err())
				case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
				}
				continue
			}
			if cerrdefs.IsNotFound(err) {
				return RankStarted{}, fault.Permanent(fault.ImageMissing, fmt.Errorf("create %s on node %s: image %s missing: build or load it there (%v)", name, spec.Node, spec.Image, err))
			}
			return RankStarted{}, fmt.Errorf("node %s: create container %s: %w", spec.Node, name, err)
		}
		if err := copyPreExec(ctx, d, created.ID, spec); err != nil {
			_ = d.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
			return RankStarted{}, err
		}
		if err := d.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
			_ = d.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
			if strings.Contains(err.Error(), "rlimit") {
				return RankStarted{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: start container %s: its Docker cannot grant the ulimits %v (memlock=-1 needs a dockerd allowed to raise it: LimitMEMLOCK=infinity in its unit): fix the node, or set executor_config.ulimit in the recipe: %w", spec.Node, name, spec.Container.Ulimits, err))
			}
			return RankStarted{}, fmt.Errorf("node %s: start container %s (%s): %w", spec.Node, name, strings.Join(spec.Argv, " "), err)
		}
		return RankStarted{ID: created.ID, Name: name, Created: true}, nil
	}
}

func checkSources(spec RankSpec, name string) error {
	create := map[string]bool{}
	for _, s := range spec.CreateSources {
		create[s] = true
		// Mount sources arrive resolved (CheckMountSources).
		if r, err := resolveExisting(filepath.Clean(s)); err == nil {
			create[r] = true
		}
	}
	seen := map[string]string{}
	for _, m := range spec.Mounts {
		d := filepath.Clean(m.Dst)
		if prev, dup := seen[d]; dup && m.Dst != "" {
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("container %s on node %s: two binds land at %s (from %s and from %s): a recipe [[mounts]] entry duplicates a bind of the staging manifest (a skipped file of an export); remove the recipe's mount", name, spec.Node, d, prev, m.Src))
		}
		seen[d] = m.Src
	}
	for i, m := range spec.Mounts {
		if m.Src == "" || m.Dst == "" {
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("container %s on node %s: mount %d (%q -> %q) needs both src and dst", name, spec.Node, i, m.Src, m.Dst))
		}
		if _, err := os.Stat(m.Src); err != nil {
			if os.IsNotExist(err) && create[m.Src] {
				if err := createSource(spec, m); err != nil {
					return fmt.Errorf("container %s on node %s: %w", name, spec.Node, err)
				}
				continue
			}
			if os.IsNotExist(err) {
				return fault.Permanent(fault.SourceMissing, fmt.Errorf("container %s on node %s: bind source %s (mount -> %s) does not exist: stage the lane first, or fix the recipe's [[mounts]] src", name, spec.Node, m.Src, m.Dst))
			}
			return fmt.Errorf("container %s on node %s: bind source %s (mount -> %s): %w", name, spec.Node, m.Src, m.Dst, err)
		}
	}
	return nil
}

// createSource makes a create = true mount source beneath the node's
// roots (never through a link out of them) and gives the directories it
// made to spec.CreateOwner.
func createSource(spec RankSpec, m contract.Mount) error {
	uid, gid := -1, -1
	if o := spec.CreateOwner; o != "" {
		u, g, hasG := strings.Cut(o, ":")
		var err error
		if uid, err = strconv.Atoi(u); err != nil || uid < 0 {
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("create bind source %s: owner %q is not UID[:GID]", m.Src, o))
		}
		gid = uid
		if hasG {
			if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
				return fault.Permanent(fault.InvalidSpec, fmt.Errorf("create bind source %s: owner %q is not UID[:GID]", m.Src, o))
			}
		}
	}
	// The first missing component: everything from it down is ours to own.
	first := m.Src
	for p := filepath.Dir(m.Src); p != filepath.Dir(p); p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		first = p
	}
	dc := staging.NewDirs(spec.Roots)
	defer dc.Close()
	if _, err := dc.Dir(m.Src, true); err != nil {
		if _, ok := fault.TypeOf(err); ok {
			return fmt.Errorf("create bind source %s for mount -> %s: %w", m.Src, m.Dst, err)
		}
		return fault.Permanent(MountRefused, fmt.Errorf("create bind source %s for mount -> %s beneath the node's roots %v: %w", m.Src, m.Dst, spec.Roots, err))
	}
	if uid < 0 {
		return nil
	}
	for p := m.Src; ; p = filepath.Dir(p) {
		d, name, err := dc.Parent(p, false)
		if err != nil {
			return fmt.Errorf("create bind source %s: open %s: %w", m.Src, filepath.Dir(p), err)
		}
		if err := unix.Fchownat(d.Fd(), name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("create bind source %s: give %s to %s: %w (the node worker needs CAP_CHOWN, or run the lane as the worker's user)", m.Src, p, spec.CreateOwner, err)
		}
		if p == first {
			return nil
		}
	}
}
