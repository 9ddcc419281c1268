package contract

import "encoding/json"

// The staging engines' results and progress as they travel: the same JSON
// as internal/engine/staging's Result, VerifyResult and Progress, owned here
// so an engine's rename never changes a history (activities convert).

// BlockResult is what one staging pass of a block did on a node.
type BlockResult struct {
	CopiedFiles   int     `json:"copied_files"`
	CopiedBytes   int64   `json:"copied_bytes"`
	VerifiedFiles int     `json:"verified_files"`
	AdoptedFiles  int     `json:"adopted_files"`
	SkippedFiles  int     `json:"skipped_files"`
	SkippedBytes  int64   `json:"skipped_bytes,omitempty"`
	Links         int     `json:"links"`
	TotalFiles    int     `json:"total_files"`
	TotalBytes    int64   `json:"total_bytes"`
	Rows          int64   `json:"rows,omitempty"`
	Seconds       float64 `json:"seconds"`
	// DryRun is true when nothing was written; the counts are the plan.
	DryRun bool `json:"dry_run,omitempty"`
	// Exports lists the export trees made (node-local paths).
	Exports []string `json:"exports,omitempty"`
	// ByteSources is set when the block was relayed between nodes.
	ByteSources
	// Relay says how the relay went when it was on.
	Relay *RelayReport `json:"relay,omitempty"`
}

// ByteSources says where a relayed block's bytes came from: the NAS is read
// about once per lane, the peers carry the rest.
type ByteSources struct {
	// FromNAS is the bytes read from the NAS.
	FromNAS int64 `json:"from_nas,omitempty"`
	// FromPeers is the bytes received from each peer node, by name.
	FromPeers map[string]int64 `json:"from_peers,omitempty"`
}

// RelayReport is the relay's account of one node's pass: files refetched
// from the NAS because a peer sent them wrong, and peers given up on.
type RelayReport struct {
	Files        int               `json:"files"`
	Present      int               `json:"present"`
	Refetched    int               `json:"refetched,omitempty"`
	PeerFailures map[string]string `json:"peer_failures,omitempty"`
	Resumed      int64             `json:"resumed,omitempty"`
	// Error is why the relay stopped early, when it did.
	Error string `json:"error,omitempty"`
}

// BlockVerify is a verify-only pass over a staged block.
type BlockVerify struct {
	OK int `json:"ok"`
	// Bad and Missing are the paths at fault; past ListLimit, only the
	// first ListLimit travel (the counts say how many).
	Bad     []string `json:"bad"`
	Missing []string `json:"missing"`
	// BadCount and MissingCount are the full counts when the lists were
	// cut (0: the lists are whole).
	BadCount     int `json:"bad_count,omitempty"`
	MissingCount int `json:"missing_count,omitempty"`
	// ListFile is the file on the node holding the full lists, when cut.
	ListFile string `json:"list_file,omitempty"`
	// Full is true when whole contents were hashed (--full).
	Full bool `json:"full"`
}

// ListLimit is how many paths of each list a BlockVerify carries through
// Temporal: enough to act on, small enough that 20,000 bad files cost a
// few kilobytes of history.
const ListLimit = 20

// Clean reports whether nothing is bad or missing.
func (v BlockVerify) Clean() bool { return v.NBad() == 0 && v.NMissing() == 0 }

// NBad is how many paths are bad, whether or not the list was cut.
func (v BlockVerify) NBad() int { return max(v.BadCount, len(v.Bad)) }

// NMissing is how many paths are missing, whether or not the list was cut.
func (v BlockVerify) NMissing() int { return max(v.MissingCount, len(v.Missing)) }

// MarshalJSON cuts each list to ListLimit paths and records the full
// counts, so no code path can put an unbounded list into a payload. It is
// pure (no I/O): workflows marshal it too.
func (v BlockVerify) MarshalJSON() ([]byte, error) {
	type plain BlockVerify
	p := plain(v)
	if len(p.Bad) > ListLimit {
		p.BadCount, p.Bad = max(p.BadCount, len(p.Bad)), p.Bad[:ListLimit]
	}
	if len(p.Missing) > ListLimit {
		p.MissingCount, p.Missing = max(p.MissingCount, len(p.Missing)), p.Missing[:ListLimit]
	}
	return json.Marshal(p)
}

// StageProgress is a staging pass's heartbeat: what the starter's progress
// bars show and where a retried pass resumes.
type StageProgress struct {
	FilesTotal int   `json:"files_total"`
	FilesDone  int   `json:"files_done"`
	BytesTotal int64 `json:"bytes_total"`
	BytesDone  int64 `json:"bytes_done"`
	// InFlight are files being copied and the offset up to which their temp
	// file is complete and fsynced.
	InFlight []FileOffset `json:"in_flight,omitempty"`
	// sparse-rows: rows.
	RowsTotal int64 `json:"rows_total,omitempty"`
	RowsDone  int64 `json:"rows_done,omitempty"`
	// Layer and NextRow: where a sparse-rows pack resumes.
	Layer   int   `json:"layer,omitempty"`
	NextRow int64 `json:"next_row,omitempty"`
	// Paused is set while a test fault point holds the pass.
	Paused bool `json:"paused,omitempty"`
	// Beside are the lanes serving on the node while the pass stages
	// there: its writes are paced ([staging] serving_rate,
	// min_available), so an operator sees why it may be slower.
	Beside []string `json:"beside,omitempty"`
	// Waiting is why the pass's writes wait now ("paused: MemAvailable
	// 5.1 GiB under min_available 8.0 GiB"); empty while they go.
	Waiting string `json:"waiting,omitempty"`
	// ByteSources: where the bytes came from when the block is relayed.
	ByteSources
}

// FileOffset is a file being copied and how much of its temp file is
// complete and fsynced.
type FileOffset struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
}

// Truncated reports whether the lists carry fewer paths than the counts.
func (v BlockVerify) Truncated() bool { return v.NBad() > len(v.Bad) || v.NMissing() > len(v.Missing) }

// StageBlockInput runs one [[staging]] block on one node.
type StageBlockInput struct {
	Lane   string  `json:"lane"`
	Block  Staging `json:"block"`
	Rank   int     `json:"rank"`
	TP     int     `json:"tp"`
	Force  bool    `json:"force,omitempty"`
	DryRun bool    `json:"dry_run,omitempty"`
	// Resume is the progress an earlier activity heartbeated before its
	// node went away; the workflow passes it to the new activity it starts
	// once the node is back (heartbeat details do not cross activities).
	Resume *StageProgress `json:"resume,omitempty"`
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
	Blocks []DiskBlock `json:"blocks"`
	// MakeRoom prunes least recently served blocks of other, not running
	// lanes until min_free is met (--make-room), then stages.
	MakeRoom bool `json:"make_room,omitempty"`
}

// RelayInput is a block's relay group.
type RelayInput struct {
	Nodes []string          `json:"nodes"`
	Peers map[string]string `json:"peers"`
}

// StageBlockResult is one block's outcome on one node.
type StageBlockResult struct {
	Node   string      `json:"node"`
	Block  string      `json:"block"`
	Kind   string      `json:"kind"`
	Result BlockResult `json:"result"`
	// Verified is the post-stage verify when the input asked for it.
	Verified *VerifyBlockResult `json:"verified,omitempty"`
	// Error and ErrorType are a dry run's refusal of the block (what a
	// stage would stop with: "repo … is not in src", SourceMissing); the
	// dry run goes on with the next block and completes.
	Error     string `json:"error,omitempty"`
	ErrorType string `json:"error_type,omitempty"`
}

// VerifyBlockInput verifies one block on one node without writing.
type VerifyBlockInput struct {
	Lane  string  `json:"lane"`
	Block Staging `json:"block"`
	Rank  int     `json:"rank"`
	TP    int     `json:"tp"`
	Full  bool    `json:"full,omitempty"`
}

// VerifyBlockResult is one block's verify outcome on one node.
type VerifyBlockResult struct {
	Lane   string      `json:"lane,omitempty"`
	Node   string      `json:"node"`
	Block  string      `json:"block"`
	Kind   string      `json:"kind"`
	Result BlockVerify `json:"result"`
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

// VerifyReportInput is what a verify run found, for its short report.
type VerifyReportInput struct {
	Blocks     []VerifyBlockResult `json:"blocks"`
	Repaired   []StageBlockResult  `json:"repaired,omitempty"`
	Failures   []string            `json:"failures,omitempty"`
	WorkflowID string              `json:"workflow_id"`
	RunID      string              `json:"run_id"`
}

// Stage modes (--stage).
const (
	StageAuto  = "auto"
	StageSkip  = "skip"
	StageForce = "force"
)

// StageNodeInput stages every block of a lane on one node.
type StageNodeInput struct {
	Lane   string    `json:"lane"`
	Node   string    `json:"node"`
	Rank   int       `json:"rank"`
	TP     int       `json:"tp"`
	Blocks []Staging `json:"blocks"`
	Mode   string    `json:"mode"`
	DryRun bool      `json:"dry_run,omitempty"`
	// Verify runs a verify-only pass after staging; a mismatch fails.
	Verify bool `json:"verify,omitempty"`
	// PickupTimeout bounds schedule-to-start on the node's queue.
	PickupTimeout Duration `json:"pickup_timeout,omitempty"`
	// Heartbeat is the staging activities' heartbeat timeout: how soon a
	// killed node worker is noticed and its copy retried (0: one minute).
	Heartbeat Duration `json:"heartbeat,omitempty"`
	// OutageBudget is how long the node may be gone (no worker) before the
	// stage fails naming it (0: DefaultOutageBudget).
	OutageBudget Duration `json:"outage_budget,omitempty"`
	// Relay, when set, relays the hub-mirror blocks between the nodes of
	// this run (an input field: no change to the command sequence).
	Relay *RelayInput `json:"relay,omitempty"`
	// Room lets a block short of min_free name (or, with MakeRoom, prune)
	// other lanes' least recently served blocks (an input field: no
	// change to the command sequence).
	Room *DiskRoom `json:"room,omitempty"`
}

// StageNodeResult is what one node's staging did.
type StageNodeResult struct {
	Node     string              `json:"node"`
	Blocks   []StageBlockResult  `json:"blocks"`
	Verified []VerifyBlockResult `json:"verified,omitempty"`
}

// StageInput stages a lane on every node of its cluster (or one node).
type StageInput struct {
	Plan   LanePlan  `json:"plan"`
	Blocks []Staging `json:"blocks"`
	// Only restricts staging to one node (--node).
	Only   string   `json:"only,omitempty"`
	Mode   string   `json:"mode"`
	DryRun bool     `json:"dry_run,omitempty"`
	Verify bool     `json:"verify,omitempty"`
	Pickup Duration `json:"pickup,omitempty"`
	// Heartbeat is passed to every StageNode (0: one minute).
	Heartbeat Duration `json:"heartbeat,omitempty"`
	// OutageBudget is passed to every StageNode (0: DefaultOutageBudget).
	OutageBudget Duration `json:"outage_budget,omitempty"`
	// Room is passed to every StageNode (stage --make-room).
	Room *DiskRoom `json:"room,omitempty"`
	// Fetch, when set, downloads these repos from the Hub into the NAS
	// first (a Fetch child, fetch/LANE): stage --fetch, or blocks with
	// fetch = true. Behind versionStageFetch.
	Fetch *FetchPlan `json:"fetch,omitempty"`
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

// StageResult collects every node's result.
type StageResult struct {
	Lane  string            `json:"lane"`
	Nodes []StageNodeResult `json:"nodes"`
	// Built is the image build the image step ran, if any.
	Built *BuildImageResult `json:"built,omitempty"`
	// Pulled is the registry pull the image step ran, if any.
	Pulled *PullImageResult `json:"pulled,omitempty"`
	// Fetch is the Fetch child's result, when the stage fetched first.
	Fetch *FetchResult `json:"fetch,omitempty"`
	// Images is the image step, per node (runs from versionStageImage on).
	Images []ImageNodeResult `json:"images,omitempty"`
	// DryRun marks a dry run's result; Error and ErrorType are the first
	// step it found would stop a stage (a dry run takes every step and
	// completes, so it never leaves a failed run behind).
	DryRun    bool   `json:"dry_run,omitempty"`
	Error     string `json:"error,omitempty"`
	ErrorType string `json:"error_type,omitempty"`
}

// VerifyLane is one lane's blocks to verify.
type VerifyLane struct {
	Plan   LanePlan  `json:"plan"`
	Blocks []Staging `json:"blocks"`
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
	LaneNames []string `json:"lane_names,omitempty"`
	Only      string   `json:"only,omitempty"`
	Pickup    Duration `json:"pickup,omitempty"`
	// ReportDir, when set, receives a short drift report.
	Report bool `json:"report,omitempty"`
}

// VerifyWorkflowResult lists every block's outcome.
type VerifyWorkflowResult struct {
	Blocks   []VerifyBlockResult `json:"blocks"`
	Repaired []StageBlockResult  `json:"repaired,omitempty"`
	Drift    bool                `json:"drift"`
	Report   string              `json:"report,omitempty"`
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

// StageRoomInput asks a node whether the lane's blocks fit beside what is
// there (a cutover that would stage the next lane ahead, while the
// current one serves): the bytes each block still has to write, against
// the free space of its filesystem.
type StageRoomInput struct {
	Lane   string    `json:"lane"`
	Blocks []Staging `json:"blocks"`
	Rank   int       `json:"rank"`
	TP     int       `json:"tp"`
	// Room, with MakeRoom, counts what pruning least recently served
	// blocks of lanes that do not run would free (--make-room).
	Room *DiskRoom `json:"room,omitempty"`
}

// StageRoomResult is one node's answer: per filesystem what is free and
// what the lane needs there; OK when every one has room (after the
// pruning --make-room would do), else Why says what is short, naming the
// node, the bytes and the lanes running beside.
type StageRoomResult struct {
	Node  string         `json:"node"`
	Roots []StageRoomFit `json:"roots,omitempty"`
	// Running are the lanes serving on the node (what staging runs beside).
	Running []string `json:"running,omitempty"`
	OK      bool     `json:"ok"`
	Why     string   `json:"why,omitempty"`
	// AfterStop says whether the lane fits once the running lanes are
	// stopped: only when --make-room may then prune their blocks
	// (stopping a lane frees no disk by itself). A cutover that finds no
	// room ahead and none after the stop refuses before stopping anything.
	AfterStop bool `json:"after_stop,omitempty"`
}

// StageRoomFit is one filesystem of a node: its free bytes, what the
// lane's blocks there still need (to write, plus min_free's headroom) and
// what --make-room would free.
type StageRoomFit struct {
	Path     string `json:"path"`
	Free     int64  `json:"free"`
	Need     int64  `json:"need"`
	Freeable int64  `json:"freeable,omitempty"`
	// FreeableAfterStop is what --make-room would free once the running
	// lanes are stopped (their blocks too).
	FreeableAfterStop int64 `json:"freeable_after_stop,omitempty"`
}
