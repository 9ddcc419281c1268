// Workflow inputs, results, progress and IDs: the workflows' wire contract.
//
// Every type here travels in a workflow's input, result or query answer, and
// so in Temporal histories that a newer binary replays. Changing a field is a
// versioned change (workflows/versions.go): add fields as optional
// (omitempty, zero means the old behaviour), never rename or retype one.
// The lane types these embed (Recipe, LanePlan, Staging, ...) are
// internal/contract's; activities' inputs and results are activities/contract.go.

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
	// Memory is the node's memory its worker reported (bytes; 0 unknown).
	Memory int64 `json:"memory,omitempty"`
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
	// Fetch, when set, downloads these repos from the Hub into the NAS
	// first (a Fetch child, fetch/LANE): stage --fetch, or blocks with
	// fetch = true. Behind versionStageFetch.
	Fetch *contract.FetchPlan `json:"fetch,omitempty"`
	// Build, when set, builds the lane's image on Build.Node when no node
	// of the cluster has it (a recipe with [build]), or first whatever
	// the nodes have (Force: starter image build); it is then moved to the
	// other nodes. Behind versionStageBuild.
	Build *ImageBuild `json:"build,omitempty"`
	// Pull, when set, pulls the lane's image from a registry on Pull.Node
	// when no node of the cluster has it (image_registry), before a build.
	// Behind versionStageRegistry.
	Pull *ImagePull `json:"pull,omitempty"`
	// ImageOnly ensures the image and stages no block (starter image build).
	ImageOnly bool `json:"image_only,omitempty"`
}

// ImageBuild is how the image step builds a lane's image.
type ImageBuild struct {
	// Image is the recipe's image: the tag the build gives.
	Image string         `json:"image"`
	Spec  contract.Build `json:"spec"`
	// Node builds it (the recipe's [build] node, --node, or the head).
	Node  string `json:"node"`
	Force bool   `json:"force,omitempty"`
}

// ImagePull is how the image step pulls a lane's image from a registry
// on one node: the registry and the path of its auth file on that node,
// never credentials.
type ImagePull struct {
	Image    string `json:"image"`
	Registry string `json:"registry"`
	AuthFile string `json:"auth_file,omitempty"`
	// Node pulls it (the node the stage is for, or the cluster's head).
	Node string `json:"node"`
}

// StageResult collects every node's result.
type StageResult struct {
	Lane  string            `json:"lane"`
	Nodes []StageNodeResult `json:"nodes"`
	// Built is the image build the image step ran, if any.
	Built *activities.BuildImageResult `json:"built,omitempty"`
	// Pulled is the registry pull the image step ran, if any.
	Pulled *activities.PullImageResult `json:"pulled,omitempty"`
	// Fetch is the Fetch child's result, when the stage fetched first.
	Fetch *FetchResult `json:"fetch,omitempty"`
	// Images is the image step, per node (runs from versionStageImage on).
	Images []ImageNodeResult `json:"images,omitempty"`
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

// CutoverInput switches a cluster to a lane. The starter resolved and
// rendered the recipe; the snapshot travels here so the run is reproducible
// from its history alone.
type CutoverInput struct {
	Recipe contract.Recipe   `json:"recipe"`
	Plan   contract.LanePlan `json:"plan"`
	// Stage is auto | skip | force.
	Stage      string `json:"stage"`
	NoWait     bool   `json:"no_wait,omitempty"`
	Bench      bool   `json:"bench,omitempty"`
	BenchLabel string `json:"bench_label,omitempty"`
	NoRollback bool   `json:"no_rollback,omitempty"`
	// PowerOn switches on the lane's nodes whose relay is off before staging.
	PowerOn bool `json:"power_on,omitempty"`
	// Room is passed to the stage step (cutover --make-room): a block
	// short of min_free names, or prunes, other lanes' blocks.
	Room *activities.DiskRoom `json:"room,omitempty"`
	// Fleet is every node of the config: a previous lane is stopped wherever
	// it runs, not only on the nodes the new lane needs.
	Fleet []string `json:"fleet,omitempty"`
	// Grace is the wait before the fleet probe's one re-probe.
	Grace  contract.Duration `json:"grace,omitempty"`
	Pickup contract.Duration `json:"pickup,omitempty"`
	// OutageBudget is how long a node may be gone mid-run before the
	// cutover fails naming it (0: DefaultOutageBudget).
	OutageBudget contract.Duration `json:"outage_budget,omitempty"`
	// StopForeign stops running containers sparklane did not start that
	// hold a GPU or the lane's port on the lane's nodes (--stop-foreign);
	// without it such a node is occupied and the cutover is refused.
	StopForeign bool `json:"stop_foreign,omitempty"`
	// Keep is how the cluster's keeper keeps the lane once the cutover
	// succeeded (nil: the recipe's [keep], then the defaults).
	Keep *activities.KeepPolicy `json:"keep,omitempty"`
	// Fetch, when set, downloads these repos from the Hub into the NAS
	// before the stage step (a Fetch child, fetch/LANE): cutover --fetch,
	// or blocks with fetch = true. Behind versionCutoverFetch.
	Fetch *contract.FetchPlan `json:"fetch,omitempty"`
}

// CutoverResult says what happened, step by step; on failure it is also
// the failure's details.
type CutoverResult struct {
	Lane    string `json:"lane"`
	Cluster string `json:"cluster"`
	OK      bool   `json:"ok"`
	// FailedStep and Error describe the first failure.
	FailedStep string `json:"failed_step,omitempty"`
	Error      string `json:"error,omitempty"`
	// Previous are the lanes that held the nodes and were stopped.
	Previous []string `json:"previous,omitempty"`
	// StoppedForeign are the foreign containers stopped (--stop-foreign),
	// as "NODE/NAME".
	StoppedForeign []string `json:"stopped_foreign,omitempty"`
	// RolledBack lists the previous lanes brought back after a failure;
	// OldLaneAnswers is true when they answered their probes again.
	RolledBack     []string          `json:"rolled_back,omitempty"`
	RollbackError  string            `json:"rollback_error,omitempty"`
	OldLaneAnswers bool              `json:"old_lane_answers,omitempty"`
	Probe          *FleetProbeResult `json:"probe,omitempty"`
	Stage          []StageNodeResult `json:"stage,omitempty"`
	// Images is the stage's image step, per node (versionStageImage).
	Fetch  *FetchResult      `json:"fetch,omitempty"`
	Images []ImageNodeResult `json:"images,omitempty"`
	// Built is the image build the image step ran (versionStageBuild).
	Built *activities.BuildImageResult `json:"built,omitempty"`
	// Pulled is the registry pull it ran (versionStageRegistry).
	Pulled *activities.PullImageResult    `json:"pulled,omitempty"`
	Verify []activities.VerifyBlockResult `json:"verify,omitempty"`
	Serve  *ServeResult                   `json:"serve,omitempty"`
	Bench  *activities.BenchResult        `json:"bench,omitempty"`
	Steps  []Step                         `json:"steps"`
}

// DiskInput asks every listed node's worker for its staged blocks and,
// with Prune, to remove some. Blocks are per node: the blocks of every
// lane whose recipe places the node (the control side reads the recipes,
// the node reads its disk).
type DiskInput struct {
	Nodes  []string                        `json:"nodes"`
	Blocks map[string][]contract.DiskBlock `json:"blocks"`
	// Prune, when set, removes blocks on every node (least recently
	// served first with LRU), never of a lane running on any node.
	Prune *contract.PruneSpec `json:"prune,omitempty"`
	// PickupTimeout is how long a node worker may take to answer.
	PickupTimeout contract.Duration `json:"pickup_timeout,omitempty"`
	// Images, when set, lists every node's images too (starter images,
	// disk prune --lru): each lane's recipe image → the lanes naming it.
	Images map[string][]string `json:"images,omitempty"`
}

// DiskNode is one node's answer, or why there is none.
type DiskNode struct {
	Node  string                 `json:"node"`
	Error string                 `json:"error,omitempty"`
	Disk  *activities.DiskResult `json:"disk,omitempty"`
}

// DiskResult is the fleet's staged blocks (after a prune, when asked),
// and the lanes running anywhere (never pruned).
type DiskResult struct {
	Nodes   []DiskNode `json:"nodes"`
	Running []string   `json:"running,omitempty"`
}

// PowerInput switches nodes and devices on or off. Only names travel here:
// the activities read relay entities and token sources from the config.
type PowerInput struct {
	Action  string   `json:"action"`
	Targets []string `json:"targets"`
	// Force cuts the relay even when a device still answers after its
	// graceful shutdown (it would otherwise boot back or lose data).
	Force bool `json:"force,omitempty"`
	// WaitBound caps waiting for a target to go down or come up.
	WaitBound contract.Duration `json:"wait_bound,omitempty"`
	// Gear is network gear (switches) to power off after the targets,
	// never before the nodes behind it: each goes off only once every
	// node behind it is off — a target of this run that reached off, or
	// another node that no longer answers. Gear steps (API shutdown, wait,
	// relay) only warn: the nodes are already down safely.
	Gear []PowerGear `json:"gear,omitempty"`
}

// PowerGear is one piece of network gear and the nodes behind it
// ([[devices]] behind).
type PowerGear struct {
	Name   string   `json:"name"`
	Behind []string `json:"behind,omitempty"`
}

// PowerTargetResult is one target's outcome.
type PowerTargetResult struct {
	Target   string                       `json:"target"`
	State    string                       `json:"state"`
	Steps    []activities.PowerStepResult `json:"steps"`
	Warnings []string                     `json:"warnings,omitempty"`
	Error    string                       `json:"error,omitempty"`
}

// PowerResult lists every target.
type PowerResult struct {
	Action  string              `json:"action"`
	Targets []PowerTargetResult `json:"targets"`
}

// ServeInput brings a lane up on its nodes and probes it (starter up).
type ServeInput struct {
	Recipe contract.Recipe   `json:"recipe"`
	Plan   contract.LanePlan `json:"plan"`
	// NoWait returns after the containers started.
	NoWait bool              `json:"no_wait,omitempty"`
	Pickup contract.Duration `json:"pickup,omitempty"`
	// OutageBudget is how long a node may be gone (no worker polling its
	// queue) during the serve steps before they fail naming it (0:
	// DefaultOutageBudget): a node rebooting mid-serve is waited for.
	OutageBudget contract.Duration `json:"outage_budget,omitempty"`
	// Keep is how the cluster's keeper keeps the lane once it answers
	// (nil: the recipe's [keep], then the defaults); Grace is the wait
	// before a failed check's re-probe.
	Keep  *activities.KeepPolicy `json:"keep,omitempty"`
	Grace contract.Duration      `json:"grace,omitempty"`
}

// ServeResult is what serving and probing found.
type ServeResult struct {
	Lane    string                         `json:"lane"`
	BaseURL string                         `json:"base_url,omitempty"`
	Image   []activities.EnsureImageResult `json:"images,omitempty"`
	Hooks   []activities.BeforeServeResult `json:"hooks,omitempty"`
	Ranks   []activities.StartRankResult   `json:"ranks,omitempty"`
	Ready   *activities.WaitReadyResult    `json:"ready,omitempty"`
	Smoke   *activities.SmokeResult        `json:"smoke,omitempty"`
	Decode  *activities.DecodeProbeResult  `json:"decode,omitempty"`
	// Answers is true when the lane answered its probes.
	Answers bool `json:"answers"`
	// PostExec and PostCommands are the post hooks' outputs; StoppedAfterPost
	// says the lane was stopped after them (stop_after_post).
	PostExec         *activities.PostHooksResult `json:"post_exec,omitempty"`
	PostCommands     *activities.PostHooksResult `json:"post_commands,omitempty"`
	StoppedAfterPost bool                        `json:"stopped_after_post,omitempty"`
}

// StopInput stops a lane (or every sparklane container) on nodes.
type StopInput struct {
	Lane   string            `json:"lane,omitempty"`
	Nodes  []string          `json:"nodes"`
	All    bool              `json:"all,omitempty"`
	Pickup contract.Duration `json:"pickup,omitempty"`
	// OutageBudget, when positive, is how long a node may be gone (no
	// worker) before its stop fails naming it. 0 fails at once: a stop
	// asked for by hand covers every node of the fleet, and one that is
	// switched off must not hold it for half an hour.
	OutageBudget contract.Duration `json:"outage_budget,omitempty"`
}

// StopResult lists what was stopped per node.
type StopResult struct {
	Nodes []activities.StopLaneResult `json:"nodes"`
}

// KeeperResult is how a keeper run ended (an "end": stop, cutover, up).
type KeeperResult struct {
	Lane       string `json:"lane"`
	Cluster    string `json:"cluster"`
	Ended      string `json:"ended,omitempty"`
	Restarts   int    `json:"restarts"`
	LastReason string `json:"last_reason,omitempty"`
}

// FetchID is the workflow ID of a lane's Hub fetch: one fetch per lane at
// a time (two would download the same blobs into the same NAS).
func FetchID(lane string) string { return "fetch/" + lane }

// FetchInput downloads a lane's hub-mirror repos from the Hub into the
// NAS (starter fetch, or a Stage that fetches first).
type FetchInput struct {
	Plan   contract.FetchPlan `json:"plan"`
	DryRun bool               `json:"dry_run,omitempty"`
	// Pickup bounds schedule-to-start on a fetch node's queue (0:
	// DefaultPickup); Heartbeat is FetchRepo's heartbeat timeout, how soon
	// a killed worker is noticed and the fetch retried (0: one minute);
	// OutageBudget is how long the fetch node may be gone (0:
	// DefaultOutageBudget).
	Pickup       contract.Duration `json:"pickup,omitempty"`
	Heartbeat    contract.Duration `json:"heartbeat,omitempty"`
	OutageBudget contract.Duration `json:"outage_budget,omitempty"`
}

// FetchResult is what each repo's fetch did, in plan order.
type FetchResult struct {
	Lane  string                       `json:"lane"`
	Repos []activities.FetchRepoResult `json:"repos"`
}

// ImageNodeResult is one node's part of the image step of stage (and so
// cutover): whether the image was there, what moved to it and from where.
type ImageNodeResult struct {
	Node  string `json:"node"`
	Image string `json:"image"`
	// State: "present ID", "missing: has N of M layers, K would move" (a
	// dry run), or "received N layers (B bytes)".
	State string `json:"state"`
	ID    string `json:"id,omitempty"`
	// From is the node it receives from (its upstream in the chain).
	From     string `json:"from,omitempty"`
	BytesIn  int64  `json:"bytes_in,omitempty"`
	BytesOut int64  `json:"bytes_out,omitempty"`
	Layers   int    `json:"layers,omitempty"`
	// Error is a dry run's refusal (the run would stop with it).
	Error string `json:"error,omitempty"`
}
