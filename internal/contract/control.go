package contract

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
	Recipe Recipe   `json:"recipe"`
	Plan   LanePlan `json:"plan"`
	// MemoryFit is the lane's memory fit when it does not fit its nodes
	// (the arithmetic; internal/engine/memfit), else empty. A lane resolved here
	// ran before (a rollback) or is only verified, so it is reported,
	// never refused: the starter refuses a new lane before its run.
	MemoryFit string `json:"memory_fit,omitempty"`
}

// BenchInput runs the bench step against a serving lane and writes the
// report bundle.
type BenchInput struct {
	Recipe   Recipe   `json:"recipe"`
	Plan     LanePlan `json:"plan"`
	BaseURL  string   `json:"base_url"`
	Model    string   `json:"model"`
	Label    string   `json:"label,omitempty"`
	Parallel int      `json:"parallel,omitempty"`
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
	// SwitchSeconds, StageSeconds and StageOrder are the cutover's switch
	// (CutoverResult's), for the report; zero outside a cutover.
	SwitchSeconds float64 `json:"switch_seconds,omitempty"`
	StageSeconds  float64 `json:"stage_seconds,omitempty"`
	StageOrder    string  `json:"stage_order,omitempty"`
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

// CutoverInput switches a cluster to a lane. The starter resolved and
// rendered the recipe; the snapshot travels here so the run is reproducible
// from its history alone.
type CutoverInput struct {
	Recipe Recipe   `json:"recipe"`
	Plan   LanePlan `json:"plan"`
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
	Room *DiskRoom `json:"room,omitempty"`
	// Fleet is every node of the config: a previous lane is stopped wherever
	// it runs, not only on the nodes the new lane needs.
	Fleet []string `json:"fleet,omitempty"`
	// Grace is the wait before the fleet probe's one re-probe.
	Grace  Duration `json:"grace,omitempty"`
	Pickup Duration `json:"pickup,omitempty"`
	// OutageBudget is how long a node may be gone mid-run before the
	// cutover fails naming it (0: DefaultOutageBudget).
	OutageBudget Duration `json:"outage_budget,omitempty"`
	// StopForeign stops running containers sparklane did not start that
	// hold a GPU or the lane's port on the lane's nodes (--stop-foreign);
	// without it such a node is occupied and the cutover is refused.
	StopForeign bool `json:"stop_foreign,omitempty"`
	// Keep is how the cluster's keeper keeps the lane once the cutover
	// succeeded (nil: the recipe's [keep], then the defaults).
	Keep *KeepPolicy `json:"keep,omitempty"`
	// Fetch, when set, downloads these repos from the Hub into the NAS
	// before the stage step (a Fetch child, fetch/LANE): cutover --fetch,
	// or blocks with fetch = true. Behind versionCutoverFetch.
	Fetch *FetchPlan `json:"fetch,omitempty"`
	// StageAhead is when the next lane is staged and verified while the
	// previous one still serves (behind versionStageAhead): StageAheadAuto
	// ("" too) when every node has room beside the running lane, else
	// after the stop; StageAheadAlways refuses a node without room before
	// anything stops; StageAheadNever stages after the stop.
	StageAhead string `json:"stage_ahead,omitempty"`
	// Gateways are the task queues of the gateways that front the
	// cluster (contract.GatewayQueue): the run holds, drains, routes and
	// releases its names there as named steps (behind versionGateway).
	// None: no gateway step.
	Gateways []string `json:"gateways,omitempty"`
}

// Stage-ahead modes (cutover --stage-ahead).
const (
	StageAheadAuto   = "auto"
	StageAheadAlways = "always"
	StageAheadNever  = "never"
)

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
	Built *BuildImageResult `json:"built,omitempty"`
	// Pulled is the registry pull it ran (versionStageRegistry).
	Pulled *PullImageResult    `json:"pulled,omitempty"`
	Verify []VerifyBlockResult `json:"verify,omitempty"`
	Serve  *ServeResult        `json:"serve,omitempty"`
	Bench  *BenchResult        `json:"bench,omitempty"`
	Steps  []Step              `json:"steps"`
	// StageOrder is how the lane was staged beside the previous one:
	// "ahead" (staged and verified while it served), "after stop: WHY"
	// (no room beside it, or --stage-ahead=never), or "" when no lane was
	// serving on the nodes. Room is each node's answer that decided it.
	StageOrder string            `json:"stage_order,omitempty"`
	Room       []StageRoomResult `json:"room,omitempty"`
	// SwitchSeconds is the clients' gap: the previous lane's stop to the
	// new lane's probe passed (workflow time); StageSeconds the image,
	// stage and verify steps, beside it.
	SwitchSeconds float64 `json:"switch_seconds,omitempty"`
	StageSeconds  float64 `json:"stage_seconds,omitempty"`
	// Drained are the gateways' drains of the previous lanes (what was in
	// flight, what finished, what was cut off).
	Drained []GatewayDrainResult `json:"drained,omitempty"`
}
