package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// ProbeRetryPolicy is "re-probe once before bail" as a plain retry policy:
// a probe that found too few usable nodes (NotEnoughNodes) runs once more
// after the grace period, then fails with every node's state.
func ProbeRetryPolicy(grace time.Duration) *temporal.RetryPolicy {
	if grace <= 0 {
		grace = contract.DefaultGrace
	}
	return &temporal.RetryPolicy{InitialInterval: grace, BackoffCoefficient: 1, MaximumAttempts: contract.ReprobeAttempts}
}

// FleetProbe asks every node's worker about its containers and disk (pinned
// to node.NAME with a short schedule-to-start timeout: a worker that is not
// polling makes its node unreachable, not a hang) and checks SSH with the
// host key verified. With Require set it fails with NotEnoughNodes when a
// required node is not usable.
func FleetProbe(ctx workflow.Context, in contract.FleetProbeInput) (contract.FleetProbeResult, error) {
	pickup := in.PickupTimeout.D()
	if pickup <= 0 {
		pickup = 5 * time.Second
	}
	type pending struct {
		ssh, status workflow.Future
	}
	futs := make([]pending, len(in.Nodes))
	for i, n := range in.Nodes {
		futs[i].ssh = workflow.ExecuteActivity(summarize(controlOpts(ctx, 30*time.Second, 0, 1), n, -1, "ssh check"), ca.CheckSSH, contract.SSHCheckInput{Node: n})
		futs[i].status = workflow.ExecuteActivity(summarize(nodeOpts(ctx, n, pickup, callBudget{run: 30 * time.Second, attempts: 1}), n, -1, "node status"), na.NodeStatus, contract.NodeStatusInput{Ports: in.Ports})
	}
	res := contract.FleetProbeResult{Attempt: int(workflow.GetInfo(ctx).Attempt)}
	for i, n := range in.Nodes {
		p := nodeProbe{node: n}
		p.sshErr = futs[i].ssh.Get(ctx, &p.ssh)
		p.statusErr = futs[i].status.Get(ctx, &p.status)
		res.Nodes = append(res.Nodes, p.state(pickup))
	}
	if missing := unusable(in, res.Nodes); len(missing) > 0 {
		var lines []string
		for _, st := range res.Nodes {
			lines = append(lines, st.Node+": "+st.String())
		}
		msg := fmt.Sprintf("lane %s needs nodes %s, but %s not usable (attempt %d); every node: %s",
			in.Lane, strings.Join(in.Require, ", "), strings.Join(missing, ", "), res.Attempt, strings.Join(lines, "; "))
		for _, st := range res.Nodes {
			if len(st.Foreign) > 0 && contains(missing, st.Node) {
				msg += "; containers sparklane did not start hold a GPU or the lane's port: stop them, or rerun with --stop-foreign"
				break
			}
		}
		return res, temporal.NewApplicationError(msg, fault.NotEnoughNodes, res)
	}
	return res, nil
}

// nodeProbe is what the fleet probe heard from one node: its SSH check
// and its worker's status, each with the error its activity returned.
type nodeProbe struct {
	node      string
	ssh       contract.SSHCheckResult
	sshErr    error
	status    contract.NodeStatusResult
	statusErr error
}

// state is the node's state from its SSH check and its worker's status
// (pickup: how long the worker had to pick the status up).
func (p nodeProbe) state(pickup time.Duration) contract.NodeState {
	n, ssh, sshErr, ns, serr := p.node, p.ssh, p.sshErr, p.status, p.statusErr
	st := contract.NodeState{Node: n}
	if sshErr != nil {
		ssh.Why = errMessage(sshErr)
	} else if ssh.Local {
		st.SSH = "local"
	} else if ssh.Reachable {
		st.SSH = "ok"
	}
	switch {
	case ssh.Off:
		st.State, st.Why = contract.NodeOff, ssh.Why
	case !ssh.Local && !ssh.Reachable:
		st.State, st.Why, st.SSH = contract.NodeUnreachable, "ssh: "+ssh.Why, "failed"
	case serr != nil && isPickupTimeout(serr):
		st.State, st.Worker = contract.NodeUnreachable, "not polling"
		st.Why = fmt.Sprintf("node worker not polling %s (no pickup within %s); start it with: worker node --node %s", contract.NodeQueue(n), pickup, n)
	case serr != nil:
		st.State, st.Worker, st.Why = contract.NodeUnreachable, "error", "node worker: "+errMessage(serr)
	default:
		st.Worker = "polling"
		st.Roots, st.Memory = ns.Roots, ns.MemTotal
		st.Lanes = ns.Lanes
		for _, f := range ns.Foreign {
			st.Foreign = append(st.Foreign, f.String())
			st.ForeignNames = append(st.ForeignNames, f.Name)
		}
		if len(st.Lanes) > 0 || len(st.Foreign) > 0 {
			st.State = contract.NodeOccupied
		} else {
			st.State = contract.NodeFree
		}
	}
	return st
}

// unusable are the required nodes that are not free or occupied, or that
// a foreign engine holds (never stopped unless asked).
func unusable(in contract.FleetProbeInput, nodes []contract.NodeState) []string {
	var missing []string
	for _, r := range in.Require {
		ok := false
		for _, st := range nodes {
			if st.Node == r && (st.State == contract.NodeFree || st.State == contract.NodeOccupied) {
				ok = len(st.Foreign) == 0 || in.StopForeign
			}
		}
		if !ok {
			missing = append(missing, r)
		}
	}
	return missing
}
