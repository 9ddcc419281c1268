// Activity inputs and results: the activities' wire contract.
//
// Every type here travels in an activity's input or result, and so in
// Temporal histories that a newer binary replays. Changing a field is a
// versioned change (workflows/versions.go): add fields as optional
// (omitempty, zero means the old behaviour), never rename or retype one.
// The lane types these embed (Recipe, LanePlan, Staging, ...) are
// internal/contract's; workflows' inputs and results are workflows/contract.go.

package activities

import (
	"time"

	"github.com/sparklane/sparklane/internal/contract"
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
	Foreign []contract.ForeignContainer `json:"foreign,omitempty"`
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

// StageBlockInput runs one [[staging]] block on one node.
type StageBlockInput struct {
	Lane   string           `json:"lane"`
	Block  contract.Staging `json:"block"`
	Rank   int              `json:"rank"`
	TP     int              `json:"tp"`
	Force  bool             `json:"force,omitempty"`
	DryRun bool             `json:"dry_run,omitempty"`
	// Resume is the progress an earlier activity heartbeated before its
	// node went away; the workflow passes it to the new activity it starts
	// once the node is back (heartbeat details do not cross activities).
	Resume *contract.StageProgress `json:"resume,omitempty"`
	// Relay, when set, stages a hub-mirror block through the relay: the
	// nodes staging it in this run (cluster order) and their relay
	// servers. It carries addresses only; identities are files on the node.
	Relay *RelayInput `json:"relay,omitempty"`
	// Room lists every lane's staged blocks, so a block that would fail
	// min_free names the lanes whose blocks would free enough (and with
	// MakeRoom prunes them); nil: the bare NoSpace error. An input field:
	// no change to the command sequence.
	Room *DiskRoom `json:"room,omitempty"`
	// Verify has the activity verify the block without writing once it is
	// staged (the post-stage verify), returning StageBlockResult.Verified:
	// one task round trip less than a VerifyBlock after it. Set by
	// StageNode from versionStageVerifyInBlock on.
	Verify bool `json:"verify,omitempty"`
}

// DiskRoom is what a stage may prune to make room for its blocks.
type DiskRoom struct {
	// Blocks are every lane's [[staging]] blocks (what `starter disk`
	// lists).
	Blocks []contract.DiskBlock `json:"blocks"`
	// MakeRoom prunes least recently served blocks of other, not running
	// lanes until min_free is met (--make-room), then stages.
	MakeRoom bool `json:"make_room,omitempty"`
}

// RelayInput is a block's relay group.
type RelayInput struct {
	Nodes []string          `json:"nodes"`
	Peers map[string]string `json:"peers"`
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

// StageBlockResult is one block's outcome on one node.
type StageBlockResult struct {
	Node   string               `json:"node"`
	Block  string               `json:"block"`
	Kind   string               `json:"kind"`
	Result contract.BlockResult `json:"result"`
	// Verified is the post-stage verify when the input asked for it.
	Verified *VerifyBlockResult `json:"verified,omitempty"`
}

// VerifyBlockInput verifies one block on one node without writing.
type VerifyBlockInput struct {
	Lane  string           `json:"lane"`
	Block contract.Staging `json:"block"`
	Rank  int              `json:"rank"`
	TP    int              `json:"tp"`
	Full  bool             `json:"full,omitempty"`
}

// VerifyBlockResult is one block's verify outcome on one node.
type VerifyBlockResult struct {
	Lane   string               `json:"lane,omitempty"`
	Node   string               `json:"node"`
	Block  string               `json:"block"`
	Kind   string               `json:"kind"`
	Result contract.BlockVerify `json:"result"`
	// NoWorker is set (by the Verify workflow, never by the activity) when
	// no worker of the node picked the check up within its pickup timeout:
	// nothing was verified there, so the block is neither clean nor
	// drifted, and the operator is told to start the worker instead of
	// hunting for drift that may not exist.
	NoWorker bool `json:"no_worker,omitempty"`
	// Off is set (by the Verify workflow) instead of NoWorker when the
	// unreachable node is off on purpose — its relay is off, or sparklane
	// powered it down: "off, not verified", neither drift nor a failure.
	Off bool `json:"off,omitempty"`
}

// BuildImageInput builds a lane's image on this node from its [build].
type BuildImageInput struct {
	// Image is the tag the result gets (the recipe's image).
	Image string         `json:"image"`
	Build contract.Build `json:"build"`
}

// BuildImageResult is the image built and the build log's last lines.
type BuildImageResult struct {
	Node string   `json:"node"`
	ID   string   `json:"id"`
	Tail []string `json:"tail,omitempty"`
}

// PullImageInput pulls a lane's image on this node from a registry:
// Registry and AuthFile (a path on the node, read here) only, never the
// credentials.
type PullImageInput struct {
	// Image is the recipe's image: the tag the pulled image gets and the
	// digest it must carry when pinned.
	Image    string `json:"image"`
	Registry string `json:"registry"`
	AuthFile string `json:"auth_file,omitempty"`
}

// PullImageResult is the image pulled.
type PullImageResult struct {
	Node string `json:"node"`
	contract.ImagePulled
}

// BuildProgress is a build's heartbeat: the log's latest line.
type BuildProgress struct {
	Line string `json:"line"`
}

// EnsureImageInput names the image a node must have.
type EnsureImageInput struct {
	Image string `json:"image"`
	// Build is how the recipe builds the image (builder, build_args), for
	// the error of a node that lacks it.
	Build string `json:"build,omitempty"`
	// Resolve: a pinned repo:tag@sha256:D this node has only under its
	// tag (moved here: `docker load` sets no repo digest) is reported
	// Unpinned with its ID instead of missing; the workflow accepts it
	// only with the ID of the nodes that carry the digest.
	Resolve bool `json:"resolve,omitempty"`
}

// EnsureImageResult is the image found.
type EnsureImageResult struct {
	Node   string `json:"node"`
	ID     string `json:"id"`
	Digest string `json:"digest,omitempty"`
	// Unpinned: found under the pinned reference's tag without its digest
	// (EnsureImageInput.Resolve).
	Unpinned bool `json:"unpinned,omitempty"`
}

// BeforeServeInput runs a lane's hooks on one node.
type BeforeServeInput struct {
	Lane  string         `json:"lane"`
	Rank  int            `json:"rank"`
	Hooks contract.Hooks `json:"hooks"`
	// Staging are the lane's staging blocks: a clear path may never be or
	// contain one of their destinations or exports.
	Staging []contract.Staging `json:"staging,omitempty"`
}

// HookOutput is one hook's captured, trimmed output.
type HookOutput struct {
	Command string `json:"command"`
	Exit    int    `json:"exit"`
	Output  string `json:"output,omitempty"`
}

// BeforeServeResult is every hook's output, kept in history.
type BeforeServeResult struct {
	Node    string       `json:"node"`
	Outputs []HookOutput `json:"outputs,omitempty"`
	// Cleared are the clear paths removed (or found absent), with counts.
	Cleared []contract.ClearedPath `json:"cleared,omitempty"`
}

// PostExecInput runs a lane's post_exec (rendered) in its head
// container on this node, in order, stopping at the first failure.
type PostExecInput struct {
	Lane      string   `json:"lane"`
	Container string   `json:"container"`
	Commands  []string `json:"commands"`
	// Timeout bounds each command.
	Timeout contract.Duration `json:"timeout,omitempty"`
}

// PostCommandsInput runs a lane's post_commands (rendered) on the
// control host, in order, stopping at the first failure.
type PostCommandsInput struct {
	Lane     string   `json:"lane"`
	Commands []string `json:"commands"`
	// Timeout bounds each command.
	Timeout contract.Duration `json:"timeout,omitempty"`
}

// PostHooksResult is every post hook's output (masked), kept in history.
type PostHooksResult struct {
	Node    string       `json:"node,omitempty"`
	Outputs []HookOutput `json:"outputs,omitempty"`
}

// StartRankInput starts one rank's container.
type StartRankInput struct {
	Lane       string            `json:"lane"`
	RecipeHash string            `json:"recipe_hash"`
	Plan       contract.NodePlan `json:"plan"`
	// ImageID is the image ID the serve step's image check resolved on
	// this node (a pinned image's plans only): the container is created
	// from it, since a pinned image moved here has no repo digest to be
	// found by.
	ImageID string `json:"image_id,omitempty"`
}

// StartRankResult is the container started (or found already running).
type StartRankResult struct {
	Node    string `json:"node"`
	Rank    int    `json:"rank"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	Created bool   `json:"created"`
}

// StopLaneInput stops a lane's containers on one node; All stops every
// sparklane container there (stop --cluster).
type StopLaneInput struct {
	Lane    string            `json:"lane,omitempty"`
	All     bool              `json:"all,omitempty"`
	Timeout contract.Duration `json:"timeout,omitempty"`
}

// StopLaneResult lists what was stopped; the stop was verified.
type StopLaneResult struct {
	Node    string   `json:"node"`
	Stopped []string `json:"stopped"`
}

// InspectLaneInput asks for a lane's rank containers on one node.
type InspectLaneInput struct {
	Lane  string `json:"lane"`
	Lines int    `json:"lines,omitempty"`
}

// RankState is one rank container's state.
type RankState struct {
	Node     string   `json:"node"`
	Rank     int      `json:"rank"`
	Name     string   `json:"name"`
	State    string   `json:"state"`
	ExitCode int      `json:"exit_code"`
	Logs     []string `json:"logs,omitempty"`
}

// InspectLaneResult is every rank on the node.
type InspectLaneResult struct {
	Node  string      `json:"node"`
	Ranks []RankState `json:"ranks"`
}

// ResolveLaneInput asks the control worker to read a lane's recipe.
type ResolveLaneInput struct {
	Lane string `json:"lane"`
	// Cluster is where a recipe without a cluster of its own (a sparkrun
	// recipe started with --cluster) ran: a rollback renders it there, not
	// on default_cluster. A recipe's own cluster wins.
	Cluster   string            `json:"cluster,omitempty"`
	Overrides map[string]string `json:"overrides,omitempty"`
}

// ResolveLaneResult is the recipe snapshot and its rendered plan.
type ResolveLaneResult struct {
	Recipe contract.Recipe   `json:"recipe"`
	Plan   contract.LanePlan `json:"plan"`
	// MemoryFit is the lane's memory fit when it does not fit its nodes
	// (the arithmetic; internal/engine/memfit), else empty. A lane resolved here
	// ran before (a rollback) or is only verified, so it is reported,
	// never refused: the starter refuses a new lane before its run.
	MemoryFit string `json:"memory_fit,omitempty"`
}

// WaitReadyInput waits for a lane's head to answer.
type WaitReadyInput struct {
	Plan   contract.LanePlan `json:"plan"`
	Path   string            `json:"path,omitempty"`
	Budget contract.Duration `json:"budget"`
	// LogSignatures must all appear in the head rank's log before ready.
	LogSignatures []string `json:"log_signatures,omitempty"`
	// APIKeyEnv names the control worker's variable holding the engine's
	// API key (the name only: the key never enters history).
	APIKeyEnv string `json:"api_key_env,omitempty"`
}

// WaitReadyResult says how long loading took.
type WaitReadyResult struct {
	BaseURL string  `json:"base_url"`
	Model   string  `json:"model"`
	Seconds float64 `json:"seconds"`
}

// SmokeInput runs the recipe's smoke prompts.
type SmokeInput struct {
	BaseURL string           `json:"base_url"`
	Model   string           `json:"model"`
	Prompts []contract.Smoke `json:"prompts"`
	// APIKeyEnv: as in WaitReadyInput.
	APIKeyEnv string `json:"api_key_env,omitempty"`
}

// SmokeAnswer is one prompt's answer.
type SmokeAnswer struct {
	Prompt string `json:"prompt"`
	Expect string `json:"expect"`
	Answer string `json:"answer"`
	OK     bool   `json:"ok"`
}

// SmokeResult is every smoke prompt's answer.
type SmokeResult struct {
	Answers []SmokeAnswer `json:"answers"`
}

// DecodeProbeInput shapes the decode probe.
type DecodeProbeInput struct {
	// Lane labels the probe's metrics (empty in runs recorded before).
	Lane         string `json:"lane,omitempty"`
	BaseURL      string `json:"base_url"`
	Model        string `json:"model"`
	PromptTokens int    `json:"prompt_tokens"`
	MaxTokens    int    `json:"max_tokens"`
	// ModelType embedding or reranker probes the lane's own endpoint
	// instead of a completion (those engines have none).
	ModelType string `json:"model_type,omitempty"`
	// APIKeyEnv: as in WaitReadyInput.
	APIKeyEnv string `json:"api_key_env,omitempty"`
}

// DecodeProbeResult is the measured speed.
type DecodeProbeResult struct {
	DecodeTPS        float64 `json:"decode_tps"`
	PrefillTPS       float64 `json:"prefill_tps"`
	TTFTSeconds      float64 `json:"ttft_seconds"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	// Pool is the probe of an embedding or reranker lane (no decode).
	Pool *contract.PoolProbe `json:"pool,omitempty"`
}

// VerifyReportInput is what a verify run found, for its short report.
type VerifyReportInput struct {
	Blocks     []VerifyBlockResult `json:"blocks"`
	Repaired   []StageBlockResult  `json:"repaired,omitempty"`
	Failures   []string            `json:"failures,omitempty"`
	WorkflowID string              `json:"workflow_id"`
	RunID      string              `json:"run_id"`
}

// BenchInput runs the bench step against a serving lane and writes the
// report bundle.
type BenchInput struct {
	Recipe   contract.Recipe   `json:"recipe"`
	Plan     contract.LanePlan `json:"plan"`
	BaseURL  string            `json:"base_url"`
	Model    string            `json:"model"`
	Label    string            `json:"label,omitempty"`
	Parallel int               `json:"parallel,omitempty"`
	// Tokenizer is a path passed to an external harness ({tokenizer}).
	Tokenizer string `json:"tokenizer,omitempty"`
	// Seed and Mode override the recipe's [bench] seed and mode for this
	// run (starter bench --seed, --mode); nil and "" keep the recipe's.
	Seed *int64 `json:"seed,omitempty"`
	Mode string `json:"mode,omitempty"`
	// Baseline is "latest", a report ID, or "" for none.
	Baseline   string `json:"baseline,omitempty"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	// Staging summarises the ledgers for the report.
	Staging []StageBlockResult `json:"staging,omitempty"`
	Decode  *DecodeProbeResult `json:"decode,omitempty"`
}

// BenchResult points at the report written.
type BenchResult struct {
	ReportID string `json:"report_id"`
	MD       string `json:"md"`
	JSON     string `json:"json"`
	// Verdict is neutral | improvement | regression | "" without a baseline.
	Verdict string `json:"verdict,omitempty"`
	Summary string `json:"summary"`
	// Warnings are the verdict's comparability warnings (another harness
	// version, scenario pool, mode or seed than the baseline's).
	Warnings []string `json:"warnings,omitempty"`
}

// DiskInput names the staged blocks the control side knows of for this
// node (every lane's recipe that places the node); the node worker reads
// its own disk, so a remote node is listed the same as a local one.
type DiskInput struct {
	Blocks []contract.DiskBlock `json:"blocks"`
	// Prune, when set, removes blocks (DiskPrune only).
	Prune *contract.PruneSpec `json:"prune,omitempty"`
	// Images, when set, also lists the node's images: each lane's recipe
	// image reference → the lanes naming it (an LRU prune with
	// Prune.Images removes only images no lane names and no container uses).
	Images map[string][]string `json:"images,omitempty"`
}

// DiskResult is one node's roots and blocks, and the lanes running here
// (whose blocks a prune never takes).
type DiskResult struct {
	Node    string              `json:"node"`
	Roots   []contract.DiskRoot `json:"roots"`
	Running []string            `json:"running,omitempty"`
	// Prune is the prune's outcome (DiskPrune only).
	Prune *contract.PruneResult `json:"prune,omitempty"`
	// Images are the node's images (DiskInput.Images set), ImageError why
	// they could not be listed, ImagePrune an LRU prune's part on them.
	Images     []contract.ImageListed `json:"images,omitempty"`
	ImageError string                 `json:"image_error,omitempty"`
	ImagePrune *contract.ImagePrune   `json:"image_prune,omitempty"`
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

// PowerStepInput names a node or [[devices]] entry; its power settings are
// read from the config here, so no token ever enters a workflow input.
type PowerStepInput struct {
	Target   string            `json:"target"`
	Timeout  contract.Duration `json:"timeout,omitempty"`
	Bound    contract.Duration `json:"bound,omitempty"`
	Interval contract.Duration `json:"interval,omitempty"`
}

// PowerStepResult is one step's outcome, in words for the UI.
type PowerStepResult struct {
	Target  string `json:"target"`
	Step    string `json:"step"`
	Skipped bool   `json:"skipped,omitempty"`
	Detail  string `json:"detail,omitempty"`
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

// ---- keeper (one per cluster: keeper/CLUSTER) ----

// KeepPolicy is how a keeper watches and heals its lane. Zero fields take
// the defaults (KeepDefault*): recipes and the config set them with
// [keep] interval, restarts, window.
type KeepPolicy struct {
	// Interval is the time between two checks of the lane.
	Interval contract.Duration `json:"interval,omitempty"`
	// Restarts is how many whole-lane restarts Window may hold; one more
	// stops the lane as a crash loop instead.
	Restarts int               `json:"restarts,omitempty"`
	Window   contract.Duration `json:"window,omitempty"`
	// Grace is the wait before a failed check's one re-probe (the
	// check's retry policy): the lane's probe grace.
	Grace contract.Duration `json:"grace,omitempty"`
	// ChecksPerRun bounds one run's history: after that many checks the
	// keeper continues as new, carrying its restart history.
	ChecksPerRun int `json:"checks_per_run,omitempty"`
	// Off: the lane is not kept (no keeper is started).
	Off bool `json:"off,omitempty"`
}

// KeeperRestart is one whole-lane restart the keeper made (or refused).
type KeeperRestart struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	// OK is true when the lane answered its probes again.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// KeeperInput is what a keeper keeps: the lane exactly as its cutover or
// up ran it (recipe and plan from that run's history), the policy, and
// what a continued run carries over.
type KeeperInput struct {
	Cluster string            `json:"cluster"`
	Recipe  contract.Recipe   `json:"recipe"`
	Plan    contract.LanePlan `json:"plan"`
	Policy  KeepPolicy        `json:"policy"`
	Pickup  contract.Duration `json:"pickup,omitempty"`
	// OutageBudget is how long a heal waits for a node whose worker is gone.
	OutageBudget contract.Duration `json:"outage_budget,omitempty"`
	// StartedBy is the run that started keeping (cutover/C, up/C).
	StartedBy string `json:"started_by,omitempty"`
	// Carried across continue-as-new: restarts of the last day, the
	// paused and stopped states and the last reason.
	Restarts   []KeeperRestart `json:"restarts,omitempty"`
	Paused     bool            `json:"paused,omitempty"`
	Stopped    string          `json:"stopped,omitempty"`
	LastReason string          `json:"last_reason,omitempty"`
	// BudgetFrom: restarts before it do not count against the budget
	// (keep on after a crash loop starts a fresh budget).
	BudgetFrom time.Time `json:"budget_from,omitempty"`
	Checks     int       `json:"checks,omitempty"`
	// LastCheck and Health carry the last check over, so status reads the
	// same across a continue-as-new.
	LastCheck time.Time `json:"last_check,omitempty"`
	Health    string    `json:"health,omitempty"`
	// BootIDs is each node's boot id as its last check reported it: a
	// node that answers with another one rebooted (its staged blocks are
	// verified before the lane starts there again).
	BootIDs map[string]string `json:"boot_ids,omitempty"`
	// Verify lists the nodes whose staged blocks are verified (repairing
	// what drifted) before the next restart: rebooted, or powered on.
	Verify []string `json:"verify,omitempty"`
	// Off says why the keeper idles "off by schedule" (a node of the lane
	// that sparklane powered down), OffNodes which nodes; Lost says why it
	// stopped healing (a node gone past its outage budget), LostNodes which.
	Off       string   `json:"off,omitempty"`
	OffNodes  []string `json:"off_nodes,omitempty"`
	Lost      string   `json:"lost,omitempty"`
	LostNodes []string `json:"lost_nodes,omitempty"`
}

// Keeper control actions (the keeper's update, starter keep, stop, cutover).
const (
	KeepEnd    = "end"
	KeepPause  = "off"
	KeepResume = "on"
)

// KeeperControlUpdate is the keeper's update: KeeperControl in,
// KeeperStatus out. "end" returns once the keeper has stopped healing and
// released its node leases, so the caller's run gets them.
const KeeperControlUpdate = "keeper-control"

// KeeperRankDiedSignal is sent to the keepers of a node's clusters by the
// node worker when Docker reports a rank container of a lane died
// (KeeperRankDied): the keeper checks at once instead of at its next
// interval.
const KeeperRankDiedSignal = "rank-died"

// KeeperRankDied names the rank container that died.
type KeeperRankDied struct {
	Lane      string `json:"lane"`
	Node      string `json:"node"`
	Container string `json:"container"`
	Rank      int    `json:"rank"`
	ExitCode  string `json:"exit_code,omitempty"`
}

// KeeperStatusQuery answers a KeeperStatus.
const KeeperStatusQuery = "keeper-status"

// KeeperControl asks a keeper to end, pause or resume.
type KeeperControl struct {
	Action string `json:"action"`
	// By is the run (or "starter keep") asking; Reason is recorded.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Keeper states.
const (
	KeeperWatching  = "watching"
	KeeperHealing   = "healing"
	KeeperPaused    = "paused"
	KeeperCrashLoop = "stopped: crash loop"
	// KeeperWaiting: a node's worker is gone; the keeper waits for it
	// within the node outage budget (a reboot).
	KeeperWaiting = "waiting for node"
	// KeeperOff: a node of the lane is off on purpose (power off): no
	// healing until it is powered on again.
	KeeperOff = "off by schedule"
	// KeeperNodeLost: a node stayed gone past its outage budget: the
	// keeper stopped healing, said so, and watches for the node.
	KeeperNodeLost = "stopped: node gone"
	KeeperEnded    = "ended"
)

// KeeperStatus is what a keeper says about itself (status, starter keep).
type KeeperStatus struct {
	Cluster  string `json:"cluster"`
	Lane     string `json:"lane"`
	PlanHash string `json:"plan_hash,omitempty"`
	State    string `json:"state"`
	// Health is up, down or unknown (no check yet).
	Health    string          `json:"health"`
	LastCheck time.Time       `json:"last_check,omitempty"`
	Checks    int             `json:"checks"`
	Restarts  []KeeperRestart `json:"restarts,omitempty"`
	// Restarts24h counts the restarts of the 24 hours before LastCheck
	// (workflow time).
	Restarts24h int    `json:"restarts_24h"`
	LastReason  string `json:"last_reason,omitempty"`
	StartedBy   string `json:"started_by,omitempty"`
	// Input is what the keeper keeps, so a run that ended it can start it
	// again (a cutover that rolled back).
	Input *KeeperInput `json:"input,omitempty"`
}

// CheckHeadInput asks the head of a lane whether it answers.
type CheckHeadInput struct {
	Lane string `json:"lane"`
	// Head is the plan reduced to what names the head's URL.
	Head      contract.LanePlan `json:"head"`
	Path      string            `json:"path"`
	APIKeyEnv string            `json:"api_key_env,omitempty"`
}

// CheckHeadResult is the head's answer.
type CheckHeadResult struct {
	URL     string  `json:"url"`
	Status  int     `json:"status"`
	Seconds float64 `json:"seconds"`
}

// CheckRanksInput asks a node for the state of the lane's ranks on it.
type CheckRanksInput struct {
	Lane  string `json:"lane"`
	Ranks []int  `json:"ranks"`
}

// CheckRanksResult is each rank's container state (running when the
// activity succeeds). A RankDown failure carries it as its details.
type CheckRanksResult struct {
	Node  string      `json:"node"`
	Ranks []RankState `json:"ranks"`
	// BootID is the node's /proc/sys/kernel/random/boot_id: another one
	// than the last check's means the node rebooted.
	BootID string `json:"boot_id,omitempty"`
}

// KeeperNotifyInput is a keeper's notice to the operator: the config's
// [keep] notify (a command run on the control host, or a webhook URL
// POSTed JSON) is told the cluster, lane, state and reason; never a
// secret.
type KeeperNotifyInput struct {
	Cluster string `json:"cluster"`
	Lane    string `json:"lane"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}

// KeeperNotifyResult says what was notified ("" when [keep] notify is unset).
type KeeperNotifyResult struct {
	Notified string `json:"notified,omitempty"`
}

// StartKeeperResult names the keeper run started.
type StartKeeperResult struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
}

// EndKeepersInput ends the keepers of every cluster that shares a node
// with Nodes (only the one keeping Lane, when set).
type EndKeepersInput struct {
	Nodes  []string `json:"nodes"`
	Lane   string   `json:"lane,omitempty"`
	By     string   `json:"by"`
	Reason string   `json:"reason"`
}

// EndKeepersResult lists the keepers ended, as they were.
type EndKeepersResult struct {
	Ended []KeeperStatus `json:"ended,omitempty"`
}

// KeeperMarkInput records a keeper's event in the control service's
// metrics: a restart, or the lane's health changing.
type KeeperMarkInput struct {
	Cluster string `json:"cluster"`
	Lane    string `json:"lane"`
	Restart bool   `json:"restart,omitempty"`
	// Up, when set, is the lane's health (sparklane_lane_up).
	Up *bool `json:"up,omitempty"`
}

// FetchRepoInput downloads one repo of a lane's fetch plan from the Hub
// into the NAS (FetchActivities.FetchRepo, on the fetch node's queue).
// It carries no token: the worker reads TokenFile, or its environment.
type FetchRepoInput struct {
	Lane string             `json:"lane"`
	Repo contract.FetchRepo `json:"repo"`
	// Endpoint and TokenFile are the plan's (contract.FetchPlan).
	Endpoint  string `json:"endpoint,omitempty"`
	TokenFile string `json:"token_file,omitempty"`
	// DryRun lists the repo and says what is missing; writes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// FetchProgress is FetchRepo's heartbeat: files and bytes in place (the
// same JSON names as contract.StageProgress, so the starter's progress bars read
// both) and the bytes received over HTTP in this attempt.
type FetchProgress struct {
	Repo       string `json:"repo"`
	FilesTotal int    `json:"files_total"`
	FilesDone  int    `json:"files_done"`
	BytesTotal int64  `json:"bytes_total"`
	BytesDone  int64  `json:"bytes_done"`
	Downloaded int64  `json:"downloaded"`
}

// FetchRepoResult is what one repo's fetch found and did (or, in a dry
// run, would do).
type FetchRepoResult struct {
	// Node is the worker that fetched: a node's name, or "control".
	Node     string `json:"node"`
	Block    string `json:"block"`
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	// Commit is the sha the revision resolved to; SnapshotDir is where
	// its files are linked on the NAS.
	Commit      string `json:"commit"`
	SnapshotDir string `json:"snapshot_dir"`
	// Files and Bytes are the snapshot's files after the skip globs;
	// Skipped* matched a glob and were never requested.
	Files        int   `json:"files"`
	Bytes        int64 `json:"bytes"`
	SkippedFiles int   `json:"skipped_files"`
	SkippedBytes int64 `json:"skipped_bytes"`
	// MissingFiles and MissingBytes are what the NAS lacked when the
	// fetch began (what a dry run would download).
	MissingFiles int   `json:"missing_files"`
	MissingBytes int64 `json:"missing_bytes"`
	// Downloaded* were received over HTTP by the last attempt; Resumed
	// kept from partial downloads; Reused blobs already complete.
	DownloadedFiles int     `json:"downloaded_files"`
	DownloadedBytes int64   `json:"downloaded_bytes"`
	ResumedBytes    int64   `json:"resumed_bytes"`
	ReusedFiles     int     `json:"reused_files"`
	Seconds         float64 `json:"seconds"`
	DryRun          bool    `json:"dry_run,omitempty"`
}

// ImageInventoryInput asks a node what it has of a lane's image.
type ImageInventoryInput struct {
	Image string `json:"image"`
	// DiffIDs, when given (the image's layers, from a node that has it),
	// ask how many of them a node without the image already has.
	DiffIDs []string `json:"diff_ids,omitempty"`
	// Want, when set, is the image ID the run moves (one it just built):
	// a node with another image under the tag reports it lacks the image.
	Want string `json:"want,omitempty"`
}

// ImageInventoryResult is one node's inventory of the image, and where
// it would serve a transfer to the next node.
type ImageInventoryResult struct {
	contract.ImageInventory
	// Addr is the node's address:image_port ("" when the node has no
	// address or no fleet identity: it cannot take part in a transfer).
	Addr string `json:"addr,omitempty"`
	// NoTransfer says why Addr is empty.
	NoTransfer string `json:"no_transfer,omitempty"`
}

// TransferImageInput is one chain member's part of an image transfer
// (images.Plan): the source sends, the others receive from Upstream and
// forward to Downstream.
type TransferImageInput struct {
	Spec contract.ImageSpec `json:"spec"`
	// Have is how many of the image's layers this node had when planned.
	Have         int    `json:"have,omitempty"`
	Upstream     string `json:"upstream,omitempty"`
	UpstreamAddr string `json:"upstream_addr,omitempty"`
	Downstream   string `json:"downstream,omitempty"`
	// Lane labels the bytes received in sparklane_image_bytes_total (runs
	// before it: "").
	Lane string `json:"lane,omitempty"`
}

// TransferImageResult is what the member moved.
type TransferImageResult struct {
	contract.ImageMoved
}
