// Package workflows holds sparklane's deterministic orchestration: the fleet
// probe, staging, verify, serve, stop, bench and the cutover that strings
// them together. No I/O, no wall clock, no map iteration order, no go
// statements: every side effect is an activity in package activities, and
// node-local activities run on the node's own task queue.
package workflows

import (
	"fmt"
	"strings"
	"time"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
)

// ControlQueue is the task queue of the control worker (workflows and
// control-plane activities).
const ControlQueue = "sparklane"

// NodeQueue is the task queue a node worker polls: node.NAME.
func NodeQueue(node string) string { return "node." + node }

// Search attribute names registered by the embedded server and set on every
// run, so the UI and `temporal workflow list --query` filter by lane. They
// are searchattr's, the one definition.
const (
	SALane    = searchattr.Lane
	SACluster = searchattr.Cluster
)

// Workflow IDs are derived from what a run acts on, so a second cutover on a
// busy cluster is refused instead of run twice.
func CutoverID(cluster string) string      { return "cutover/" + cluster }
func StageID(lane string) string           { return "stage/" + lane }
func StageNodeID(lane, node string) string { return "stage/" + lane + "/" + node }
func UpID(cluster string) string           { return "up/" + cluster }
func StopID(target string) string          { return "stop/" + target }
func VerifyID(label string) string         { return "verify/" + label }
func BenchID(lane string) string           { return "bench/" + lane }
func PowerID(action, target string) string { return "power-" + action + "/" + target }

// ProgressQuery is the query every long workflow answers with a Progress.
const ProgressQuery = "progress"

// Step status values.
const (
	StepPending = "pending"
	StepRunning = "running"
	StepDone    = "done"
	StepFailed  = "failed"
	StepSkipped = "skipped"
)

// Step is one row of a workflow's progress: a pipeline step, possibly on
// one node.
type Step struct {
	Name   string `json:"name"`
	Node   string `json:"node,omitempty"`
	Status string `json:"status"`
	// Started/Ended are workflow time (deterministic).
	Started time.Time `json:"started,omitempty"`
	Ended   time.Time `json:"ended,omitempty"`
	Detail  string    `json:"detail,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// Seconds is the step's duration so far.
func (s Step) Seconds() float64 {
	if s.Started.IsZero() || s.Ended.IsZero() {
		return 0
	}
	return s.Ended.Sub(s.Started).Seconds()
}

// Progress is what ProgressQuery returns.
type Progress struct {
	Workflow string `json:"workflow"`
	Lane     string `json:"lane,omitempty"`
	Steps    []Step `json:"steps"`
	// Children are child workflow IDs (per-node staging) whose pending
	// activities carry byte-level progress in their heartbeats.
	Children []string `json:"children,omitempty"`
	// Waiting are nodes whose worker is gone and that the run waits for,
	// within its outage budget.
	Waiting []NodeWait `json:"waiting,omitempty"`
}

// NodeWait is a node a run waits for, and since when.
type NodeWait struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
}

// ---- fleet probe ----

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
	Grace contract.Duration `json:"grace,omitempty"`
	// PickupTimeout bounds how long a node worker may take to pick up its
	// status activity before the node is called unreachable.
	PickupTimeout contract.Duration `json:"pickup_timeout,omitempty"`
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
	Why    string                `json:"why,omitempty"`
	SSH    string                `json:"ssh,omitempty"`
	Worker string                `json:"worker,omitempty"`
	Roots  []activities.RootFree `json:"roots,omitempty"`
}

// String is the one-word-and-reason form used in tables and errors.
func (n NodeState) String() string {
	switch n.State {
	case NodeOccupied:
		var by []string
		if len(n.Lanes) > 0 {
			by = append(by, "lane "+joinComma(n.Lanes))
		}
		if len(n.Foreign) > 0 {
			by = append(by, "foreign: "+joinComma(n.Foreign))
		}
		return fmt.Sprintf("occupied (%s)", strings.Join(by, "; "))
	case NodeUnreachable, NodeOff:
		if n.Why != "" {
			return fmt.Sprintf("%s (%s)", n.State, n.Why)
		}
	}
	return n.State
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// FleetProbeResult lists every node's state in input order.
type FleetProbeResult struct {
	Nodes []NodeState `json:"nodes"`
	// Attempt is 1, or 2 after a re-probe.
	Attempt int `json:"attempt"`
}

// ---- node activities' inputs and outputs ----

// Stage modes (--stage).
const (
	StageAuto  = "auto"
	StageSkip  = "skip"
	StageForce = "force"
)

// ---- staging workflows ----

// StageNodeInput stages every block of a lane on one node.
type StageNodeInput struct {
	Lane   string             `json:"lane"`
	Node   string             `json:"node"`
	Rank   int                `json:"rank"`
	TP     int                `json:"tp"`
	Blocks []contract.Staging `json:"blocks"`
	Mode   string             `json:"mode"`
	DryRun bool               `json:"dry_run,omitempty"`
	// Verify runs a verify-only pass after staging; a mismatch fails.
	Verify bool `json:"verify,omitempty"`
	// PickupTimeout bounds schedule-to-start on the node's queue.
	PickupTimeout contract.Duration `json:"pickup_timeout,omitempty"`
	// Heartbeat is the staging activities' heartbeat timeout: how soon a
	// killed node worker is noticed and its copy retried (0: one minute).
	Heartbeat contract.Duration `json:"heartbeat,omitempty"`
	// OutageBudget is how long the node may be gone (no worker) before the
	// stage fails naming it (0: DefaultOutageBudget).
	OutageBudget contract.Duration `json:"outage_budget,omitempty"`
	// Relay, when set, relays the hub-mirror blocks between the nodes of
	// this run (an input field: no change to the command sequence).
	Relay *activities.RelayInput `json:"relay,omitempty"`
	// Room lets a block short of min_free name (or, with MakeRoom, prune)
	// other lanes' least recently served blocks (an input field: no
	// change to the command sequence).
	Room *activities.DiskRoom `json:"room,omitempty"`
}

// StageNodeResult is what one node's staging did.
type StageNodeResult struct {
	Node     string                         `json:"node"`
	Blocks   []activities.StageBlockResult  `json:"blocks"`
	Verified []activities.VerifyBlockResult `json:"verified,omitempty"`
}

// StageInput stages a lane on every node of its cluster (or one node).
type StageInput struct {
	Plan   contract.LanePlan  `json:"plan"`
	Blocks []contract.Staging `json:"blocks"`
	// Only restricts staging to one node (--node).
	Only   string            `json:"only,omitempty"`
	Mode   string            `json:"mode"`
	DryRun bool              `json:"dry_run,omitempty"`
	Verify bool              `json:"verify,omitempty"`
	Pickup contract.Duration `json:"pickup,omitempty"`
	// Heartbeat is passed to every StageNode (0: one minute).
	Heartbeat contract.Duration `json:"heartbeat,omitempty"`
	// OutageBudget is passed to every StageNode (0: DefaultOutageBudget).
	OutageBudget contract.Duration `json:"outage_budget,omitempty"`
	// Room is passed to every StageNode (stage --make-room).
	Room *activities.DiskRoom `json:"room,omitempty"`
}

// StageResult collects every node's result.
type StageResult struct {
	Lane  string            `json:"lane"`
	Nodes []StageNodeResult `json:"nodes"`
}

// VerifyLane is one lane's blocks to verify.
type VerifyLane struct {
	Plan   contract.LanePlan  `json:"plan"`
	Blocks []contract.Staging `json:"blocks"`
}

// VerifyInput verifies staged blocks of several lanes (starter verify and
// the nightly schedule).
type VerifyInput struct {
	Lanes []VerifyLane `json:"lanes"`
	Full  bool         `json:"full,omitempty"`
	// Repair re-stages only the blocks that drifted.
	Repair bool `json:"repair,omitempty"`
	// LaneNames, when set instead of Lanes, are resolved by the control
	// worker at run time (schedules keep their input for months; recipes change).
	LaneNames []string          `json:"lane_names,omitempty"`
	Only      string            `json:"only,omitempty"`
	Pickup    contract.Duration `json:"pickup,omitempty"`
	// ReportDir, when set, receives a short drift report.
	Report bool `json:"report,omitempty"`
}

// VerifyWorkflowResult lists every block's outcome.
type VerifyWorkflowResult struct {
	Blocks   []activities.VerifyBlockResult `json:"blocks"`
	Repaired []activities.StageBlockResult  `json:"repaired,omitempty"`
	Drift    bool                           `json:"drift"`
	Report   string                         `json:"report,omitempty"`
	// NoWorker lists, in plan order and once each, the nodes whose worker
	// never picked up a check (no worker polls node.NAME): their blocks
	// carry NoWorker and were not verified. Typed, so callers never parse
	// an error's text to tell "no worker" from drift.
	NoWorker []string `json:"no_worker,omitempty"`
	// Off lists the unreachable nodes that are off on purpose (relay off,
	// or powered down by sparklane), with why: "off, not verified". Not
	// drift, not a failure: a night with the switch's nodes off passes.
	Off    []string `json:"off,omitempty"`
	OffWhy []string `json:"off_why,omitempty"`
}
