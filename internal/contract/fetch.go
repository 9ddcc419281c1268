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
	// Endpoint is the Hub's base URL (hf_endpoint); "" lets the fetching
	// worker use its HF_ENDPOINT, else the public Hub.
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
