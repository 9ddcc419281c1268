package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/ranklogs"
)

// logsCmd prints a lane's rank logs from every node. Each node's Docker
// is reached as the control service reaches it: the local socket for a
// local node, the node's socket through SSH (host key checked against
// known_hosts) for a remote one — no node opens a port for it.
func (a *App) logsCmd() *cobra.Command {
	var lane, only, tail, cluster string
	var rank int
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs --lane L [--rank R] [--node N] [-f] [--tail N]",
		Short: "print a lane's rank container logs from every node, each line prefixed [NODE rRANK]",
		// No lane, no config loaded: the error laneOn gives.
		PreRunE: laneRequired(&lane),
		RunE: a.withFleet(func(ctx context.Context, req *request) error {
			nodes, err := a.logNodes(req.cfg, &lane, cluster, only)
			if err != nil {
				return err
			}
			return a.laneLogs(ctx, lane, nodes, rank, tail, follow)
		}),
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the cluster the lane runs on when not its recipe's (as given to up/cutover --cluster)")
	cmd.Flags().StringVar(&lane, "lane", "", "lane name or alias")
	cmd.Flags().IntVar(&rank, "rank", -1, "only this rank")
	cmd.Flags().StringVar(&only, "node", "", "only this node")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until Ctrl-C (or every rank stopped)")
	cmd.Flags().StringVar(&tail, "tail", "all", "the last N lines of each rank (all: every line)")
	return cmd
}

// logNodes are the nodes whose Docker logs reads: the lane's, as its
// recipe renders on its cluster (or --cluster), so neither a warning nor
// the "no container" error names a node the lane never runs on; --node
// must be one of them. An alias becomes the lane's name. A lane whose
// recipe is gone or broken is still found by its containers' label on
// every node of the config (or --node).
func (a *App) logNodes(cfg *config.Config, lane *string, cluster, only string) ([]config.Node, error) {
	var plan *contract.LanePlan
	if _, set, err := a.recipeSet(); err == nil {
		if r, err := config.Resolve(set.Recipes, *lane); err == nil {
			*lane = r.Name
			if _, _, p, err := a.laneOn(r.Name, cluster, nil); err == nil {
				plan = p
			}
		}
	}
	if plan != nil {
		if err := laneNode(plan, only); err != nil {
			return nil, err
		}
	} else if _, err := knownNodes(cfg, nonEmpty(only)); err != nil {
		return nil, err
	}
	var out []config.Node
	for _, n := range cfg.Nodes {
		switch {
		case only != "" && n.Name != only:
		case plan != nil && !slices.Contains(nodesOf(plan), n.Name):
		default:
			out = append(out, n)
		}
	}
	return out, nil
}

// nonEmpty is s as a list: none when empty.
func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// laneLogs prints lane's rank logs from nodes.
func (a *App) laneLogs(ctx context.Context, lane string, nodes []config.Node, rank int, tail string, follow bool) error {
	type found struct {
		d   ranklogs.Docker
		src ranklogs.LogSource
	}
	var srcs []found
	var looked, failed []string
	for _, n := range nodes {
		looked = append(looked, n.Name)
		var t *node.SSHTarget
		if n.SSH != "" {
			tt, err := node.ParseSSH(n.SSH)
			if err != nil {
				failed = append(failed, fmt.Sprintf("node %s: ssh %q: %v", n.Name, n.SSH, err))
				continue
			}
			tt.KnownHosts, tt.Identity = n.KnownHosts, n.Identity
			t = &tt
		}
		c, err := node.DockerClient(ctx, n.Docker, t)
		if err != nil {
			failed = append(failed, fmt.Sprintf("node %s: docker: %v", n.Name, err))
			continue
		}
		defer c.Close()
		ss, err := ranklogs.LaneLogSources(ctx, c, lane, n.Name, rank)
		if err != nil {
			failed = append(failed, fmt.Sprintf("node %s: %v", n.Name, err))
			continue
		}
		for _, s := range ss {
			srcs = append(srcs, found{c, s})
		}
	}
	for _, f := range failed {
		fmt.Fprintln(a.Err, "warning:", f)
	}
	if len(srcs) == 0 {
		what := "no container of lane " + lane
		if rank >= 0 {
			what += fmt.Sprintf(" rank %d", rank)
		}
		return fmt.Errorf("%s on nodes %s (unreachable: %d): is it up? see `starter status --lane %s`", what, strings.Join(looked, ", "), len(failed), lane)
	}
	if a.JSON && !follow {
		type rankLog struct {
			Node      string   `json:"node"`
			Rank      int      `json:"rank"`
			Container string   `json:"container"`
			Lines     []string `json:"lines"`
		}
		out := []rankLog{}
		var errs []error
		for _, f := range srcs {
			var buf bytes.Buffer
			var mu sync.Mutex
			err := ranklogs.CopyLogs(ctx, f.d, f.src, tail, false, &mu, &buf)
			errs = append(errs, err)
			lines := []string{}
			if s := strings.TrimRight(buf.String(), "\n"); s != "" {
				lines = strings.Split(s, "\n")
			}
			prefix := fmt.Sprintf("[%s r%d] ", f.src.Node, f.src.Rank)
			for i := range lines {
				lines[i] = strings.TrimPrefix(lines[i], prefix)
			}
			out = append(out, rankLog{Node: f.src.Node, Rank: f.src.Rank, Container: f.src.Name, Lines: lines})
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return a.printJSON(out)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(srcs))
	for i, f := range srcs {
		if !follow {
			// One rank after the other: a whole log per rank reads best.
			errs[i] = ranklogs.CopyLogs(ctx, f.d, f.src, tail, false, &mu, a.Out)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ranklogs.CopyLogs(ctx, f.d, f.src, tail, true, &mu, a.Out)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
