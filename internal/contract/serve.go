package contract

// A lane's containers and probes as they travel: the same JSON as
// internal/engine/serve's and probe's types, owned here.

// ForeignContainer is a running container sparklane did not start that
// holds a GPU or a lane's port.
type ForeignContainer struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	Image string `json:"image"`
	// Why says what it holds: "GPUs", "port 8000".
	Why string `json:"why"`
}

// String is "NAME (WHY)".
func (f ForeignContainer) String() string { return f.Name + " (" + f.Why + ")" }

// ClearedPath is one path a before_serve clear emptied.
type ClearedPath struct {
	Path string `json:"path"`
	// Files and Bytes count the non-directory entries removed.
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
	// Absent says the path did not exist: nothing was removed.
	Absent bool `json:"absent,omitempty"`
	// Helper says the node's clear helper removed it (the worker user could not).
	Helper bool `json:"helper,omitempty"`
	// Incomplete says some directories could not be read, so Files and
	// Bytes undercount.
	Incomplete bool `json:"incomplete,omitempty"`
}

// PoolProbe is a pooling model's probe (embeddings, rerank).
type PoolProbe struct {
	// Endpoint is the route probed (/v1/embeddings, /v1/rerank, /rerank).
	Endpoint string `json:"endpoint"`
	// Seconds is the request's round trip.
	Seconds float64 `json:"seconds"`
	// Dim is the embedding length; Results the number of scored documents.
	Dim     int `json:"dim,omitempty"`
	Results int `json:"results,omitempty"`
}

// BeforeServeInput runs a lane's hooks on one node.
type BeforeServeInput struct {
	Lane  string `json:"lane"`
	Rank  int    `json:"rank"`
	Hooks Hooks  `json:"hooks"`
	// Staging are the lane's staging blocks: a clear path may never be or
	// contain one of their destinations or exports.
	Staging []Staging `json:"staging,omitempty"`
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
	Cleared []ClearedPath `json:"cleared,omitempty"`
}

// PostExecInput runs a lane's post_exec (rendered) in its head
// container on this node, in order, stopping at the first failure.
type PostExecInput struct {
	Lane      string   `json:"lane"`
	Container string   `json:"container"`
	Commands  []string `json:"commands"`
	// Timeout bounds each command.
	Timeout Duration `json:"timeout,omitempty"`
}

// PostCommandsInput runs a lane's post_commands (rendered) on the
// control host, in order, stopping at the first failure.
type PostCommandsInput struct {
	Lane     string   `json:"lane"`
	Commands []string `json:"commands"`
	// Timeout bounds each command.
	Timeout Duration `json:"timeout,omitempty"`
}

// PostHooksResult is every post hook's output (masked), kept in history.
type PostHooksResult struct {
	Node    string       `json:"node,omitempty"`
	Outputs []HookOutput `json:"outputs,omitempty"`
}

// StartRankInput starts one rank's container.
type StartRankInput struct {
	Lane       string   `json:"lane"`
	RecipeHash string   `json:"recipe_hash"`
	Plan       NodePlan `json:"plan"`
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
	Lane    string   `json:"lane,omitempty"`
	All     bool     `json:"all,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
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

// WaitReadyInput waits for a lane's head to answer.
type WaitReadyInput struct {
	Plan   LanePlan `json:"plan"`
	Path   string   `json:"path,omitempty"`
	Budget Duration `json:"budget"`
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
	BaseURL string  `json:"base_url"`
	Model   string  `json:"model"`
	Prompts []Smoke `json:"prompts"`
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
	Pool *PoolProbe `json:"pool,omitempty"`
}

// ServeInput brings a lane up on its nodes and probes it (starter up).
type ServeInput struct {
	Recipe Recipe   `json:"recipe"`
	Plan   LanePlan `json:"plan"`
	// NoWait returns after the containers started.
	NoWait bool     `json:"no_wait,omitempty"`
	Pickup Duration `json:"pickup,omitempty"`
	// OutageBudget is how long a node may be gone (no worker polling its
	// queue) during the serve steps before they fail naming it (0:
	// DefaultOutageBudget): a node rebooting mid-serve is waited for.
	OutageBudget Duration `json:"outage_budget,omitempty"`
	// Keep is how the cluster's keeper keeps the lane once it answers
	// (nil: the recipe's [keep], then the defaults); Grace is the wait
	// before a failed check's re-probe.
	Keep  *KeepPolicy `json:"keep,omitempty"`
	Grace Duration    `json:"grace,omitempty"`
	// Gateways are the task queues of the gateways that front the
	// cluster (contract.GatewayQueue): the run holds, drains, routes and
	// releases its names there as named steps (behind versionGateway).
	// None: no gateway step.
	Gateways []string `json:"gateways,omitempty"`
}

// ServeResult is what serving and probing found.
type ServeResult struct {
	Lane    string              `json:"lane"`
	BaseURL string              `json:"base_url,omitempty"`
	Image   []EnsureImageResult `json:"images,omitempty"`
	Hooks   []BeforeServeResult `json:"hooks,omitempty"`
	Ranks   []StartRankResult   `json:"ranks,omitempty"`
	Ready   *WaitReadyResult    `json:"ready,omitempty"`
	Smoke   *SmokeResult        `json:"smoke,omitempty"`
	Decode  *DecodeProbeResult  `json:"decode,omitempty"`
	// Answers is true when the lane answered its probes.
	Answers bool `json:"answers"`
	// PostExec and PostCommands are the post hooks' outputs; StoppedAfterPost
	// says the lane was stopped after them (stop_after_post).
	PostExec         *PostHooksResult `json:"post_exec,omitempty"`
	PostCommands     *PostHooksResult `json:"post_commands,omitempty"`
	StoppedAfterPost bool             `json:"stopped_after_post,omitempty"`
}

// StopInput stops a lane (or every sparklane container) on nodes.
type StopInput struct {
	Lane   string   `json:"lane,omitempty"`
	Nodes  []string `json:"nodes"`
	All    bool     `json:"all,omitempty"`
	Pickup Duration `json:"pickup,omitempty"`
	// OutageBudget, when positive, is how long a node may be gone (no
	// worker) before its stop fails naming it. 0 fails at once: a stop
	// asked for by hand covers every node of the fleet, and one that is
	// switched off must not hold it for half an hour.
	OutageBudget Duration `json:"outage_budget,omitempty"`
	// Gateways are the task queues of the gateways that front the
	// cluster (contract.GatewayQueue): the run holds, drains, routes and
	// releases its names there as named steps (behind versionGateway).
	// None: no gateway step.
	Gateways []string `json:"gateways,omitempty"`
	// NoDrain stops at once (stop --no-drain): the gateways hand the
	// lane nothing new, and what it has in flight is cut off.
	NoDrain bool `json:"no_drain,omitempty"`
}

// StopResult lists what was stopped per node.
type StopResult struct {
	Nodes []StopLaneResult `json:"nodes"`
	// Drained are the gateways' drains before the stop.
	Drained []GatewayDrainResult `json:"drained,omitempty"`
}
