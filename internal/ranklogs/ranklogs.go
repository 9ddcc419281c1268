package ranklogs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/secretenv"
)

// Docker is the part of the Docker API reading logs needs; *client.Client
// implements it.
type Docker interface {
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, container string) (container.InspectResponse, error)
	ContainerLogs(ctx context.Context, container string, options container.LogsOptions) (io.ReadCloser, error)
}

// LogSource is one rank container whose log is read.
type LogSource struct {
	Node string
	Rank int
	Name string
	ID   string
}

// LaneLogSources lists the lane's rank containers on this Docker made for
// node (simulated nodes share an engine; each has its own label), rank -1
// for every rank, in rank order.
func LaneLogSources(ctx context.Context, d Docker, lane, node string, rank int) ([]LogSource, error) {
	opts := LaneFilter(lane)
	opts.Filters.Add("label", contract.LabelNode+"="+node)
	cs, err := d.ContainerList(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list containers of lane %s: %w", lane, err)
	}
	var out []LogSource
	for _, c := range cs {
		r, err := strconv.Atoi(c.Labels[contract.LabelRank])
		if err != nil || (rank >= 0 && r != rank) {
			continue
		}
		out = append(out, LogSource{Node: node, Rank: r, Name: ContainerName(c), ID: c.ID})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out, nil
}

// prefixWriter writes each complete line as PREFIX+line under a shared
// lock, so ranks streamed together never interleave within a line.
type prefixWriter struct {
	mu      *sync.Mutex
	w       io.Writer
	prefix  string
	secrets []string // masked in every line (secretenv.Mask)
	buf     []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		p.mu.Lock()
		_, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.line(p.buf[:i]))
		p.mu.Unlock()
		p.buf = p.buf[i+1:]
		if err != nil {
			return len(b), err
		}
	}
}

func (p *prefixWriter) line(b []byte) string {
	if len(p.secrets) == 0 {
		return string(b)
	}
	return secretenv.Mask(string(b), p.secrets)
}

func (p *prefixWriter) flush() {
	if len(p.buf) > 0 {
		p.mu.Lock()
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.line(p.buf))
		p.mu.Unlock()
		p.buf = nil
	}
}

// CopyLogs writes one rank container's log (stdout and stderr) to w, each
// line prefixed "[NODE rRANK] ", the last tail lines ("all" or "" for
// every line), following it until ctx ends or the container stops when
// follow is set. mu serializes lines across ranks sharing w.
func CopyLogs(ctx context.Context, d Docker, src LogSource, tail string, follow bool, mu *sync.Mutex, w io.Writer) error {
	if tail == "" {
		tail = "all"
	}
	ins, err := d.ContainerInspect(ctx, src.ID)
	if err != nil {
		return fmt.Errorf("node %s: inspect %s: %w", src.Node, src.Name, err)
	}
	rc, err := d.ContainerLogs(ctx, src.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow, Tail: tail})
	if err != nil {
		return fmt.Errorf("node %s: logs of %s: %w", src.Node, src.Name, err)
	}
	defer rc.Close()
	pw := &prefixWriter{mu: mu, w: w, prefix: fmt.Sprintf("[%s r%d] ", src.Node, src.Rank), secrets: SecretValues(ins.Config)}
	defer pw.flush()
	if ins.Config != nil && ins.Config.Tty {
		_, err = io.Copy(pw, rc)
	} else {
		_, err = stdcopy.StdCopy(pw, pw, rc)
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("node %s: read logs of %s: %w", src.Node, src.Name, err)
	}
	return nil
}

// SecretValues are the values of the variables a container's
// LabelSecretEnv names, read from its own env (nil when it has none).
func SecretValues(cfg *container.Config) []string {
	if cfg == nil || cfg.Labels[contract.LabelSecretEnv] == "" {
		return nil
	}
	names := strings.Split(cfg.Labels[contract.LabelSecretEnv], ",")
	return secretenv.EnvValues(cfg.Env, func(k string) bool { return slices.Contains(names, k) })
}

// LaneFilter lists every container of lane, running or not, by its
// label: the one query the serve engine and `starter logs` find a lane's
// ranks with.
func LaneFilter(lane string) container.ListOptions {
	return container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", contract.LabelLane+"="+lane))}
}

// ContainerName is c's name as `docker ps` prints it (without the
// leading slash), or its ID when it has none, for messages and results.
func ContainerName(c container.Summary) string {
	if len(c.Names) > 0 {
		return strings.TrimPrefix(c.Names[0], "/")
	}
	return c.ID
}
