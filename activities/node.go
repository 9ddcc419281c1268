package activities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/disk"
	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/engine/memfit"
	"github.com/sparklane/sparklane/internal/engine/relay"
	"github.com/sparklane/sparklane/internal/engine/secretenv"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/metrics"
	"github.com/sparklane/sparklane/internal/node"
)

// NodeActivities run on one node's worker (queue node.NAME) against that
// node's disk and Docker socket. Every node-local path goes through the
// node's fs_root, except paths under the fleet's shared roots (the NAS).
type NodeActivities struct {
	Node config.Node
	// SharedRoots are the fleet's shared_roots; HFCacheDir the NAS hub root
	// used when a hub-mirror block names no src.
	SharedRoots []string
	HFCacheDir  string
	Log         *zap.Logger
	// RDMARoot prefixes /sys/class/infiniband and /dev/infiniband when the
	// worker detects the node's RDMA devices ("" is /; tests point it at a
	// fake tree, a double for hardware this machine lacks).
	RDMARoot string
	// MemInfo is the meminfo file NodeStatus reads the node's memory from
	// (empty: /proc/meminfo; tests give a fake one).
	MemInfo string
	// Relay is this node's relay receiver (its server serves the same
	// registry); nil when the node has no relay identity, and then a
	// relayed block is staged from the NAS alone.
	Relay *relay.Receiver
	// RelayAddr maps a peer node to the relay address its worker bound in
	// this process (simulated nodes on one machine bind free ports); nil
	// or "" keeps the address of the input.
	RelayAddr func(node string) string
	// Getenv reads the node worker's environment for env_from "env:NAME"
	// sources (nil: os.Getenv); tests give each simulated node its own.
	Getenv func(string) string
	// Metrics records staging and verify figures (nil: none).
	Metrics *metrics.Metrics
	// ImageTLS is the node's fleet identity for image transfers (nil: the
	// node cannot send or receive an image); ImagePort the port it binds
	// on its address while it sends one (0: 7291).
	ImageTLS  *ImageTLS
	ImagePort int
	// Staging is the fleet's [staging] limits, applied while a lane
	// serves on this node as it stages (the zero value: no rate, the
	// default memory floor).
	Staging config.StagingLimits
	// Seams are a test's fault points (nil in production).
	Seams *Seams

	mu      sync.Mutex
	docker  serve.Docker
	secrets map[string][]string // lane → its resolved env_from values
}

func (a *NodeActivities) local(p string) string { return a.Node.LocalPath(p, a.SharedRoots) }

func (a *NodeActivities) roots() []string {
	out := make([]string, len(a.Node.Roots))
	for i, r := range a.Node.Roots {
		out[i] = a.local(r)
	}
	return out
}

// dockerClient connects to the node's own Docker socket once.
func (a *NodeActivities) dockerClient(ctx context.Context) (serve.Docker, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.docker != nil {
		return a.docker, nil
	}
	c, err := node.DockerClient(ctx, a.Node.Docker, nil)
	if err != nil {
		return nil, fmt.Errorf("node %s: docker at %s: %w", a.Node.Name, a.Node.Docker, err)
	}
	a.docker = c
	return c, nil
}

// NodeStatus reports the lanes whose containers run here and the free space
// on each staging root.
func (a *NodeActivities) NodeStatus(ctx context.Context, in contract.NodeStatusInput) (contract.NodeStatusResult, error) {
	res := contract.NodeStatusResult{Node: a.Node.Name}
	res.MemTotal, _ = memfit.ReadMemTotal(a.MemInfo) // unread: the fit falls back to the config or a DGX Spark
	for _, r := range a.Node.Roots {
		rf := contract.RootFree{Root: r}
		free, err := staging.FreeBytes(a.local(r))
		if err != nil {
			rf.Error = err.Error()
		}
		rf.Free = free
		res.Roots = append(res.Roots, rf)
	}
	d, err := a.dockerClient(ctx)
	if err != nil {
		return res, classify(err)
	}
	// Only this node's containers: simulated nodes may share one engine.
	cs, err := d.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", contract.LabelLane), filters.Arg("label", contract.LabelNode+"="+a.Node.Name))})
	if err != nil {
		return res, classify(fmt.Errorf("node %s: list containers: %w", a.Node.Name, err))
	}
	seen := map[string]bool{}
	for _, c := range cs {
		if l := c.Labels[contract.LabelLane]; !seen[l] {
			seen[l] = true
			res.Lanes = append(res.Lanes, l)
		}
		for _, n := range c.Names {
			res.Containers = append(res.Containers, strings.TrimPrefix(n, "/"))
		}
	}
	sort.Strings(res.Lanes)
	sort.Strings(res.Containers)
	f, err := serve.FindForeign(ctx, d, in.Ports, nil)
	if err != nil {
		return res, classify(fmt.Errorf("node %s: %w", a.Node.Name, err))
	}
	res.Foreign = each(f, foreign)
	return res, nil
}

// StopForeign stops foreign containers by name (cutover --stop-foreign);
// it never removes them.
func (a *NodeActivities) StopForeign(ctx context.Context, in contract.StopForeignInput) (contract.StopForeignResult, error) {
	d, err := a.dockerClient(ctx)
	if err != nil {
		return contract.StopForeignResult{}, classify(err)
	}
	stopped, err := serve.StopForeign(ctx, d, in.Names)
	if err != nil {
		return contract.StopForeignResult{Node: a.Node.Name, Stopped: stopped}, classify(fmt.Errorf("node %s: %w", a.Node.Name, err))
	}
	return contract.StopForeignResult{Node: a.Node.Name, Stopped: stopped}, nil
}

func (a *NodeActivities) hubSpec(b contract.Staging) hubmirror.Spec {
	src := b.Src
	if src == "" {
		src = a.HFCacheDir
	}
	spec := hubmirror.Spec{
		Src: a.local(src), Dst: a.local(b.Dst), Repos: b.Repos, Skip: b.Skip,
		Verify: b.Verify, MinFree: b.MinFree, Roots: a.roots(), SharedRoots: a.sharedRoots(),
	}
	for _, e := range b.Exports {
		spec.Exports = append(spec.Exports, hubmirror.Export{Repo: e.Repo, Path: a.local(b.ExportPath(e))})
	}
	return spec
}

// sharedRoots are the fleet's shared roots as this node sees them: the only
// places besides a block's src that its source links may resolve into.
func (a *NodeActivities) sharedRoots() []string {
	out := make([]string, len(a.SharedRoots))
	for i, r := range a.SharedRoots {
		out[i] = a.local(r)
	}
	return out
}

func (a *NodeActivities) rowsSpec(b contract.Staging, rank, tp int) sparserows.Spec {
	return sparserows.Spec{
		Src: a.local(b.Src), Dst: a.local(b.Dst), Format: b.Format, Tensors: b.Tensors, Layers: b.Layers,
		Rank: rank, TP: tp, MinFree: b.MinFree, Roots: a.roots(), RecordBytes: b.RecordBytes,
	}
}

// StageBlock runs one [[staging]] block here. It heartbeats the engine's
// progress and, when retried after a crash, resumes from the last heartbeat
// and the temp files on disk: after a worker's kill nothing of a hub-mirror
// temp file is copied again (within the boot that wrote it), after a
// machine's crash at most two flush intervals per in-flight file; at most
// one block of rows (sparse-rows).
func (a *NodeActivities) StageBlock(ctx context.Context, in contract.StageBlockInput) (contract.StageBlockResult, error) {
	out := contract.StageBlockResult{Node: a.Node.Name, Block: in.Block.ID, Kind: in.Block.Kind}
	opts := staging.Options{DryRun: in.DryRun, Force: in.Force}
	var prev contract.StageProgress
	if resumeFrom(ctx, &prev) {
		p := engineProgress(prev)
		opts.Resume = &p
		a.Log.Info("resuming staging from heartbeat", zap.String("block", in.Block.ID), zap.Int64("bytes_done", prev.BytesDone), zap.Int64("rows_done", prev.RowsDone))
	} else if in.Resume != nil {
		p := engineProgress(*in.Resume)
		opts.Resume = &p
		a.Log.Info("resuming staging from the progress of an activity that lost its node", zap.String("block", in.Block.ID), zap.Int64("bytes_done", in.Resume.BytesDone), zap.Int64("rows_done", in.Resume.RowsDone))
	}
	beat := &stageBeat{}
	opts.OnProgress = func(p staging.Progress) {
		beat.set(p)
		a.hold(ctx, in, beat)
		if !beat.due() {
			return
		}
		heartbeat(ctx, beat.details())
		a.Metrics.StagingProgress(in.Lane, a.Node.Name, in.Block.ID, p.BytesDone)
	}
	opts.Pacer = a.pacer(ctx, in, beat)
	err := a.stageEngine(ctx, in, opts, beat, &out)
	if short := (*staging.ShortError)(nil); err != nil && in.Room != nil && !in.DryRun && errors.As(err, &short) {
		var retry bool
		if retry, err = a.makeRoom(ctx, in, short, err); retry {
			err = a.stageEngine(ctx, in, opts, beat, &out)
		}
	}
	if err != nil {
		return out, classify(fmt.Errorf("node %s, block %s: %w", a.Node.Name, in.Block.ID, err))
	}
	if r := out.Result; !r.DryRun {
		a.Metrics.StagingProgress(in.Lane, a.Node.Name, in.Block.ID, r.TotalBytes)
		a.Metrics.Staged(in.Lane, a.Node.Name, in.Block.ID, r.CopiedBytes, time.Duration(r.Seconds*float64(time.Second)))
		repaired := 0
		if r.VerifiedFiles+r.AdoptedFiles > 0 {
			repaired = r.CopiedFiles // staged before: what it copied was gone or changed
		}
		a.Metrics.Verified(in.Lane, a.Node.Name, in.Block.ID, r.VerifiedFiles, repaired)
	}
	if in.Verify && !in.DryRun {
		// The staging's last progress is heartbeated meanwhile, so a
		// retry resumes from it (everything staged) rather than afresh.
		stop := keepAliveWith(ctx, beat.details())
		v, err := a.verifyBlock(ctx, contract.VerifyBlockInput{Lane: in.Lane, Block: in.Block, Rank: in.Rank, TP: in.TP})
		stop()
		if err != nil {
			return out, err
		}
		out.Verified = &v
	}
	return out, nil
}

// makeRoom answers a failed min_free check (or a write a full disk
// stopped): with in.Room.MakeRoom it prunes least recently served blocks
// of lanes neither staging now nor running here until the need is met,
// and says to stage again; otherwise (or when pruning could not free
// enough) it returns the error completed with disk.Room's hint: the lanes
// whose blocks would free enough there and the command that prunes them,
// or that none would and what to do instead.
func (a *NodeActivities) makeRoom(ctx context.Context, in contract.StageBlockInput, short *staging.ShortError, err error) (bool, error) {
	running, rerr := a.runningLanes(ctx)
	if rerr != nil {
		return false, fmt.Errorf("%w (could not list the lanes running here to suggest a prune: %v)", err, rerr)
	}
	protected := append([]string{in.Lane}, running...)
	stop := keepAlive(ctx)
	room, perr := disk.MakeRoom(a.roots(), a.localBlocks(in.Room.Blocks), short.Path, short.Need, protected, !in.Room.MakeRoom)
	stop()
	if perr != nil {
		return false, fmt.Errorf("%w (%v)", err, perr)
	}
	for _, r := range room.Take {
		if r.Error != "" {
			return false, fmt.Errorf("%w; making room failed: %s", err, r.Error)
		}
	}
	if in.Room.MakeRoom && room.Enough {
		for _, r := range room.Take {
			a.Log.Info("made room: removed a least recently served block", zap.String("lanes", strings.Join(r.Lanes, ",")), zap.String("dst", r.Dst), zap.Int64("bytes", r.Bytes))
		}
		return true, nil
	}
	return false, fmt.Errorf("%w; %s", err, room.Hint(a.Node.Name))
}

// stageEngine runs the block's staging engine (through the relay when
// asked), filling out.Result.
func (a *NodeActivities) stageEngine(ctx context.Context, in contract.StageBlockInput, opts staging.Options, beat *stageBeat, out *contract.StageBlockResult) error {
	r, err := a.runEngine(ctx, in, opts, beat)
	out.Result = blockResult(r)
	return err
}

// runEngine runs the block's staging engine (through the relay when
// asked); beat is what it heartbeats.
func (a *NodeActivities) runEngine(ctx context.Context, in contract.StageBlockInput, opts staging.Options, beat *stageBeat) (staging.Result, error) {
	switch in.Block.Kind {
	case "hub-mirror":
		if in.Relay != nil && len(in.Relay.Nodes) > 1 && !in.DryRun && !in.Force {
			if a.Relay == nil {
				a.Log.Warn("relay asked for, but this node worker has no relay identity (ca.pem, relay-NODE.pem under state_dir/pki): reading the NAS", zap.String("block", in.Block.ID))
			} else {
				h := relay.HubMirror{Receiver: a.Relay, Key: in.Lane + "/" + in.Block.ID, Node: a.Node.Name, Nodes: in.Relay.Nodes, Peers: a.relayPeers(in.Relay.Peers)}
				// A node may wait minutes for a peer to begin a file (it
				// works through its own NAS reads first) with no bytes to
				// report: the last progress is heartbeated again on a
				// timer, so the wait is not taken for a dead worker.
				stop := make(chan struct{})
				go func() {
					t := time.NewTicker(10 * time.Second)
					defer t.Stop()
					for {
						select {
						case <-t.C:
							heartbeat(ctx, beat.details())
						case <-stop:
							return
						case <-ctx.Done():
							return
						}
					}
				}()
				defer close(stop)
				return h.Stage(ctx, a.hubSpec(in.Block), opts, a.Log)
			}
		}
		return hubmirror.Stage(ctx, a.hubSpec(in.Block), opts)
	case "sparse-rows":
		// Each rank reads only its own row ranges from the NAS, which do
		// not overlap between ranks: there is nothing to relay.
		return sparserows.Stage(ctx, a.rowsSpec(in.Block, in.Rank, in.TP), opts)
	}
	return staging.Result{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("staging block %s: unknown kind %q (hub-mirror | sparse-rows)", in.Block.ID, in.Block.Kind))
}

// relayPeers are the input's relay addresses with in-process peers'
// actual addresses substituted.
func (a *NodeActivities) relayPeers(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for n, addr := range in {
		if a.RelayAddr != nil {
			if local := a.RelayAddr(n); local != "" {
				addr = local
			}
		}
		out[n] = addr
	}
	return out
}

// VerifyBlock checks one block here without writing.
func (a *NodeActivities) VerifyBlock(ctx context.Context, in contract.VerifyBlockInput) (contract.VerifyBlockResult, error) {
	stop := keepAlive(ctx)
	defer stop()
	return a.verifyBlock(ctx, in)
}

// verifyBlock is VerifyBlock's work (also StageBlock's when it verifies
// what it staged); the caller heartbeats.
func (a *NodeActivities) verifyBlock(ctx context.Context, in contract.VerifyBlockInput) (contract.VerifyBlockResult, error) {
	out := contract.VerifyBlockResult{Lane: in.Lane, Node: a.Node.Name, Block: in.Block.ID, Kind: in.Block.Kind}
	var r staging.VerifyResult
	var err error
	switch in.Block.Kind {
	case "hub-mirror":
		r, err = hubmirror.Verify(ctx, a.hubSpec(in.Block), in.Full)
	case "sparse-rows":
		r, err = sparserows.Verify(ctx, a.rowsSpec(in.Block, in.Rank, in.TP), in.Full)
	default:
		err = fault.Permanent(fault.InvalidSpec, fmt.Errorf("staging block %s: unknown kind %q", in.Block.ID, in.Block.Kind))
	}
	out.Result = blockVerify(r)
	if err != nil {
		return out, classify(fmt.Errorf("node %s, block %s: %w", a.Node.Name, in.Block.ID, err))
	}
	a.Metrics.Verified(in.Lane, a.Node.Name, in.Block.ID, r.OK+r.NBad()+r.NMissing(), 0)
	if err := a.spill(in, &r); err != nil {
		return out, classify(fmt.Errorf("node %s, block %s: %w", a.Node.Name, in.Block.ID, err))
	}
	out.Result = blockVerify(r)
	return out, nil
}

// VerifyListName is the file in a block's dst that keeps the full lists of
// bad and missing paths of its last verify that found more than
// staging.ListLimit of either: the result (and so the history) carries
// only counts and the first paths, and names this file.
func VerifyListName(lane, block string) string {
	return ".sparklane-verify." + lane + "." + block + ".txt"
}

// spill writes a long verify result's full lists into the block's dst
// (opened beneath the node's roots; made if a wipe removed it).
func (a *NodeActivities) spill(in contract.VerifyBlockInput, r *staging.VerifyResult) error {
	if len(r.Bad) <= staging.ListLimit && len(r.Missing) <= staging.ListLimit {
		return nil
	}
	dc := staging.NewDirs(a.roots())
	defer dc.Close()
	d, err := dc.Dir(a.local(in.Block.Dst), true)
	if err != nil {
		return fmt.Errorf("keep the full verify list in %s: %w", in.Block.Dst, err)
	}
	lane := in.Lane
	if lane == "" {
		lane = "lane"
	}
	return r.Spill(d, VerifyListName(lane, in.Block.ID))
}

// keepAlive heartbeats every few seconds until stopped, for activities
// whose engine reports no progress of its own.
func keepAlive(ctx context.Context) func() { return keepAliveWith(ctx, nil) }

// keepAliveWith heartbeats details every few seconds until stopped.
func keepAliveWith(ctx context.Context, details any) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				heartbeat(ctx, details)
			}
		}
	}()
	return func() { close(done) }
}

// EnsureImage checks the lane's image is present on this node.
func (a *NodeActivities) EnsureImage(ctx context.Context, in contract.EnsureImageInput) (contract.EnsureImageResult, error) {
	d, err := a.dockerClient(ctx)
	if err != nil {
		return contract.EnsureImageResult{}, classify(err)
	}
	if in.Resolve {
		// A pinned image moved here is under its tag without the digest.
		if ref := in.Image; ref.Digest != "" && ref.Name != "" {
			id, err := a.imageDocker(ctx)
			if err != nil {
				return contract.EnsureImageResult{}, classify(err)
			}
			inv, err := images.Inspect(ctx, id, ref, a.Node.Name)
			if err != nil {
				return contract.EnsureImageResult{}, classify(err)
			}
			if inv.Present && inv.Unpinned {
				return contract.EnsureImageResult{Node: a.Node.Name, ID: inv.ID, Unpinned: true}, nil
			}
			if inv.Present && !slices.Contains(inv.RepoDigests, ref.Repo+"@"+ref.Digest) {
				// Pulled from image_registry: the digest is under the
				// registry's repository, which Docker does not resolve
				// repo@digest by.
				return contract.EnsureImageResult{Node: a.Node.Name, ID: inv.ID, Digest: ref.Digest}, nil
			}
		}
	}
	info, err := serve.EnsureImage(ctx, d, in.Image.String(), a.Node.Name, in.Build)
	if err != nil {
		return contract.EnsureImageResult{}, classify(err)
	}
	return contract.EnsureImageResult{Node: a.Node.Name, ID: info.ID, Digest: info.Digest}, nil
}

// BeforeServe runs the lane's hooks here; their trimmed output is returned
// into the run's history. Clear paths are removed beneath the node's roots
// only (never a root itself, never through a symlink); a refusal is a
// permanent ClearRefused error naming the path and the component at fault.
func (a *NodeActivities) BeforeServe(ctx context.Context, in contract.BeforeServeInput) (contract.BeforeServeResult, error) {
	var clear []string
	for _, c := range in.Hooks.Clear {
		clear = append(clear, a.local(c))
	}
	root := a.Node.FSRoot
	if root == "" {
		root = "/"
	}
	// Staged data is never cleared: every block's destination and export.
	var protected []string
	for _, b := range in.Staging {
		protected = append(protected, a.local(b.Dst))
		for _, e := range b.Exports {
			protected = append(protected, a.local(b.ExportPath(e)))
		}
	}
	r, err := serve.RunHooks(ctx, serve.HooksInput{
		Clear: clear, Roots: a.roots(), Protected: protected, Helper: a.Node.ClearHelper,
		Commands: in.Hooks.BeforeServe, Timeout: in.Hooks.Timeout.D(), Dir: root,
		Env: map[string]string{
			"SPARKLANE_LANE": in.Lane, "SPARKLANE_NODE": a.Node.Name, "SPARKLANE_RANK": fmt.Sprint(in.Rank),
			"SPARKLANE_FS_ROOT": root,
		},
	})
	for _, c := range each(r.Cleared, cleared) {
		if a.Log == nil {
			break
		}
		a.Log.Info("before_serve cleared", zap.String("lane", in.Lane), zap.String("path", c.Path), zap.Int64("files", c.Files), zap.Int64("bytes", c.Bytes), zap.Bool("absent", c.Absent), zap.Bool("helper", c.Helper))
	}
	out := contract.BeforeServeResult{Node: a.Node.Name, Cleared: each(r.Cleared, cleared)}
	for _, o := range r.Outputs {
		out.Outputs = append(out.Outputs, contract.HookOutput{Command: o.Command, Exit: o.Exit, Output: o.Output})
	}
	return out, classify(err)
}

// StartRank starts this node's rank container (a no-op when the identical
// container already runs). Mount sources are mapped through fs_root and
// must lie beneath the node's roots (or shared roots, read-only), symlinks
// resolved, unless the mount says host = true: a refused mount is a
// permanent MountRefused error and no container is created. Export trees
// bring their per-file bind manifests (NAS files bound read-only).
func (a *NodeActivities) StartRank(ctx context.Context, in contract.StartRankInput) (contract.StartRankResult, error) {
	d, err := a.dockerClient(ctx)
	if err != nil {
		return contract.StartRankResult{}, classify(err)
	}
	var mounts []contract.Mount
	var create []string
	for _, m := range in.Plan.Mounts {
		mounts = append(mounts, contract.Mount{Src: a.local(m.Src), Dst: m.Dst, ReadOnly: m.ReadOnly, Host: m.Host, Create: m.Create})
		if m.Create && !m.Host {
			create = append(create, a.local(m.Src))
		}
	}
	// rows_env variables from what is staged here, cross-checked.
	env := in.Plan.Env
	if len(in.Plan.RowsFrom) > 0 {
		env = make(map[string]string, len(in.Plan.Env)+len(in.Plan.RowsFrom))
		for k, v := range in.Plan.Env {
			env[k] = v
		}
		for _, rf := range in.Plan.RowsFrom {
			v, err := serve.RowsEnv(a.Node.Name, a.local(rf.Dst), rf)
			if err != nil {
				return contract.StartRankResult{}, classify(fmt.Errorf("rank %d: %w", in.Plan.Rank, err))
			}
			env[rf.Env] = v
		}
	}
	owner := in.Plan.Container.User
	if _, _, ok := numericUser(owner); !ok {
		owner = ""
	}
	// Check the recipe's sources before reading anything beside them.
	roots := a.roots()
	mounts, err = serve.CheckMountSources(a.Node.Name, mounts, roots, a.SharedRoots)
	if err != nil {
		return contract.StartRankResult{}, classify(fmt.Errorf("rank %d: %w", in.Plan.Rank, err))
	}
	for _, m := range mounts {
		if m.Host {
			continue
		}
		// An export tree carries a per-file bind manifest beside it: the
		// skipped NAS files bound read-only over their placeholders.
		if _, err := os.Stat(hubmirror.BindManifestPath(m.Src)); err != nil {
			continue
		}
		binds, err := hubmirror.ReadBindManifest(m.Src)
		if err != nil {
			return contract.StartRankResult{}, classify(fmt.Errorf("node %s: %w", a.Node.Name, err))
		}
		for _, b := range binds {
			mounts = append(mounts, contract.Mount{Src: a.local(b.Source), Dst: filepath.Join(m.Dst, b.Target), ReadOnly: true})
		}
	}
	// The RDMA env completes the env with rows_env filled above (the
	// plan's own env alone would drop those).
	rp := in.Plan
	rp.Env = env
	env, ctr := a.withRDMA(rp)
	// Secrets are read here, on the node, now: the plan (and so the
	// workflow input and history) names only their sources.
	env, err = a.containerEnv(in, env)
	if err != nil {
		return contract.StartRankResult{}, classify(fmt.Errorf("node %s rank %d: %w", a.Node.Name, in.Plan.Rank, err))
	}
	r, err := serve.StartRank(ctx, d, serve.RankSpec{
		Lane: in.Lane, Node: a.Node.Name, Rank: in.Plan.Rank, RecipeHash: in.RecipeHash, Image: in.Plan.Image.String(), ImageID: in.ImageID,
		Argv: in.Plan.Argv, Env: env, SecretEnv: slices.Sorted(maps.Keys(in.Plan.EnvFrom)), Mounts: mounts, GPUs: in.Plan.GPUs,
		Roots: roots, SharedRoots: a.SharedRoots, CreateSources: create, CreateOwner: owner,
		Container: ctr, PreExec: in.Plan.PreExec,
	})
	if err != nil {
		return contract.StartRankResult{}, classify(fmt.Errorf("node %s rank %d: %w", a.Node.Name, in.Plan.Rank, err))
	}
	// Last served: what `starter disk` lists and LRU pruning orders by.
	// Staged data under the roots is what the mounts read; a failure to
	// record is logged, never a failed serve.
	used := make([]string, 0, len(mounts)+len(in.Plan.RowsFrom))
	for _, m := range mounts {
		used = append(used, m.Src)
	}
	for _, rf := range in.Plan.RowsFrom {
		used = append(used, a.local(rf.Dst))
	}
	if err := disk.RecordServed(roots, used, time.Now()); err != nil {
		a.Log.Warn("could not record last-served time of staged blocks", zap.Error(err))
	}
	return contract.StartRankResult{Node: a.Node.Name, Rank: in.Plan.Rank, ID: r.ID, Name: r.Name, Created: r.Created}, nil
}

// withRDMA completes a rank's plan with the RDMA devices this node has
// (/sys/class/infiniband/*, /dev/infiniband): the node's config values win
// (Node.ApplyDetected keeps them), then the communication env is rendered
// again and only variables the plan lacks are added, so the recipe's env
// and the config's hca/ifname win over detection. /dev/infiniband is added
// when the recipe names no devices of its own.
func (a *NodeActivities) withRDMA(p contract.NodePlan) (map[string]string, contract.ContainerSpec) {
	env := make(map[string]string, len(p.Env))
	for k, v := range p.Env {
		env[k] = v
	}
	ctr := p.Container
	det, err := serve.DetectRDMA(a.RDMARoot)
	if err != nil {
		if a.Log != nil {
			a.Log.Warn("RDMA detection failed: the rank gets the config's hca/ifname only", zap.String("node", a.Node.Name), zap.Error(err))
		}
		return env, ctr
	}
	n := a.Node
	n.ApplyDetected(det.HCA(), det.IfName(), det.Infiniband)
	for k, v := range lane.CommEnv(&n, p.Topology) {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	if ctr.DetectRDMA && det.Infiniband {
		host := filepath.Join(orSlash(a.RDMARoot), contract.InfinibandDevice)
		ctr.Devices = []string{host + ":" + contract.InfinibandDevice}
	}
	return env, ctr
}

func orSlash(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// containerEnv is base (the plan's env, rows_env filled) plus the plan's
// env_from variables resolved on this node (secretenv: the worker's
// environment, or a file beneath the node's fs_root). The container is
// labelled with the names (serve.LabelSecretEnv), so every reader of its
// log — this worker after a restart, the control service — masks the
// values; they are also remembered here for the lane, which masks the logs
// of a container started before that label existed.
func (a *NodeActivities) containerEnv(in contract.StartRankInput, base map[string]string) (map[string]string, error) {
	if len(in.Plan.EnvFrom) == 0 {
		return base, nil
	}
	getenv := a.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	vals, err := secretenv.Resolve(in.Plan.EnvFrom, getenv, func(p string) ([]byte, error) { return os.ReadFile(a.local(p)) })
	if err != nil {
		return nil, err
	}
	env := make(map[string]string, len(base)+len(vals))
	for k, v := range base {
		env[k] = v
	}
	secrets := make([]string, 0, len(vals))
	for k, v := range vals {
		env[k] = v
		secrets = append(secrets, v)
	}
	a.mu.Lock()
	if a.secrets == nil {
		a.secrets = map[string][]string{}
	}
	a.secrets[in.Lane] = secrets
	a.mu.Unlock()
	return env, nil
}

// mask hides the lane's resolved secrets in text this worker returns.
func (a *NodeActivities) mask(lane string, lines []string) []string {
	a.mu.Lock()
	secrets := a.secrets[lane]
	a.mu.Unlock()
	if len(secrets) == 0 {
		return lines
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = secretenv.Mask(l, secrets)
	}
	return out
}

// StopLane stops and removes the lane's containers here and looks again.
func (a *NodeActivities) StopLane(ctx context.Context, in contract.StopLaneInput) (contract.StopLaneResult, error) {
	d, err := a.dockerClient(ctx)
	if err != nil {
		return contract.StopLaneResult{}, classify(err)
	}
	timeout := in.Timeout.D()
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if !in.All && in.Lane == "" {
		return contract.StopLaneResult{}, classify(fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: stop needs a lane (or all)", a.Node.Name)))
	}
	// Only this node's containers: simulated nodes may share one engine,
	// and each node's worker stops its own share.
	f := serve.StopFilter{Nodes: []string{a.Node.Name}, Timeout: timeout}
	if !in.All {
		f.Lane = in.Lane
	}
	r, err := serve.StopAll(ctx, d, f)
	if err != nil {
		return contract.StopLaneResult{}, classify(fmt.Errorf("node %s: %w", a.Node.Name, err))
	}
	return contract.StopLaneResult{Node: a.Node.Name, Stopped: r.Stopped}, nil
}

// InspectLane reports each rank container's state and last log lines.
func (a *NodeActivities) InspectLane(ctx context.Context, in contract.InspectLaneInput) (contract.InspectLaneResult, error) {
	d, err := a.dockerClient(ctx)
	if err != nil {
		return contract.InspectLaneResult{}, classify(err)
	}
	lines := in.Lines
	if lines <= 0 {
		lines = 50
	}
	states, err := serve.InspectLane(ctx, d, in.Lane, lines)
	if err != nil {
		return contract.InspectLaneResult{}, classify(fmt.Errorf("node %s: %w", a.Node.Name, err))
	}
	out := contract.InspectLaneResult{Node: a.Node.Name}
	for _, s := range states {
		if s.Node != a.Node.Name {
			continue // another simulated node on the same engine
		}
		out.Ranks = append(out.Ranks, contract.RankState{Node: a.Node.Name, Rank: s.Rank, Name: s.Name, State: s.State, ExitCode: s.ExitCode, Logs: a.mask(in.Lane, s.Logs)})
	}
	return out, nil
}

// numericUser parses a container user "UID[:GID]" given as numbers (a
// name would need the image's /etc/passwd to resolve).
func numericUser(u string) (uid, gid int, ok bool) {
	us, gs, hasG := strings.Cut(u, ":")
	uid, err := strconv.Atoi(us)
	if err != nil || uid < 0 {
		return 0, 0, false
	}
	gid = uid
	if hasG {
		if gid, err = strconv.Atoi(gs); err != nil || gid < 0 {
			return 0, 0, false
		}
	}
	return uid, gid, true
}

// PostExec runs the lane's post_exec in its head container here, once the
// lane answers: each command as /bin/sh -c, in order, the first failure
// stopping. Outputs are masked with the lane's secrets as its rank logs
// are (InspectLane), and with the secrets its container's label names.
func (a *NodeActivities) PostExec(ctx context.Context, in contract.PostExecInput) (contract.PostHooksResult, error) {
	d, err := a.dockerClient(ctx)
	if err != nil {
		return contract.PostHooksResult{}, classify(err)
	}
	ed, ok := d.(serve.ExecDocker)
	if !ok {
		return contract.PostHooksResult{}, classify(fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: its Docker client cannot exec in containers (post_exec)", a.Node.Name)))
	}
	a.mu.Lock()
	secrets := a.secrets[in.Lane]
	a.mu.Unlock()
	outs, err := serve.ExecHooks(ctx, ed, serve.ExecInput{Node: a.Node.Name, Container: in.Container, Commands: in.Commands, Timeout: in.Timeout.D(), Secrets: secrets})
	res := contract.PostHooksResult{Node: a.Node.Name}
	for _, o := range outs {
		res.Outputs = append(res.Outputs, contract.HookOutput{Command: o.Command, Exit: o.Exit, Output: o.Output})
	}
	return res, classify(err)
}
