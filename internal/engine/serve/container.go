package serve

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/strslice"
	"github.com/docker/go-units"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/tardir"
)

// containerConfig is the Docker create request of one rank: the rendered
// ContainerSpec (network, IPC, shm, ulimits, devices, user, security
// options, GPUs only when the plan asks), sparklane's labels over the
// recipe's, no restart (a rank that dies must stay dead so its exit code
// and logs can be read), and pre_exec commands in front of the command.
func containerConfig(ctx context.Context, d Docker, spec RankSpec) (*container.Config, *container.HostConfig, error) {
	name := ContainerName(spec.Lane, spec.Rank)
	c := spec.Container
	labels := map[string]string{}
	for _, l := range c.Labels {
		k, v, _ := strings.Cut(l, "=")
		if k = strings.TrimSpace(k); k != "" {
			labels[k] = v
		}
	}
	for k, v := range spec.ExtraLabels {
		labels[k] = v
	}
	labels[contract.LabelLane] = spec.Lane
	labels[contract.LabelNode] = spec.Node
	labels[contract.LabelRank] = strconv.Itoa(spec.Rank)
	labels[contract.LabelRecipeHash] = spec.RecipeHash
	if len(spec.SecretEnv) > 0 {
		names := slices.Clone(spec.SecretEnv)
		sort.Strings(names)
		labels[contract.LabelSecretEnv] = strings.Join(slices.Compact(names), ",")
	}
	env := make([]string, 0, len(spec.Env))
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	img := spec.Image
	if spec.ImageID != "" {
		img = spec.ImageID
		labels[contract.LabelImage] = spec.Image
	}
	cfg := &container.Config{Image: img, Cmd: spec.Argv, Env: env, Labels: labels, User: c.User}
	if c.Entrypoint != nil {
		ep, err := contract.SplitArgs(*c.Entrypoint)
		if err != nil {
			return nil, nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("container %s on node %s: executor_config.entrypoint %q: %v", name, spec.Node, *c.Entrypoint, err))
		}
		cfg.Entrypoint = strslice.StrSlice(ep)
		if len(ep) == 0 {
			cfg.Entrypoint = strslice.StrSlice{""} // clears the image's
		}
	}
	var runs []string
	for _, p := range spec.PreExec {
		if p.Run != "" {
			runs = append(runs, p.Run)
		}
	}
	if len(runs) > 0 {
		// The serve command keeps the image's entrypoint (or the recipe's):
		// the shell execs ENTRYPOINT + CMD after the pre_exec commands.
		ep := []string(cfg.Entrypoint)
		if c.Entrypoint == nil {
			ins, err := d.ImageInspect(ctx, img)
			if err != nil {
				return nil, nil, fmt.Errorf("container %s on node %s: inspect image %s for its entrypoint (pre_exec runs before it): %w", name, spec.Node, spec.Image, err)
			}
			if ins.Config != nil {
				ep = ins.Config.Entrypoint
			}
		}
		if len(ep) == 1 && ep[0] == "" {
			ep = nil
		}
		script := "set -e\n" + strings.Join(runs, "\n") + "\nexec \"$@\""
		cfg.Entrypoint = strslice.StrSlice{"/bin/sh", "-c", script, "sparklane-pre-exec"}
		cfg.Cmd = append(append(strslice.StrSlice{}, ep...), spec.Argv...)
	}
	network, ipc := c.Network, c.IPC
	if network == "" {
		network = contract.DefaultNetwork
	}
	if ipc == "" {
		ipc = contract.DefaultIPC
	}
	hc := &container.HostConfig{
		NetworkMode:   container.NetworkMode(network),
		IpcMode:       container.IpcMode(ipc),
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		ShmSize:       c.ShmBytes,
		Privileged:    c.Privileged,
		SecurityOpt:   c.SecurityOpt,
		CapAdd:        strslice.StrSlice(c.CapAdd),
	}
	hc.Memory = c.MemoryBytes
	for _, u := range c.Ulimits {
		hc.Ulimits = append(hc.Ulimits, &units.Ulimit{Name: u.Name, Soft: u.Soft, Hard: u.Hard})
	}
	for _, dev := range c.Devices {
		host, inside, perm := parseDevice(dev)
		if _, err := os.Stat(host); err != nil {
			return nil, nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("container %s on node %s: device %s: %v: the recipe's executor_config.devices (or the node's infiniband/hca) names a device this node lacks", name, spec.Node, host, err))
		}
		hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: host, PathInContainer: inside, CgroupPermissions: perm})
	}
	for _, m := range spec.Mounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Src, Target: m.Dst, ReadOnly: m.ReadOnly})
	}
	// GPUs only when the plan asks (a real runtime) and the recipe does
	// not say gpus = "none"; an old plan without a container spec asked
	// by GPUs alone.
	if spec.GPUs && (c.GPUs != "" || c.Network == "") {
		hc.DeviceRequests = []container.DeviceRequest{gpuRequest(c.GPUs)}
	}
	return cfg, hc, nil
}

// gpuRequest is docker's --gpus VALUE: "all" (or empty), a count, or
// "device=0,1".
func gpuRequest(v string) container.DeviceRequest {
	r := container.DeviceRequest{Driver: "nvidia", Count: -1, Capabilities: [][]string{{"gpu"}}}
	switch {
	case v == "" || v == "all":
	case strings.HasPrefix(v, "device="):
		r.Count = 0
		r.DeviceIDs = strings.Split(strings.TrimPrefix(v, "device="), ",")
	default:
		if n, err := strconv.Atoi(v); err == nil {
			r.Count = n
		}
	}
	return r
}

// parseDevice reads docker's --device HOST[:CONTAINER[:PERMS]].
func parseDevice(s string) (host, inside, perm string) {
	parts := strings.SplitN(s, ":", 3)
	host, inside, perm = parts[0], parts[0], "rwm"
	if len(parts) > 1 && parts[1] != "" {
		inside = parts[1]
	}
	if len(parts) > 2 && parts[2] != "" {
		perm = parts[2]
	}
	return host, inside, perm
}

// copyPreExec copies each pre_exec {copy, dest} directory (a mod) into the
// created container before it starts, as sparkrun copies a mod before
// running its run.sh. The source is read on this node: a registry clone
// must be at the same path on every node (a shared root does it).
func copyPreExec(ctx context.Context, d Docker, id string, spec RankSpec) error {
	name := ContainerName(spec.Lane, spec.Rank)
	for i, p := range spec.PreExec {
		if p.Copy == "" {
			continue
		}
		if p.Dest == "" || !path.IsAbs(p.Dest) {
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("container %s on node %s: pre_exec[%d]: dest %q must be an absolute container path", name, spec.Node, i, p.Dest))
		}
		if len(p.Archive) > 0 {
			// Read on the control host when the plan was rendered.
			if err := d.CopyToContainer(ctx, id, "/", bytes.NewReader(p.Archive), container.CopyToContainerOptions{}); err != nil {
				return fmt.Errorf("container %s on node %s: pre_exec[%d]: copy %s (carried in the plan) to %s: %w", name, spec.Node, i, p.Copy, p.Dest, err)
			}
			continue
		}
		st, err := os.Stat(p.Copy)
		if err != nil || !st.IsDir() {
			return fault.Permanent(fault.SourceMissing, fmt.Errorf("container %s on node %s: pre_exec[%d]: copy source %s is not a directory on this node (%v): put the recipe's registry clone (its mods) at the same path on every node, e.g. on a shared root", name, spec.Node, i, p.Copy, err))
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tardir.Write(pw, p.Copy, p.Dest)) }()
		err = d.CopyToContainer(ctx, id, "/", pr, container.CopyToContainerOptions{})
		pr.CloseWithError(err)
		if err != nil {
			return fmt.Errorf("container %s on node %s: pre_exec[%d]: copy %s to %s: %w", name, spec.Node, i, p.Copy, p.Dest, err)
		}
	}
	return nil
}
