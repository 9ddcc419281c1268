package contract

import "time"

// KeepPolicy is how a keeper watches and heals its lane. Zero fields take
// the defaults (KeepDefault*): recipes and the config set them with
// [keep] interval, restarts, window.
type KeepPolicy struct {
	// Interval is the time between two checks of the lane.
	Interval Duration `json:"interval,omitempty"`
	// Restarts is how many whole-lane restarts Window may hold; one more
	// stops the lane as a crash loop instead.
	Restarts int      `json:"restarts,omitempty"`
	Window   Duration `json:"window,omitempty"`
	// Grace is the wait before a failed check's one re-probe (the
	// check's retry policy): the lane's probe grace.
	Grace Duration `json:"grace,omitempty"`
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
	Cluster string     `json:"cluster"`
	Recipe  Recipe     `json:"recipe"`
	Plan    LanePlan   `json:"plan"`
	Policy  KeepPolicy `json:"policy"`
	Pickup  Duration   `json:"pickup,omitempty"`
	// OutageBudget is how long a heal waits for a node whose worker is gone.
	OutageBudget Duration `json:"outage_budget,omitempty"`
	// StartedBy is the run that started keeping (cutover/C, up/C).
	StartedBy string `json:"started_by,omitempty"`
	// Carried across continue-as-new: restarts of the last day, the
	// paused and stopped states and the last reason.
	Restarts []KeeperRestart `json:"restarts,omitempty"`
	Paused   bool            `json:"paused,omitempty"`
	Stopped  string          `json:"stopped,omitempty"`
	// Held names the run that holds the keeper (KeepHold): checks go on,
	// no heal starts.
	Held       string `json:"held,omitempty"`
	LastReason string `json:"last_reason,omitempty"`
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
	// Gateways are the task queues of the gateways that front the
	// cluster (contract.GatewayQueue): the run holds, drains, routes and
	// releases its names there as named steps (behind versionGateway).
	// None: no gateway step.
	Gateways []string `json:"gateways,omitempty"`
	// BaseURL and Served are the lane's head and served model name as
	// its serve found them (a route the keeper sets again); Routed is the
	// state the keeper last left the cluster's routes in ("": serving):
	// held through a heal or a power-on, off by schedule, or down.
	BaseURL string `json:"base_url,omitempty"`
	Served  string `json:"served,omitempty"`
	Routed  string `json:"routed,omitempty"`
}

// Keeper control actions (the keeper's update, starter keep, stop, cutover).
const (
	KeepEnd    = "end"
	KeepPause  = "off"
	KeepResume = "on"
	// KeepHold: keep checking and reporting, but heal nothing: a run holds
	// the lane's nodes (a cutover staging the next lane ahead) and stops
	// the lane or releases the hold (KeepRelease) when it is done.
	KeepHold    = "hold"
	KeepRelease = "release"
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
	// KeeperHeld: watching, healing held while a run holds the lane's
	// nodes (KeepHold).
	KeeperHeld = "watching, heal held"
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
	// Checking is true while a check is under way (a rank-died signal
	// starts one at once): status shows it beside the last check.
	Checking bool `json:"checking,omitempty"`
	// Input is what the keeper keeps, so a run that ended it can start it
	// again (a cutover that rolled back).
	Input *KeeperInput `json:"input,omitempty"`
}

// CheckHeadInput asks the head of a lane whether it answers.
type CheckHeadInput struct {
	Lane string `json:"lane"`
	// Head is the plan reduced to what names the head's URL.
	Head      LanePlan `json:"head"`
	Path      string   `json:"path"`
	APIKeyEnv string   `json:"api_key_env,omitempty"`
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
	// Action is what each keeper is told: KeepEnd ("": runs recorded
	// before the field), or KeepHold / KeepRelease (a cutover that stages
	// ahead holds the keepers while the lane they keep still serves).
	Action string `json:"action,omitempty"`
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

// KeeperID is the workflow ID of cluster's keeper: one running keeper per
// cluster is Temporal's one-running-workflow-per-ID rule.
func KeeperID(cluster string) string { return "keeper/" + cluster }

// Keeper check failures (retryable: the retry policy is the re-probe).
const (
	// LaneDown: the head does not answer its health path.
	LaneDown = "LaneDown"
	// RankDown: a rank's container is not running (exited, gone).
	RankDown = "RankDown"
)

// KeeperResult is how a keeper run ended (an "end": stop, cutover, up).
type KeeperResult struct {
	Lane       string `json:"lane"`
	Cluster    string `json:"cluster"`
	Ended      string `json:"ended,omitempty"`
	Restarts   int    `json:"restarts"`
	LastReason string `json:"last_reason,omitempty"`
}
