package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
	"github.com/sparklane/sparklane/internal/engine/notify"
	"github.com/sparklane/sparklane/internal/engine/probe"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/lane"
)

// CheckHead asks the lane's head its health path once. A head that does
// not answer 200 fails LaneDown (retryable: the keeper's retry policy
// re-probes it after the lane's probe grace).
func (a *ControlActivities) CheckHead(ctx context.Context, in contract.CheckHeadInput) (contract.CheckHeadResult, error) {
	url := lane.BaseURL(a.Config, in.Head) + in.Path
	res := contract.CheckHeadResult{URL: url}
	ctx, err := apiKeyContext(ctx, in.APIKeyEnv)
	if err != nil {
		return res, classify(err)
	}
	start := time.Now()
	res.Status, err = probe.Health(ctx, url, 10*time.Second)
	res.Seconds = time.Since(start).Seconds()
	if err != nil {
		return res, temporal.NewApplicationError(fmt.Sprintf("lane %s: head %s: %v", in.Lane, in.Head.Nodes[0].Node, err), contract.LaneDown)
	}
	return res, nil
}

// RankDownReprobe is how soon a RankDown check is asked again.
const RankDownReprobe = 200 * time.Millisecond

// CheckRanks reports the state of the lane's ranks on this node; a rank
// whose container is not running (exited, or gone) fails RankDown naming
// it, its exit code and its last log line.
func (a *NodeActivities) CheckRanks(ctx context.Context, in contract.CheckRanksInput) (contract.CheckRanksResult, error) {
	res := contract.CheckRanksResult{Node: a.Node.Name, BootID: a.bootID()}
	d, err := a.dockerClient(ctx)
	if err != nil {
		return res, classify(err)
	}
	states, err := serve.InspectLane(ctx, d, in.Lane, 5)
	if err != nil {
		return res, classify(fmt.Errorf("node %s: %w", a.Node.Name, err))
	}
	var down []string
	for _, rank := range in.Ranks {
		found := false
		for _, s := range states {
			if s.Node != a.Node.Name || s.Rank != rank {
				continue
			}
			found = true
			// Logs stay out of a healthy answer: every check is in the history.
			res.Ranks = append(res.Ranks, contract.RankState{Node: a.Node.Name, Rank: s.Rank, Name: s.Name, State: s.State, ExitCode: s.ExitCode})
			if s.State != "running" {
				last := ""
				if len(s.Logs) > 0 {
					last = ", last log line: " + a.mask(in.Lane, s.Logs[len(s.Logs)-1:])[0]
				}
				down = append(down, fmt.Sprintf("rank %d (%s) is %s, exit code %d%s", rank, s.Name, s.State, s.ExitCode, last))
			}
		}
		if !found {
			res.Ranks = append(res.Ranks, contract.RankState{Node: a.Node.Name, Rank: rank, State: "missing", ExitCode: -1})
			down = append(down, fmt.Sprintf("rank %d has no container", rank))
		}
	}
	if len(down) > 0 {
		// The result rides along: the keeper reads the node's boot id. A
		// container Docker reports not running is a fact, not a flaky
		// answer (ranks run with restart disabled): it is re-probed at
		// once, not after the lane's probe grace.
		return res, temporal.NewApplicationErrorWithOptions(fmt.Sprintf("lane %s on node %s: %s", in.Lane, a.Node.Name, strings.Join(down, "; ")), contract.RankDown,
			temporal.ApplicationErrorOptions{NextRetryDelay: RankDownReprobe, Details: []any{res}})
	}
	return res, nil
}

// bootID is this node's boot id ("" when unreadable): it changes on
// every boot, so the keeper tells a reboot from a worker restart. A test
// simulates a reboot through the BootID seam.
func (a *NodeActivities) bootID() string {
	if id := a.Seams.bootID(a.Node.Name); id != "" {
		return id
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// KeeperNotify tells the operator a keeper's news through the config's
// [keep] notify: a command run here with SPARKLANE_CLUSTER, _LANE, _STATE
// and _REASON in its environment, or an http(s) URL POSTed the same as
// JSON. Unset, it does nothing.
func (a *ControlActivities) KeeperNotify(ctx context.Context, in contract.KeeperNotifyInput) (contract.KeeperNotifyResult, error) {
	target := a.Config.Keep.Notify
	if target == "" {
		return contract.KeeperNotifyResult{}, nil
	}
	n := notify.Notice{Cluster: in.Cluster, Lane: in.Lane, State: in.State, Reason: in.Reason}
	if err := notify.Send(ctx, target, n); err != nil {
		return contract.KeeperNotifyResult{}, classify(fmt.Errorf("[keep] notify in %s: %w", a.Config.File, err))
	}
	return contract.KeeperNotifyResult{Notified: notify.Describe(target)}, nil
}

// StartKeeper starts the keeper of in.Cluster (keeper/CLUSTER). The
// workflow ID admits one running keeper per cluster; a keeper still
// running there (one its predecessor failed to end) is terminated by the
// server as this one starts (conflict policy TERMINATE_EXISTING), so two
// keepers never fight over a cluster.
func (a *ControlActivities) StartKeeper(ctx context.Context, in contract.KeeperInput) (contract.StartKeeperResult, error) {
	if a.Temporal == nil {
		return contract.StartKeeperResult{}, fmt.Errorf("cluster %s: no Temporal client on the control worker to start its keeper", in.Cluster)
	}
	id := contract.KeeperID(in.Cluster)
	run, err := a.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: "sparklane", // workflows.ControlQueue (activities cannot import workflows)
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
		TypedSearchAttributes:    searchattr.For(in.Plan.Lane, in.Cluster),
		StaticSummary:            fmt.Sprintf("keeps lane %s on cluster %s", in.Plan.Lane, in.Cluster),
	}, contract.WorkflowKeeper, in)
	if err != nil {
		return contract.StartKeeperResult{}, fmt.Errorf("cluster %s: start keeper %s: %w", in.Cluster, id, err)
	}
	return contract.StartKeeperResult{WorkflowID: id, RunID: run.GetRunID()}, nil
}

// EndKeepers ends the keeper of every cluster of the config that shares a
// node with in.Nodes (when in.Lane is set, only a keeper keeping that
// lane), and waits until each has closed: its heal, if one runs, stopped
// and its node leases released. A cluster without a running keeper is
// skipped.
func (a *ControlActivities) EndKeepers(ctx context.Context, in contract.EndKeepersInput) (contract.EndKeepersResult, error) {
	var res contract.EndKeepersResult
	if a.Temporal == nil {
		return res, nil
	}
	for _, c := range a.Config.Clusters {
		if !slices.ContainsFunc(c.Nodes, func(n string) bool { return slices.Contains(in.Nodes, n) }) {
			continue
		}
		id := contract.KeeperID(c.Name)
		d, err := a.Temporal.DescribeWorkflowExecution(ctx, id, "")
		if notRunning(err) || (err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("cluster %s: look for its keeper %s: %w", c.Name, id, err)
		}
		if in.Lane != "" {
			v, err := a.Temporal.QueryWorkflow(ctx, id, "", contract.KeeperStatusQuery)
			if notRunning(err) {
				continue
			}
			if err != nil {
				return res, fmt.Errorf("cluster %s: ask keeper %s what it keeps: %w", c.Name, id, err)
			}
			var st contract.KeeperStatus
			if err := v.Get(&st); err != nil {
				return res, fmt.Errorf("cluster %s: keeper %s answered unreadably: %w", c.Name, id, err)
			}
			if st.Lane != in.Lane || st.State == contract.KeeperEnded {
				continue
			}
		}
		h, err := a.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: id, UpdateName: contract.KeeperControlUpdate, WaitForStage: client.WorkflowUpdateStageCompleted,
			Args: []any{contract.KeeperControl{Action: nonEmptyOr(in.Action, contract.KeepEnd), By: in.By, Reason: in.Reason}},
		})
		if notRunning(err) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("cluster %s: end keeper %s: %w", c.Name, id, err)
		}
		var st contract.KeeperStatus
		if err := h.Get(ctx, &st); err != nil {
			if notRunning(err) {
				continue
			}
			return res, fmt.Errorf("cluster %s: end keeper %s: %w", c.Name, id, err)
		}
		if in.Action != "" && in.Action != contract.KeepEnd {
			res.Ended = append(res.Ended, st)
			continue
		}
		// Closed, so the next run for these nodes is admitted.
		if err := a.Temporal.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil && !notRunning(err) {
			a.Log.Sugar().Warnw("keeper ended with an error", "cluster", c.Name, "error", err)
		}
		res.Ended = append(res.Ended, st)
	}
	return res, nil
}

// notRunning is an error saying there is no running workflow to talk to.
func notRunning(err error) bool {
	if err == nil {
		return false
	}
	var nf *serviceerror.NotFound
	var done *serviceerror.WorkflowNotReady
	return errors.As(err, &nf) || errors.As(err, &done)
}

// KeeperMark records a keeper's event in the metrics:
// sparklane_keeper_restarts_total and sparklane_lane_up.
func (a *ControlActivities) KeeperMark(ctx context.Context, in contract.KeeperMarkInput) error {
	if in.Restart {
		a.Metrics.KeeperRestart(in.Cluster, in.Lane)
	}
	if in.Up != nil {
		a.Metrics.LaneUp(in.Cluster, in.Lane, *in.Up)
	}
	return nil
}
