package workflows

// Changing a workflow safely (sparklane's versioning strategy).
//
// A control worker is redeployed while cutovers wait hours on their
// children, so a new binary replays histories written by the old one.
// sparklane patches in place with workflow.GetVersion: every change to a
// workflow's command sequence (an activity, child, timer or marker added,
// removed or reordered, or a branch that changes which of them run) keeps
// the old path under workflow.DefaultVersion and takes the new one at
// version 1 (or the next number), behind a change ID named here. Changes to
// options only (timeouts, retry counts, input fields) need no gate. Once no
// run older than a gate can still be open (past the longest run plus
// retention) the old branch may be deleted and the GetVersion call kept
// with its minimum raised.
//
// The replay corpus in testdata/histories holds one real history per
// workflow type and failure path, recorded through the real server by
// internal/suites/itest (SPARKLANE_WRITE_HISTORIES=1); TestReplayCommittedHistories
// replays them all, so an ungated change fails CI. Record new histories
// after a gated change; keep the old ones, they prove the old branch.
const (
	// versionOutageWait: node steps wait for a node that went away
	// (defined beside onNode in outage.go).
	_ = versionOutageWait

	// versionServeOutageWait: the serve phase's node steps (image,
	// before_serve hooks, start rank, stop) wait for a node that went away
	// within the outage budget too (defined in outage.go).
	_ = versionServeOutageWait

	// versionVerifyOutageWait: Cutover's verify step waits for a node
	// that went away within the outage budget too (outage.go).
	_ = versionVerifyOutageWait

	// versionPowerOn: Cutover's --power-on step (probe, then Power child)
	// before the fleet probe.
	versionPowerOn = "cutover-power-on"

	// versionStopRollback: a stop of a previous lane that fails partway
	// rolls back instead of failing as it stands.
	versionStopRollback = "cutover-stop-rollback"

	// versionPreviousOwnNodes: only lanes holding one of the plan's nodes
	// are previous lanes (stopped, resolved, rolled back); before, every
	// lane on any probed fleet node was.
	versionPreviousOwnNodes = "cutover-previous-own-nodes"

	// versionPowerGearLast: power off with network gear switches the gear
	// off after the nodes, once every node behind it is off (warn-only).
	versionPowerGearLast = "power-gear-last"

	// versionStopForeign: cutover --stop-foreign stops foreign engines on
	// the lane's nodes after the fleet probe.
	versionStopForeign = "cutover-stop-foreign"

	// versionVerifyOffNodes: a node whose worker does not pick up a verify
	// is asked about (NodeOff): off on purpose is "off, not verified".
	versionVerifyOffNodes = "verify-off-nodes"

	// versionStartAllRanks: serveLane waits for every rank's start before
	// it returns a failed start, so the cleanup stop cannot race a create.
	versionStartAllRanks = "serve-start-all-ranks"

	// versionStageVerifyInBlock: StageNode's post-stage verify runs inside
	// each block's StageBlock (StageBlockInput.Verify) instead of as a
	// VerifyBlock activity after all blocks.
	versionStageVerifyInBlock = "stage-verify-in-block"

	// versionPostHooks: serveLane runs the plan's post_exec (head
	// container), post_commands (control host) and stop_after_post once
	// the lane answers (serve.go, postHooks). Plans recorded before it
	// carry none, and never reach the gate.
	versionPostHooks = "serve-post-hooks"

	// versionStageFetch: a Stage whose input carries a fetch plan (stage
	// --fetch, or hub-mirror blocks with fetch = true) runs the Fetch
	// child (fetch/LANE) before staging.
	versionStageFetch = "stage-fetch"

	// versionStageImage: stage (and so cutover) ensures the lane's image
	// on every node first, moving the layers a node lacks from a node that
	// has it (images.go), before any container starts.
	versionStageImage = "stage-image"

	// versionCutoverFetch: a Cutover whose input carries a fetch plan
	// (cutover --fetch, or hub-mirror blocks with fetch = true) runs the
	// Fetch child before its stage step.
	versionCutoverFetch = "cutover-fetch"

	// versionNodeLease: every top-level mutating run (cutover, up, stop,
	// stage, repair) holds a NodeLease child per node it touches (lease.go).
	_ = versionNodeLease

	// versionKeeper: cutover and up end the keepers of their nodes first
	// and start the cluster's keeper (keeper/CLUSTER) when they succeed; a
	// cutover that rolled back starts the previous lane's keeper again;
	// stop ends the keepers of what it stops first (keeper.go).
	versionKeeper = "keeper"

	// versionServeImageID: serveLane's image step accepts a pinned
	// repo:tag@sha256:D that a node has only under its tag (moved there by
	// the stage's image step: `docker load` sets no repo digest) when its
	// ID is the one the nodes carrying the digest have, and StartRank
	// creates a pinned image's containers from the ID each node resolved
	// (serve.go, serveImages).
	versionServeImageID = "serve-image-id"

	// versionStageBuild: the image step of a stage or cutover whose input
	// carries a build (a recipe with [build], starter image build) builds
	// the image on one node (BuildImage) when no node has it, or first
	// with Force, then moves it (images.go). Runs recorded before it
	// carried no build and never ask.
	versionStageBuild = "stage-build"

	// versionStageRegistry: the image step of a stage or cutover whose
	// input carries a registry (image_registry) pulls the image on one node
	// (PullImage) when no node of the cluster has it, before a build, then
	// moves it (images.go). Runs recorded before it never ask.
	versionStageRegistry = "stage-registry"

	// versionPullCredentials: the image step's pull with an auth file
	// (now a Docker config.json on the control host) hands the pulling
	// node the registry's login for each attempt alone: SendRegistryAuth
	// before PullImage, DropRegistryAuth after it (control-queue
	// activities), up to three attempts of one (images.go, pullWithLogin).
	// Runs from before passed the auth file's path on the node to one
	// PullImage of three attempts. Asked only when a pull with an auth file
	// runs.
	versionPullCredentials = "image-pull-credentials"

	// versionKeeperNodes: the keeper waits for a node whose worker is
	// gone within the outage budget (a reboot), then stops healing past it
	// (notify); runs a verify-only pass on a rebooted or powered-on node
	// before restarting the lane; idles "off by schedule" while a node of
	// the lane is powered off (keepnodes.go).
	versionKeeperNodes = "keeper-nodes"

	// versionKeeperFastDown: a check that finds a rank's container down
	// (re-probed at once: RankDownReprobe) cancels the head check's
	// re-probe instead of waiting the probe grace for it.
	versionKeeperFastDown = "keeper-fast-down"

	// versionKeeperRankDied: the keeper listens for KeeperRankDiedSignal
	// (a node worker saw a rank container die) and checks at once instead
	// of at its next interval.
	versionKeeperRankDied = "keeper-rank-died"

	// versionKeeperLocalHead: the keeper's check asks the head's health
	// path as a local activity on the control worker (one marker event per
	// check) instead of a control-queue activity (three events and a
	// workflow task of its own): the keeper's own cost per check.
	versionKeeperLocalHead = "keeper-local-head"

	// versionKeeperSignalNoReprobe: a check woken by a rank-died signal
	// asks each node's CheckRanks once, without the probe-grace re-probe
	// (Docker itself reported the death), so the heal starts at once.
	versionKeeperSignalNoReprobe = "keeper-signal-no-reprobe"

	// versionKeeperSignalRanksFirst: a check woken by a rank-died signal
	// asks the ranks first and the head only when no rank is down. Asked
	// beside them, the head's check (a local activity) retried inside the
	// workflow task when the head was down with the rank, which held back
	// the rank checks, the heal and every status query for the probe
	// grace.
	versionKeeperSignalRanksFirst = "keeper-signal-ranks-first"

	// versionImageOutageWait: the image step waits for a node whose worker
	// or Docker is gone (a reboot) within the node outage budget, as
	// staging does: its inventories run under waitForNode (each node in
	// its own coroutine), and a transfer whose member's node went away is
	// planned again once the node is back, without counting the round.
	versionImageOutageWait = "image-outage-wait"

	// versionStageAhead: a cutover stages and verifies the next lane while
	// the previous one serves (its keepers held, KeepHold), room
	// permitting (StageRoom on every node), and stops it only then; else,
	// or with --stage-ahead=never, after the stop as before, saying why.
	versionStageAhead = "cutover-stage-ahead"

	// versionGateway: a run whose input names gateways (Gateways) takes
	// the gateway steps (gateway.go): hold, drain, route, release, unroute,
	// off, each an activity on the gateway's queue. Asked once, at a run's
	// first gateway step; runs without gateways never ask.
	versionGateway = "gateway"

	// versionStageRoomAfterStop: a cutover that finds no room to stage
	// ahead refuses before stopping anything when the nodes would lack
	// room after the stop too (StageRoomResult.AfterStop: stopping a lane
	// frees no disk unless --make-room prunes its blocks), instead of
	// stopping the lane, failing the stage and rolling back.
	versionStageRoomAfterStop = "stage-room-after-stop"

	// versionDryRunCompletes: a dry run (Stage, StageNode, Fetch with
	// DryRun) takes every step, records what would stop a real run in its
	// result (StageBlockResult.Error, StageResult.Error,
	// FetchResult.Error) and completes: it never leaves a failed run in
	// the UI. Its fetch child is fetch/LANE/dry-run (fetch/LANE stays
	// the real fetch's lock). Asked only by dry runs.
	versionDryRunCompletes = "dry-run-completes"
)
