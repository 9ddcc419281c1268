package activities

import (
	"context"
	"fmt"

	"github.com/sparklane/sparklane/internal/contract"
)

// LeaseHolder asks node's running lease workflow who holds it. A lease
// released meanwhile answers an error saying so (the caller retries).
func (a *ControlActivities) LeaseHolder(ctx context.Context, in contract.NodeLeaseHolderInput) (contract.NodeLeaseHolder, error) {
	var h contract.NodeLeaseHolder
	if a.Temporal == nil {
		return h, fmt.Errorf("node %s: no Temporal client on the control worker to ask who holds its lease %s", in.Node, contract.NodeLeaseID(in.Node))
	}
	v, err := a.Temporal.QueryWorkflow(ctx, contract.NodeLeaseID(in.Node), "", contract.LeaseHolderQuery)
	if err != nil {
		return h, fmt.Errorf("node %s: asking lease %s who holds it: %w", in.Node, contract.NodeLeaseID(in.Node), err)
	}
	if err := v.Get(&h); err != nil {
		return h, fmt.Errorf("node %s: lease %s answered unreadably: %w", in.Node, contract.NodeLeaseID(in.Node), err)
	}
	return h, nil
}
