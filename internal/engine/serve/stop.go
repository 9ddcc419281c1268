package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/secretenv"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/ranklogs"
)

// StopResult lists the containers a stop removed.
type StopResult struct {
	Stopped []string `json:"stopped"`
}

// StopLane stops (SIGTERM, SIGKILL after timeout) and removes every
// container labelled with lane on this Docker, then lists again: anything
// still there is a permanent StopIncomplete error naming it — a stop that
// says "stopped" while a container keeps the GPU is worse than a failure.
// Containers that vanish meanwhile (another node's worker on a shared
// engine) count as stopped.
func StopLane(ctx context.Context, d Docker, lane string, timeout time.Duration) (StopResult, error) {
	if lane == "" {
		return StopResult{}, fault.Permanent(fault.InvalidSpec, errors.New("stop: no lane given"))
	}
	return stopMatching(ctx, d, ranklogs.LaneFilter(lane), nil, timeout, "lane "+lane)
}

// StopFilter selects containers for StopAll.
type StopFilter struct {
	// Lane limits the stop to one lane's containers; empty means every lane.
	Lane string `json:"lane,omitempty"`
	// Nodes limits the stop to containers labelled with one of these nodes
	// (several simulated nodes may share one engine); empty means all.
	Nodes []string `json:"nodes,omitempty"`
	// Timeout is the grace period before SIGKILL (default 10 s).
	Timeout time.Duration `json:"timeout,omitempty"`
}

// StopAll stops and removes every sparklane container (any lane, or one
// lane) on this Docker, optionally only those of some nodes: `starter stop
// --cluster`, and a node worker stopping its own share of a lane when
// several simulated nodes share one engine.
// Like StopLane it looks again afterwards.
func StopAll(ctx context.Context, d Docker, f StopFilter) (StopResult, error) {
	opts := container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", contract.LabelLane))}
	what := "all lanes"
	if f.Lane != "" {
		opts, what = ranklogs.LaneFilter(f.Lane), "lane "+f.Lane
	}
	var keep func(container.Summary) bool
	if len(f.Nodes) > 0 {
		keep = func(c container.Summary) bool { return slices.Contains(f.Nodes, c.Labels[contract.LabelNode]) }
	}
	if len(f.Nodes) > 0 {
		what += " on nodes " + strings.Join(f.Nodes, ",")
	}
	return stopMatching(ctx, d, opts, keep, f.Timeout, what)
}

func stopMatching(ctx context.Context, d Docker, opts container.ListOptions, keep func(container.Summary) bool, timeout time.Duration, what string) (StopResult, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	list := func() ([]container.Summary, error) {
		cs, err := d.ContainerList(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("stop %s: list containers: %w", what, err)
		}
		if keep != nil {
			cs = slices.DeleteFunc(cs, func(c container.Summary) bool { return !keep(c) })
		}
		return cs, nil
	}
	cs, err := list()
	if err != nil {
		return StopResult{}, err
	}
	secs := int(math.Ceil(timeout.Seconds()))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := ranklogs.ContainerName(c)
			if err := d.ContainerStop(ctx, c.ID, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
				errs[i] = fmt.Errorf("stop container %s (node %s): %w", name, c.Labels[contract.LabelNode], err)
			}
			if err := d.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
				errs[i] = errors.Join(errs[i], fmt.Errorf("remove container %s (node %s): %w", name, c.Labels[contract.LabelNode], err))
			}
		}()
	}
	wg.Wait()
	var res StopResult
	for _, c := range cs {
		res.Stopped = append(res.Stopped, ranklogs.ContainerName(c))
	}
	sort.Strings(res.Stopped)

	// Look again: the only proof that the stop worked.
	left, lerr := list()
	if lerr != nil {
		return res, errors.Join(append(errs, lerr)...)
	}
	if len(left) > 0 {
		var names []string
		for _, c := range left {
			names = append(names, fmt.Sprintf("%s (node %s, %s)", ranklogs.ContainerName(c), c.Labels[contract.LabelNode], c.State))
		}
		sort.Strings(names)
		msg := fmt.Sprintf("stop %s: still present after stop and remove: %s: check `docker ps -a` on the node and remove them by hand (docker rm -f) before starting anything on that GPU",
			what, strings.Join(names, ", "))
		if joined := errors.Join(errs...); joined != nil {
			msg += "; " + joined.Error()
		}
		err := fault.Permanent(fault.StopIncomplete, errors.New(msg))
		return res, err
	}
	// Everything is gone: errors on the way (e.g. a container that stopped
	// itself between list and stop) did not matter.
	return res, nil
}

// RankState is one rank container's state as Docker reports it, with its
// last log lines, so a failed lane explains itself.
type RankState struct {
	Name       string `json:"name"`
	ID         string `json:"id"`
	Lane       string `json:"lane"`
	Node       string `json:"node"`
	Rank       int    `json:"rank"`
	RecipeHash string `json:"recipe_hash,omitempty"`
	// State is Docker's: created, running, exited, dead, paused, restarting.
	State    string `json:"state"`
	Running  bool   `json:"running"`
	ExitCode int    `json:"exit_code"`
	// OOMKilled and Error explain exits that logs may not.
	OOMKilled  bool      `json:"oom_killed,omitempty"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Logs are the last lines of stdout and stderr, interleaved.
	Logs []string `json:"logs,omitempty"`
}

// InspectLane reports every container of lane on this Docker, ordered by
// rank: state, exit code and the last tailLines log lines.
func InspectLane(ctx context.Context, d Docker, lane string, tailLines int) ([]RankState, error) {
	cs, err := d.ContainerList(ctx, ranklogs.LaneFilter(lane))
	if err != nil {
		return nil, fmt.Errorf("inspect lane %s: list containers: %w", lane, err)
	}
	var out []RankState
	for _, c := range cs {
		rs, err := inspectOne(ctx, d, c.ID, tailLines)
		if cerrdefs.IsNotFound(err) {
			continue // removed between list and inspect
		}
		if err != nil {
			return out, fmt.Errorf("inspect lane %s: container %s: %w", lane, ranklogs.ContainerName(c), err)
		}
		out = append(out, rs)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rank != out[j].Rank {
			return out[i].Rank < out[j].Rank
		}
		return out[i].Node < out[j].Node
	})
	return out, nil
}

func inspectOne(ctx context.Context, d Docker, id string, tailLines int) (RankState, error) {
	ins, err := d.ContainerInspect(ctx, id)
	if err != nil {
		return RankState{}, err
	}
	rs := RankState{Name: strings.TrimPrefix(ins.Name, "/"), ID: ins.ID}
	tty := false
	if ins.Config != nil {
		l := ins.Config.Labels
		rs.Lane, rs.Node, rs.RecipeHash = l[contract.LabelLane], l[contract.LabelNode], l[contract.LabelRecipeHash]
		rs.Rank, _ = strconv.Atoi(l[contract.LabelRank])
		tty = ins.Config.Tty
	}
	if st := ins.State; st != nil {
		rs.State, rs.Running, rs.ExitCode = st.Status, st.Running, st.ExitCode
		rs.OOMKilled, rs.Error = st.OOMKilled, st.Error
		rs.StartedAt, _ = time.Parse(time.RFC3339Nano, st.StartedAt)
		rs.FinishedAt, _ = time.Parse(time.RFC3339Nano, st.FinishedAt)
		if rs.StartedAt.Year() < 2000 {
			rs.StartedAt = time.Time{}
		}
		if rs.FinishedAt.Year() < 2000 {
			rs.FinishedAt = time.Time{}
		}
	}
	if tailLines > 0 {
		rs.Logs, err = tailLogs(ctx, d, id, tailLines, tty)
		if err != nil && !cerrdefs.IsNotFound(err) {
			return rs, fmt.Errorf("logs: %w", err)
		}
		if secrets := ranklogs.SecretValues(ins.Config); len(secrets) > 0 {
			for i, l := range rs.Logs {
				rs.Logs[i] = secretenv.Mask(l, secrets)
			}
		}
	}
	return rs, nil
}

func tailLogs(ctx context.Context, d Docker, id string, n int, tty bool) ([]string, error) {
	rc, err := d.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(n)})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if tty {
		_, err = io.Copy(&buf, rc)
	} else {
		_, err = stdcopy.StdCopy(&buf, &buf, rc)
	}
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil, nil
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}

// LaneContainers maps each lane to its running containers on this Docker,
// for the fleet probe's "occupied (lane X)". Exited containers hold no GPU
// and are not listed.
func LaneContainers(ctx context.Context, d Docker) (map[string][]string, error) {
	cs, err := d.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", contract.LabelLane))})
	if err != nil {
		return nil, fmt.Errorf("list sparklane containers: %w", err)
	}
	out := map[string][]string{}
	for _, c := range cs {
		lane := c.Labels[contract.LabelLane]
		out[lane] = append(out[lane], ranklogs.ContainerName(c))
	}
	for _, names := range out {
		sort.Strings(names)
	}
	return out, nil
}
