package workflows

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
)

// One mutating run per node.
//
// Clusters overlap (2nodes-dac and 4nodes-switch share dgx1 and dgx2), and
// a cutover's own ID (cutover/CLUSTER) only keeps two runs of the same
// cluster apart. So every mutating run — cutover, up, stop, stage, repair —
// first holds a lease per node it touches: a NodeLease child workflow with
// ID node-lease.NODE. The server admits one running workflow per ID, so two
// runs can never both hold a node, whatever cluster they came through (a
// check of running workflows would race). Leases are taken in node order
// and a held node refuses at once, so two runs cannot deadlock waiting for
// each other. The lease is started under a disconnected context (a
// cancelled run keeps its nodes through its cleanup and rollback), released
// by a signal on every exit path, and terminated by the server when its
// parent closes any other way (ParentClosePolicy TERMINATE), so a crashed
// or terminated run cannot leave a node held.

// versionNodeLease gates the node leases (NodeLease children) every
// top-level mutating run takes before it touches a node.
const versionNodeLease = "node-lease"

// NodeLease holds one node for one mutating run until the run releases it
// (LeaseReleaseSignal), the run closes (the server terminates it), or it is
// cancelled by hand. It answers activities.LeaseHolderQuery with who holds it.
func NodeLease(ctx workflow.Context, in contract.NodeLeaseHolder) error {
	if err := workflow.SetQueryHandler(ctx, contract.LeaseHolderQuery, func() (contract.NodeLeaseHolder, error) { return in, nil }); err != nil {
		return err
	}
	workflow.GetSignalChannel(ctx, contract.LeaseReleaseSignal).Receive(ctx, nil)
	return nil
}

// nodeLeases are the leases a run holds.
type nodeLeases struct {
	ctx  workflow.Context // disconnected: releases run after a cancel too
	held []workflow.ChildWorkflowFuture
}

// release ends every lease held and waits until each has closed, so the
// next run for those nodes is admitted as soon as this one returns.
func (l *nodeLeases) release() {
	if l == nil {
		return
	}
	for _, f := range l.held {
		_ = f.SignalChildWorkflow(l.ctx, contract.LeaseReleaseSignal, nil).Get(l.ctx, nil)
	}
	for _, f := range l.held {
		_ = f.Get(l.ctx, nil)
	}
	l.held = nil
}

// holdNodes takes the lease of every node (in node order) for this run, or
// fails NodeHeld naming the run that holds the first node already held
// (after releasing what it took). who says what holds them (its Kind,
// Lane and Cluster; the node and this run's ID are filled in per lease).
// Child runs (their parent holds the nodes) and runs recorded before
// versionNodeLease take none. The caller defers release.
func holdNodes(ctx workflow.Context, t *tracker, who contract.NodeLeaseHolder, nodes []string) (*nodeLeases, error) {
	info := workflow.GetInfo(ctx)
	if info.ParentWorkflowExecution != nil || len(nodes) == 0 {
		return nil, nil
	}
	if workflow.GetVersion(ctx, versionNodeLease, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil, nil
	}
	sorted := append([]string(nil), nodes...)
	sort.Strings(sorted)
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	l := &nodeLeases{ctx: dctx}
	i := t.start("hold nodes", strings.Join(sorted, ","))
	for k, n := range sorted {
		if k > 0 && sorted[k-1] == n {
			continue
		}
		cctx := workflow.WithChildOptions(dctx, workflow.ChildWorkflowOptions{
			WorkflowID:            contract.NodeLeaseID(n),
			TaskQueue:             contract.ControlQueue,
			ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_TERMINATE,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
			StaticSummary:         fmt.Sprintf("%s held by %s %s", n, who.Kind, info.WorkflowExecution.ID),
			TypedSearchAttributes: searchattr.For(who.Lane, who.Cluster),
		})
		holder := who
		holder.Node, holder.WorkflowID = n, info.WorkflowExecution.ID
		f := workflow.ExecuteChildWorkflow(cctx, NodeLease, holder)
		if err := f.GetChildWorkflowExecution().Get(dctx, nil); err != nil {
			l.release()
			err = heldBy(dctx, n, who.Kind, err)
			t.end(i, "", err)
			return nil, err
		}
		l.held = append(l.held, f)
	}
	t.end(i, fmt.Sprintf("%d node lease(s)", len(l.held)), nil)
	return l, nil
}

// heldBy turns a lease that could not be started into the refusal naming
// its holder and what to do.
func heldBy(ctx workflow.Context, node, kind string, err error) error {
	// The server says ChildWorkflowExecutionAlreadyStarted; the SDK's test
	// environment the service error it is made of.
	var already *temporal.ChildWorkflowExecutionAlreadyStartedError
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if !errors.As(err, &already) && !errors.As(err, &started) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("node %s: could not take its lease %s: %s", node, contract.NodeLeaseID(node), errMessage(err)), contract.NodeHeld, err)
	}
	var h contract.NodeLeaseHolder
	qerr := workflow.ExecuteActivity(controlOpts(ctx, 30*time.Second, 0, 3), ca.LeaseHolder, contract.NodeLeaseHolderInput{Node: node}).Get(ctx, &h)
	if qerr != nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"node %s is held by another mutating run (lease %s; who holds it: %s): wait for it to finish and retry, or find it with `starter attach` / `temporal workflow describe -w %s`",
			node, contract.NodeLeaseID(node), errMessage(qerr), contract.NodeLeaseID(node)), contract.NodeHeld, err)
	}
	who := h.Kind + " " + h.WorkflowID
	var of []string
	if h.Lane != "" {
		of = append(of, "lane "+h.Lane)
	}
	if h.Cluster != "" {
		of = append(of, "cluster "+h.Cluster)
	}
	if len(of) > 0 {
		who += " (" + strings.Join(of, ", ") + ")"
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"node %s is held by %s; one mutating run per node: wait for it to finish and retry this %s, follow it with `starter attach %s`, or cancel it with `starter cancel %s`",
		node, who, kind, h.WorkflowID, h.WorkflowID), contract.NodeHeld, err)
}
