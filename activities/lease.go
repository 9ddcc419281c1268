package activities

import (
	"context"
	"fmt"
)

// LeaseHolderQuery is the query a node lease workflow answers with its
// NodeLeaseHolder.
const LeaseHolderQuery = "holder"

// NodeLeaseID is the workflow ID of node's lease: Temporal admits one
// running workflow per ID, which is what makes a node's lease exclusive.
func NodeLeaseID(node string) string { return "node-lease." + node }

// LeaseHolder asks node's running lease workflow who holds it. A lease
// released meanwhile answers an error saying so (the caller retries).
func (a *ControlActivities) LeaseHolder(ctx context.Context, in NodeLeaseHolderInput) (NodeLeaseHolder, error) {
	var h NodeLeaseHolder
	if a.Temporal == nil {
		return h, fmt.Errorf("node %s: no Temporal client on the control worker to ask who holds its lease %s", in.Node, NodeLeaseID(in.Node))
	}
	v, err := a.Temporal.QueryWorkflow(ctx, NodeLeaseID(in.Node), "", LeaseHolderQuery)
	if err != nil {
		return h, fmt.Errorf("node %s: asking lease %s who holds it: %w", in.Node, NodeLeaseID(in.Node), err)
	}
	if err := v.Get(&h); err != nil {
		return h, fmt.Errorf("node %s: lease %s answered unreadably: %w", in.Node, NodeLeaseID(in.Node), err)
	}
	return h, nil
}
