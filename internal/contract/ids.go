package contract

// LeaseHolderQuery is the query a node lease workflow answers with its
// NodeLeaseHolder.
const LeaseHolderQuery = "holder"

// NodeLeaseID is the workflow ID of node's lease: Temporal admits one
// running workflow per ID, which is what makes a node's lease exclusive.
func NodeLeaseID(node string) string { return "node-lease." + node }

// ControlQueue is the task queue of the control worker (workflows and
// control-plane activities).
const ControlQueue = "sparklane"

// NodeQueue is the task queue a node worker polls: node.NAME.
func NodeQueue(node string) string { return "node." + node }

// Workflow IDs are derived from what a run acts on, so a second cutover on a
// busy cluster is refused instead of run twice.
func CutoverID(cluster string) string { return "cutover/" + cluster }

func StageID(lane string) string { return "stage/" + lane }

func StageNodeID(lane, node string) string { return "stage/" + lane + "/" + node }

func UpID(cluster string) string { return "up/" + cluster }

func StopID(target string) string { return "stop/" + target }

func VerifyID(label string) string { return "verify/" + label }

func BenchID(lane string) string { return "bench/" + lane }

func PowerID(action, target string) string { return "power-" + action + "/" + target }

// ProgressQuery is the query every long workflow answers with a Progress.
const ProgressQuery = "progress"

// FetchID is the workflow ID of a lane's Hub fetch: one fetch per lane at
// a time (two would download the same blobs into the same NAS).
func FetchID(lane string) string { return "fetch/" + lane }

// NodeLeaseKind names a mutating run in a lease.
const (
	LeaseCutover = "cutover"
	LeaseUp      = "up"
	LeaseStop    = "stop"
	LeaseStage   = "stage"
	LeaseRepair  = "repair"
	// LeasePrune is `starter disk prune` (not a dry run): it removes
	// staged blocks, so no stage may write them meanwhile.
	LeasePrune = "disk prune"
)

// LeaseReleaseSignal ends a node lease: its holder is done with the node.
const LeaseReleaseSignal = "release"

// NodeHeld is the error type of a run refused a node another run holds.
const NodeHeld = "NodeHeld"

// Workflow type names, as the control worker registers them: runs are
// started by name, so the starter starts them without linking the
// workflows (workflows/names_test.go holds these to the registered
// functions).
const (
	WorkflowCutover    = "Cutover"
	WorkflowStage      = "Stage"
	WorkflowStageNode  = "StageNode"
	WorkflowVerify     = "Verify"
	WorkflowServe      = "Serve"
	WorkflowStop       = "Stop"
	WorkflowProbe      = "Probe"
	WorkflowFleetProbe = "FleetProbe"
	WorkflowBench      = "Bench"
	WorkflowPower      = "Power"
	WorkflowDisk       = "Disk"
	WorkflowKeeper     = "Keeper"
	WorkflowNodeLease  = "NodeLease"
	WorkflowFetch      = "Fetch"
)
