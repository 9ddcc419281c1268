package contract

import (
	"fmt"
	"strings"
)

// RootFree is free space on one staging root of a node.
type RootFree struct {
	Root  string `json:"root"`
	Free  int64  `json:"free"`
	Error string `json:"error,omitempty"`
}

// NodeStatusInput asks a node worker about its own disk and containers.
type NodeStatusInput struct {
	// Ports are the API ports of the lane asking: a container sparklane
	// did not start that holds one of them is reported as foreign.
	Ports []int `json:"ports,omitempty"`
}

// NodeStatusResult is what a node worker reports about itself.
type NodeStatusResult struct {
	Node string `json:"node"`
	// Lanes running on the node, sorted; Containers their container names.
	Lanes      []string   `json:"lanes"`
	Containers []string   `json:"containers"`
	Roots      []RootFree `json:"roots"`
	// Foreign are running containers sparklane did not start that use
	// GPUs or hold one of the asked ports; they make the node occupied.
	Foreign []ForeignContainer `json:"foreign,omitempty"`
	// MemTotal is the node's memory in bytes (/proc/meminfo's MemTotal;
	// on a DGX Spark the unified memory), for the memory fit; 0 unread.
	MemTotal int64 `json:"mem_total,omitempty"`
}

// StopForeignInput names foreign containers on one node to stop
// (cutover --stop-foreign).
type StopForeignInput struct {
	Names []string `json:"names"`
}

// StopForeignResult lists the containers stopped.
type StopForeignResult struct {
	Node    string   `json:"node"`
	Stopped []string `json:"stopped,omitempty"`
}

// SSHCheckInput asks the control worker to reach a node over SSH.
type SSHCheckInput struct {
	Node string `json:"node"`
}

// SSHCheckResult says whether SSH answered, with the host key checked.
type SSHCheckResult struct {
	Node      string `json:"node"`
	Reachable bool   `json:"reachable"`
	Local     bool   `json:"local"`
	// Off is true when the node's outlet relay is known to be off.
	Off bool   `json:"off,omitempty"`
	Why string `json:"why,omitempty"`
}

// NodePollingInput names a node whose queue is checked for a worker.
type NodePollingInput struct {
	Node string `json:"node"`
	// DownSeconds is how long the run has been waiting for the node: the
	// node outage metric (0 in runs recorded before).
	DownSeconds float64 `json:"down_seconds,omitempty"`
}

// NodePollingResult says whether a worker polls node.NAME.
type NodePollingResult struct {
	Node    string `json:"node"`
	Polling bool   `json:"polling"`
}

// NodeLeaseHolder says which mutating run holds a node: the lease
// workflow carries it as its input and answers it to LeaseHolderQuery, so
// a run refused the node can name who has it and what to do.
type NodeLeaseHolder struct {
	Node string `json:"node"`
	// WorkflowID is the holding run's ID (cutover/CLUSTER, stage/LANE, …),
	// what `starter attach` and `starter cancel` take.
	WorkflowID string `json:"workflow_id"`
	// Kind is the run's kind: cutover, up, stop, stage or repair.
	Kind    string `json:"kind"`
	Lane    string `json:"lane,omitempty"`
	Cluster string `json:"cluster,omitempty"`
}

// NodeLeaseHolderInput names the node whose lease holder is asked for.
type NodeLeaseHolderInput struct {
	Node string `json:"node"`
}

// NodeOffInput names a node a run could not reach.
type NodeOffInput struct {
	Node string `json:"node"`
}

// NodeOffResult says whether the node is off on purpose: its relay is off,
// or sparklane powered it down and has not powered it up since.
type NodeOffResult struct {
	Node string `json:"node"`
	Off  bool   `json:"off"`
	// Why: "relay switch.x is off", "powered off by sparklane at …".
	Why string `json:"why,omitempty"`
}

// Node states reported by the fleet probe.
const (
	NodeFree        = "free"
	NodeOccupied    = "occupied"
	NodeUnreachable = "unreachable"
	NodeOff         = "off"
)

// FleetProbeInput names the nodes to look at and which of them a lane needs.
type FleetProbeInput struct {
	Nodes []string `json:"nodes"`
	// Require are nodes that must be usable (free, or occupied by a lane the
	// caller will stop) or the probe fails with NotEnoughNodes — which its
	// retry policy turns into one re-probe after the grace period.
	Require []string `json:"require,omitempty"`
	// Lane is the lane asking (for the error message).
	Lane string `json:"lane,omitempty"`
	// Grace is how long to wait before the one re-probe.
	Grace Duration `json:"grace,omitempty"`
	// PickupTimeout bounds how long a node worker may take to pick up its
	// status activity before the node is called unreachable.
	PickupTimeout Duration `json:"pickup_timeout,omitempty"`
	// Ports are the lane's API ports: a container sparklane did not start
	// that holds one (or any GPU) makes its node occupied by "foreign".
	Ports []int `json:"ports,omitempty"`
	// StopForeign makes a required node occupied only by foreign
	// containers usable: the caller stops them (cutover --stop-foreign).
	StopForeign bool `json:"stop_foreign,omitempty"`
}

// NodeState is one node as the probe found it.
type NodeState struct {
	Node  string `json:"node"`
	State string `json:"state"`
	// Lanes running on the node (container labels), for occupied.
	Lanes []string `json:"lanes,omitempty"`
	// Foreign are running containers sparklane did not start that hold a
	// GPU or the lane's port ("NAME (GPUs)"); ForeignNames their names.
	// Either makes the node occupied by foreign; they are never stopped
	// unless the operator asks (--stop-foreign).
	Foreign      []string `json:"foreign,omitempty"`
	ForeignNames []string `json:"foreign_names,omitempty"`
	// Why explains unreachable/off.
	Why    string     `json:"why,omitempty"`
	SSH    string     `json:"ssh,omitempty"`
	Worker string     `json:"worker,omitempty"`
	Roots  []RootFree `json:"roots,omitempty"`
	// Memory is the node's memory its worker reported (bytes; 0 unknown).
	Memory int64 `json:"memory,omitempty"`
}

// String is the one-word-and-reason form used in tables and errors.
func (n NodeState) String() string {
	switch n.State {
	case NodeOccupied:
		var by []string
		if len(n.Lanes) > 0 {
			by = append(by, "lane "+strings.Join(n.Lanes, ", "))
		}
		if len(n.Foreign) > 0 {
			by = append(by, "foreign: "+strings.Join(n.Foreign, ", "))
		}
		return fmt.Sprintf("occupied (%s)", strings.Join(by, "; "))
	case NodeUnreachable, NodeOff:
		if n.Why != "" {
			return fmt.Sprintf("%s (%s)", n.State, n.Why)
		}
	}
	return n.State
}

// FleetProbeResult lists every node's state in input order.
type FleetProbeResult struct {
	Nodes []NodeState `json:"nodes"`
	// Attempt is 1, or 2 after a re-probe.
	Attempt int `json:"attempt"`
}
