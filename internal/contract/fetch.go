package contract

// FetchPlan is what a Fetch run downloads from the Hub into the NAS, and
// where: lane.FetchPlan resolves it from the config and a lane's
// hub-mirror blocks, the starter shows it and puts it in the run's input.
// It holds paths and names only: the token stays in a file (or the
// environment) of the fetching worker.
type FetchPlan struct {
	Lane string `json:"lane"`
	// Node is the node whose worker fetches (its queue node.NAME); ""
	// is the control service's worker (config fetch_node = "control").
	Node string `json:"node,omitempty"`
	// Endpoint is the Hub's base URL the user named: hf_endpoint, else the
	// starter's HF_ENDPOINT (an address, not a secret: it travels so the
	// fetch goes where `hf download` in that shell would); "" lets the
	// fetching worker use its HF_ENDPOINT, else the public Hub.
	Endpoint string `json:"endpoint,omitempty"`
	// TokenFile is the token file's path on the fetching worker's host
	// (hf_token_file); "" lets it use its HF_TOKEN or the Hub tools'
	// token file.
	TokenFile string `json:"token_file,omitempty"`
	// Repos are the downloads, in block and repo order.
	Repos []FetchRepo `json:"repos"`
}

// FetchRepo is one repo of a hub-mirror block at its pinned revision.
type FetchRepo struct {
	// Block is the hub-mirror block's id (for progress and errors).
	Block string `json:"block"`
	Repo  string `json:"repo"`
	// Revision is the block's revision ("main" when it pins none).
	Revision string `json:"revision"`
	// CacheDir is the hub cache root the repo lands in: the block's src
	// (the NAS hub root the block stages from), as the recipe wrote it.
	CacheDir string `json:"cache_dir"`
	// Skip are the block's skip globs: what it skips is never requested.
	Skip []string `json:"skip,omitempty"`
}

// FetchRepoInput downloads one repo of a lane's fetch plan from the Hub
// into the NAS (FetchActivities.FetchRepo, on the fetch node's queue).
// It carries no token: the worker reads TokenFile, or its environment.
type FetchRepoInput struct {
	Lane string    `json:"lane"`
	Repo FetchRepo `json:"repo"`
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
	// Retry is why the fetch is retrying a request (which one, which try,
	// the error), until bytes flow again: the starter's progress line
	// shows it, so minutes of retries are never just "still running".
	Retry string `json:"retry,omitempty"`
	// HeadDone of HeadFiles files had their size and etag read by a HEAD
	// (an endpoint whose listing carries no file metadata).
	HeadDone  int `json:"head_done,omitempty"`
	HeadFiles int `json:"head_files,omitempty"`
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
	// Endpoint is the Hub the worker fetched from (the plan's, else its
	// HF_ENDPOINT, else the public Hub).
	Endpoint string `json:"endpoint,omitempty"`
	// HeadFiles had their size and etag read by a HEAD each, because the
	// endpoint's listing carried no file metadata.
	HeadFiles int `json:"head_files,omitempty"`
}

// FetchInput downloads a lane's hub-mirror repos from the Hub into the
// NAS (starter fetch, or a Stage that fetches first).
type FetchInput struct {
	Plan   FetchPlan `json:"plan"`
	DryRun bool      `json:"dry_run,omitempty"`
	// Pickup bounds schedule-to-start on a fetch node's queue (0:
	// DefaultPickup); Heartbeat is FetchRepo's heartbeat timeout, how soon
	// a killed worker is noticed and the fetch retried (0: five minutes;
	// the attempt aborts a stalled request well within it, so an attempt
	// never outlives its heartbeat and two never run side by side);
	// OutageBudget is how long the fetch node may be gone (0:
	// DefaultOutageBudget).
	Pickup       Duration `json:"pickup,omitempty"`
	Heartbeat    Duration `json:"heartbeat,omitempty"`
	OutageBudget Duration `json:"outage_budget,omitempty"`
}

// FetchResult is what each repo's fetch did, in plan order.
type FetchResult struct {
	Lane  string            `json:"lane"`
	Repos []FetchRepoResult `json:"repos"`
	// Error and ErrorType are a dry run's refusal (the Hub has no such
	// repo, the token is refused, …): a dry run completes with it rather
	// than leaving a failed run behind; the starter exits 1 with it.
	Error     string `json:"error,omitempty"`
	ErrorType string `json:"error_type,omitempty"`
}

// DefaultHubEndpoint is the public Hugging Face Hub: where a fetch goes
// when neither hf_endpoint nor HF_ENDPOINT names another.
const DefaultHubEndpoint = "https://huggingface.co"
