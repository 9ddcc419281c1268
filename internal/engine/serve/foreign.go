package serve

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/ranklogs"
)

// Foreign is a running container sparklane did not start that holds what a
// lane needs: a GPU, or a lane's API port. A cutover onto its node would
// start a second engine on a busy GPU, so the fleet probe reports the node
// occupied by it, by name.
type Foreign struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	Image string `json:"image"`
	// Why says what it holds: "GPUs", "port 8000".
	Why string `json:"why"`
}

// String is "NAME (WHY)".
func (f Foreign) String() string { return f.Name + " (" + f.Why + ")" }

// FindForeign lists the running containers without sparklane's lane label
// that request GPUs (a device request for GPUs, the nvidia runtime, or
// NVIDIA_VISIBLE_DEVICES naming devices) or hold one of ports: published on
// it, or on the host network while something on this host listens on it
// (listening reports that, from /proc/net/tcp and tcp6 when nil).
func FindForeign(ctx context.Context, d Docker, ports []int, listening func(port int) bool) ([]Foreign, error) {
	if listening == nil {
		listening = Listening
	}
	cs, err := d.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("status", "running"))})
	if err != nil {
		return nil, fmt.Errorf("list running containers: %w", err)
	}
	var out []Foreign
	for _, c := range cs {
		if _, ours := c.Labels[contract.LabelLane]; ours {
			continue
		}
		ins, err := d.ContainerInspect(ctx, c.ID)
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("inspect container %s: %w", ranklogs.ContainerName(c), err)
		}
		var why []string
		if usesGPUs(ins) {
			why = append(why, "GPUs")
		}
		host := ins.HostConfig != nil && ins.HostConfig.NetworkMode.IsHost()
		for _, p := range ports {
			if publishes(ins, p) || (host && listening(p)) {
				why = append(why, "port "+strconv.Itoa(p))
			}
		}
		if len(why) == 0 {
			continue
		}
		f := Foreign{Name: strings.TrimPrefix(ins.Name, "/"), ID: ins.ID, Why: strings.Join(why, ", ")}
		if ins.Config != nil {
			f.Image = ins.Config.Image
			if l := ins.Config.Labels[contract.LabelImage]; l != "" {
				f.Image = l
			}
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func usesGPUs(ins container.InspectResponse) bool {
	if hc := ins.HostConfig; hc != nil {
		if hc.Runtime == "nvidia" {
			return true
		}
		for _, r := range hc.DeviceRequests {
			if r.Driver == "nvidia" {
				return true
			}
			for _, caps := range r.Capabilities {
				for _, c := range caps {
					if c == "gpu" {
						return true
					}
				}
			}
		}
	}
	if ins.Config != nil {
		for _, e := range ins.Config.Env {
			if v, ok := strings.CutPrefix(e, "NVIDIA_VISIBLE_DEVICES="); ok && v != "" && v != "void" && v != "none" {
				return true
			}
		}
	}
	return false
}

func publishes(ins container.InspectResponse, port int) bool {
	want := strconv.Itoa(port)
	if hc := ins.HostConfig; hc != nil {
		for _, bs := range hc.PortBindings {
			for _, b := range bs {
				if b.HostPort == want {
					return true
				}
			}
		}
	}
	if ns := ins.NetworkSettings; ns != nil {
		for _, bs := range ns.Ports {
			for _, b := range bs {
				if b.HostPort == want {
					return true
				}
			}
		}
	}
	return false
}

// Listening reports whether a TCP socket of this network namespace listens
// on port (state 0A in /proc/net/tcp or tcp6).
func Listening(port int) bool {
	hex := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 3 && strings.HasSuffix(fs[1], hex) && fs[3] == "0A" {
				fh.Close()
				return true
			}
		}
		fh.Close()
	}
	return false
}

// StopForeign stops the named foreign containers (never removes them: the
// operator may want them back) and reports which it stopped. A container
// with sparklane's lane label is refused: lanes are stopped as lanes.
func StopForeign(ctx context.Context, d Docker, names []string) ([]string, error) {
	var stopped []string
	for _, n := range names {
		ins, err := d.ContainerInspect(ctx, n)
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return stopped, fmt.Errorf("inspect foreign container %s: %w", n, err)
		}
		if ins.Config != nil {
			if _, ours := ins.Config.Labels[contract.LabelLane]; ours {
				return stopped, fmt.Errorf("container %s belongs to lane %s: stop the lane, not a foreign container", n, ins.Config.Labels[contract.LabelLane])
			}
		}
		secs := 30
		if err := d.ContainerStop(ctx, ins.ID, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
			return stopped, fmt.Errorf("stop foreign container %s: %w", n, err)
		}
		stopped = append(stopped, n)
	}
	return stopped, nil
}
