package contract

import (
	"encoding/json"
	"path/filepath"
	"strings"
)

// Recipe is one lane as a run carries it: what to run, where, and what to
// stage first. It is internal/config's recipe file, loaded, defaulted and
// converted (lane.Wire) on the cluster it was rendered on; workflows read
// staging blocks, hooks, probe and bench settings from it, and its JSON
// (File aside) is what RecipeHash hashes, so a field added here changes
// every lane's hash.
type Recipe struct {
	// File is the recipe's path; Format is "toml" or "sparkrun".
	File   string `json:"file"`
	Format string `json:"format"`
	// Name is the lane's name (default: the file name without extension).
	// It becomes part of paths and container names, so it is a name, not a
	// path: ^[a-z0-9][a-z0-9._-]*$ (see ValidName).
	Name string `json:"name"`
	// Aliases let operators say --lane mia.
	Aliases []string `json:"aliases,omitempty"`
	Cluster string   `json:"cluster"`
	// Runtime is sglang | vllm | exllamav3 | sim.
	Runtime string `json:"runtime"`
	Image   string `json:"image"`
	Model   string `json:"model"`
	// MinNodes comes from sparkrun recipes; 0 means the cluster's size.
	MinNodes int `json:"min_nodes,omitempty"`
	// MaxNodes comes from sparkrun recipes (single-node lanes say 1); 0
	// means no upper bound. On a larger cluster the lane runs on the
	// first MaxNodes nodes (the plan says so).
	MaxNodes int `json:"max_nodes,omitempty"`
	// Mode is sparkrun's topology (solo | cluster | auto): solo runs on
	// the cluster's head alone, cluster needs at least two nodes.
	Mode string `json:"mode,omitempty"`
	// ModelRevision pins the model's hub revision (sparkrun's
	// model_revision): the {model_revision} placeholder, for a command
	// that passes --revision.
	ModelRevision string `json:"model_revision,omitempty"`
	// Executor is the container's shape (sparkrun's executor_config):
	// GPUs, network, IPC, shm, user, ulimits, devices. Empty fields take
	// sparklane's defaults (DefaultExecutor), which are what NCCL over
	// RoCE needs on DGX Spark.
	Executor Executor `json:"executor_config,omitempty"`
	// PreExec runs in each rank's container before the serve command
	// (sparkrun's pre_exec; resolved mods add their copy and run.sh here),
	// PostExec in the head's container once it serves, PostCommands on
	// the control host after that. Strings are shell commands; a copy
	// entry is {copy: SRC, dest: DST}.
	PreExec      []PreExec `json:"pre_exec,omitempty"`
	PostExec     []string  `json:"post_exec,omitempty"`
	PostCommands []string  `json:"post_commands,omitempty"`
	// StopAfterPost stops the lane once its post hooks succeeded.
	StopAfterPost bool `json:"stop_after_post,omitempty"`
	// RuntimeConfig is sparkrun's runtime-specific table; BuildArgs,
	// Builder and BuilderConfig say how the image was built, as written
	// (Build is what sparklane makes of them).
	RuntimeConfig map[string]any `json:"runtime_config,omitempty"`
	BuildArgs     any            `json:"build_args,omitempty"`
	Builder       string         `json:"builder,omitempty"`
	BuilderConfig map[string]any `json:"builder_config,omitempty"`
	// Build says how sparklane builds the lane's image on one node when
	// no node has it (stage, cutover) or when asked (starter image build);
	// the result is then moved to the other nodes. Nil: never built.
	Build *Build `json:"build,omitempty"`
	// ImageRegistry (host[:port][/prefix]), when set, is where one node
	// pulls the image when no node of the cluster has it, instead of the
	// registry the image names (ImageRef.Registry); the recipe's, else
	// the config's. ImageRegistryAuthFile is a Docker config.json (or a
	// username:password file) on the control host: only the path travels,
	// never the credentials (PullFor, docs/recipes.md).
	ImageRegistry         string `json:"image_registry,omitempty"`
	ImageRegistryAuthFile string `json:"image_registry_auth_file,omitempty"`
	// RecipeVersion and Metadata are carried from sparkrun v2 recipes so a
	// loaded recipe round-trips what its authors wrote. Mods name mod
	// directories (a run.sh each) found next to the recipe or in its
	// registry clone's *-mods/; loading turns each into PreExec entries
	// (copy to /workspace/mods/NAME, run run.sh), or fails naming it.
	RecipeVersion string         `json:"recipe_version,omitempty"`
	Metadata      map[string]any `json:"metadata,omitempty"`
	Mods          []string       `json:"mods,omitempty"`
	// Command is a template with {key} placeholders filled from Defaults,
	// overrides and the built-ins (model, image, node_rank, nnodes, head_addr...).
	Command  string            `json:"command"`
	Defaults map[string]any    `json:"defaults,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// EnvFrom are container variables whose values are secrets (API
	// tokens): each names where the node worker reads the value when it
	// creates the container — "env:NAME" (its own environment) or
	// "file:/path" (a file on the node) — so the value never enters a
	// workflow input, the Temporal history, a plan, a log or a report.
	EnvFrom map[string]string `json:"env_from,omitempty"`
	Mounts  []Mount           `json:"mounts,omitempty"`
	Hooks   Hooks             `json:"hooks,omitempty"`
	Staging []Staging         `json:"staging,omitempty"`
	Probe   Probe             `json:"probe,omitempty"`
	// NodeOutageBudget overrides the config's for this lane (a lane whose
	// nodes take long to reboot).
	NodeOutageBudget Duration `json:"node_outage_budget,omitempty"`
	// Relay = false stages this lane without relaying between nodes (each
	// node reads the NAS itself), whatever the config says.
	Relay *bool `json:"relay,omitempty"`
	Bench Bench `json:"bench,omitempty"`
	// Keep is the recipe's [keep] table (the keeper's interval and restart
	// budget; Off starts no keeper); zero keys take the config's.
	Keep Keep `json:"keep,omitzero"`
	// Gateway is the recipe's [gateway]: the model names clients may ask
	// the gateway for this lane by, besides the name its engine serves.
	Gateway RecipeGateway `json:"gateway,omitzero"`
}

// RecipeGateway is a recipe's [gateway] table.
type RecipeGateway struct {
	Aliases []string `json:"aliases,omitempty"`
}

// Keep is how a cluster's keeper watches this lane (zero: the config's,
// then the defaults: every 30s, 3 restarts per 1h).
type Keep struct {
	Interval Duration `json:"interval,omitempty"`
	Restarts int      `json:"restarts,omitempty"`
	Window   Duration `json:"window,omitempty"`
	Off      bool     `json:"off,omitempty"`
}

// Mount is a bind mount into every rank's container. Src is a node-local
// path (prefixed by the node's fs_root) unless it lies under shared_roots.
type Mount struct {
	Src      string `json:"src"`
	Dst      string `json:"dst"`
	ReadOnly bool   `json:"read_only"`
	// Host lets Src name a host path outside the node's roots and
	// shared_roots (a device socket, a driver directory). Without it such a
	// source is refused; recipe check lists every host mount.
	Host bool `json:"host,omitempty"`
	// Create makes the serve step create Src when it is missing (a JIT
	// cache the engine fills: nothing stages it, so a fresh node would
	// otherwise fail with SourceMissing). Src must lie under a node root
	// (not a shared root, not a host path); it is made beneath the root
	// without following links, owned by the container's user when the
	// lane runs as a numeric user, else by the node worker.
	Create bool `json:"create,omitempty"`
}

// Hooks run on each node before its containers start.
type Hooks struct {
	// BeforeServe are shell commands run with sh -c on the node.
	BeforeServe []string `json:"before_serve,omitempty"`
	// Clear lists node directories whose contents are removed (the
	// directories themselves kept) before serve: per-run receipt roots that a
	// runtime treats as strict-on-exist, where a stale entry poisons every
	// restart. Each must lie strictly inside a node root, and never be (or
	// hold) a staging dst or export of the recipe.
	Clear []string `json:"clear,omitempty"`
	// Timeout bounds each hook (default 2m).
	Timeout Duration `json:"timeout,omitempty"`
}

// Staging is one [[staging]] block: what a node stages before it serves,
// handed to the node worker as it is (StageBlockInput, VerifyBlockInput).
type Staging struct {
	// Kind is "hub-mirror" or "sparse-rows"; ID names the block in reports.
	Kind string `json:"kind"`
	ID   string `json:"id"`
	Src  string `json:"src"`
	Dst  string `json:"dst"`
	// MinFree is the free space required on dst before any write, in bytes
	// (the recipe writes it like "100G").
	MinFree int64 `json:"min_free,omitempty"`
	// hub-mirror
	Repos   []string `json:"repos,omitempty"`
	Skip    []string `json:"skip,omitempty"`
	Verify  string   `json:"verify,omitempty"` // sampled | sha256
	Exports []Export `json:"exports,omitempty"`
	// Revision pins the Hub commit (or branch, tag) the block's repos are
	// fetched at (starter fetch); Fetch has every stage of the lane fetch
	// them into Src first, so a repo missing from the NAS is downloaded
	// instead of refused as SourceIncomplete.
	Revision string `json:"revision,omitempty"`
	Fetch    bool   `json:"fetch,omitempty"`
	// sparse-rows
	Format  string   `json:"format,omitempty"` // packed | sparse-copy
	Tensors []string `json:"tensors,omitempty"`
	Layers  []int    `json:"layers,omitempty"`
	// Mount is the container path dst is bound at (read-only), EnvVar the
	// variable that points the runtime at it (DSV41_PACKED_DIR).
	Mount  string `json:"mount,omitempty"`
	EnvVar string `json:"env,omitempty"`
	// RowsEnv names the variable the runtime cross-checks each layer's
	// table against (SPARK_ENGRAM_ROWS): the table's total rows, one number
	// per layer, comma-separated in layer order. The serve step fills it on
	// each node from the staged manifest (sparse-copy) and checks the
	// rank's staged rows are its tile of those totals; Rows (the total,
	// every layer alike), when given, is rendered and cross-checked too. A
	// packed block needs Rows (its files hold only the rank's rows).
	RowsEnv string `json:"rows_env,omitempty"`
	Rows    int64  `json:"rows,omitempty"`
	// RecordBytes is the size of one record the runtime reads from packed
	// files (264 on mia; internal/engine/sparserows/FORMAT.md). Staging refuses,
	// before writing anything, a table whose row width gives another size,
	// instead of packing rows the runtime would misread. 0: any width.
	RecordBytes int64 `json:"record_bytes,omitempty"`
}

// Export materializes a regular-file tree of one repo for O_NOFOLLOW runtimes.
type Export struct {
	Repo string `json:"repo"`
	Path string `json:"path"`
	// Mount is the container path the export is bound at (read-only).
	Mount string `json:"mount,omitempty"`
}

// Probe says how to decide a lane is serving.
type Probe struct {
	// Ready is the readiness budget (default 30m).
	Ready Duration `json:"ready,omitempty"`
	// Path is the health path (default /v1/models).
	Path  string  `json:"path,omitempty"`
	Smoke []Smoke `json:"smoke,omitempty"`
	// ModelType is chat (the default), embedding or reranker: an
	// embedding or reranker engine has no completions endpoint, so it is
	// probed on its own (ProbeEndpoint). For sparkrun recipes it is read
	// from the command (--runner pooling) and the model name.
	ModelType string `json:"model_type,omitempty"`
	// LogSignatures must all appear in the head's log (each rank's, with
	// the rank's own lines) before the lane is ready: the lines a
	// production engine prints when its gated features are on. A missing
	// one fails readiness naming it.
	LogSignatures []string `json:"log_signatures,omitempty"`
	// APIKeyEnv names the environment variable (on the control host) that
	// holds the engine's API key, sent by probe and bench as a bearer
	// token; the key itself never enters config, plans or history.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// DecodePromptTokens / DecodeMaxTokens shape the decode probe
	// (temperature 0); unset, the operator's log's shape
	// (DefaultDecodePromptTokens, DefaultDecodeMaxTokens), so probe numbers
	// compare with the ones recorded there.
	DecodePromptTokens int `json:"decode_prompt_tokens,omitempty"`
	DecodeMaxTokens    int `json:"decode_max_tokens,omitempty"`
}

// The decode probe's default shape: the operator's log measured decode
// with a 487-token prompt and 400 generated tokens at temperature 0.
const (
	DefaultDecodePromptTokens = 487
	DefaultDecodeMaxTokens    = 400
)

// Smoke is one prompt whose answer must contain Expect.
type Smoke struct {
	Prompt string `json:"prompt"`
	Expect string `json:"expect"`
}

// Bench configures the bench step.
type Bench struct {
	PromptLengths []int `json:"prompt_lengths,omitempty"`
	Depths        []int `json:"depths,omitempty"`
	Concurrency   []int `json:"concurrency,omitempty"`
	GenTokens     int   `json:"gen_tokens,omitempty"`
	// Runs is how many times the pp/tg sweep is repeated (0: the bench's
	// default, 3): figures are medians over the runs and their spread is
	// what a verdict must beat, so more runs on a noisy engine mean fewer
	// changes called on noise, at the cost of a longer bench.
	Runs int `json:"runs,omitempty"`
	// Harness is an external command template ({base_url} {model}
	// {output_dir} {seed} {mode} {mode_flags} {parallel} {tokenizer}), or
	// the word "tool-eval-bench" for the shipped template of that harness
	// (bench.ToolEvalBenchTemplate); HarnessFormat names its JSON report
	// shape (tool-eval-bench).
	Harness       string `json:"harness,omitempty"`
	HarnessFormat string `json:"harness_format,omitempty"`
	// QualityBand is the ± score band judged neutral against a baseline (default 2).
	QualityBand float64 `json:"quality_band,omitempty"`
	// Seed seeds the perf sweep's prompts and is passed to the harness as
	// {seed} (default 42), so two benches of one lane send the same
	// requests and their scores can be compared; `starter bench --seed`
	// overrides it.
	Seed *int64 `json:"seed,omitempty"`
	// Mode is the harness's scenario pool: "standard", "hardmode" (adds
	// tool-eval-bench's hard scenarios) or "short"; the template gets it as
	// {mode} and as tool-eval-bench's flags {mode_flags}. Reports of
	// different modes are not comparable, and the verdict says so.
	Mode string `json:"mode,omitempty"`
}

// DefaultBenchSeed is the seed every bench uses unless told otherwise: the
// operator's runs were all made with 42.
const DefaultBenchSeed int64 = 42

// BenchModes are the harness scenario pools [bench] mode may name.
var BenchModes = []string{"standard", "hardmode", "short"}

// Executor is a recipe's container shape, sparkrun's executor_config keys.
// Every field is optional; empty means sparklane's default.
type Executor struct {
	// GPUs is docker's --gpus value ("all"); "none" gives no GPUs.
	GPUs string `json:"gpus,omitempty"`
	// Network and IPC default to "host": NCCL and the engines' rendezvous
	// use the node's own interfaces and shared memory.
	Network string `json:"network,omitempty"`
	IPC     string `json:"ipc,omitempty"`
	// ShmSize is /dev/shm's size ("32gb", sparkrun's default).
	ShmSize string `json:"shm_size,omitempty"`
	// User runs the container as this user ("1000:1000").
	User string `json:"user,omitempty"`
	// SecurityOpt, CapAdd, Ulimit and Devices replace the defaults when
	// given (ulimits as docker writes them: "memlock=-1:-1").
	SecurityOpt []string `json:"security_opt,omitempty"`
	CapAdd      []string `json:"cap_add,omitempty"`
	Ulimit      []string `json:"ulimit,omitempty"`
	Devices     []string `json:"devices,omitempty"`
	// Privileged is off unless a recipe asks (sparkrun's rootless shape:
	// devices and ulimits instead).
	Privileged *bool `json:"privileged,omitempty"`
	// MemoryLimit caps the container's memory ("100g").
	MemoryLimit string `json:"memory_limit,omitempty"`
	// RestartPolicy and AutoRemove are carried for parity; the serve step
	// keeps its own restart policy and labels (a rank must not vanish
	// before its logs are read).
	RestartPolicy string   `json:"restart_policy,omitempty"`
	AutoRemove    *bool    `json:"auto_remove,omitempty"`
	Labels        []string `json:"labels,omitempty"`
	// Entrypoint replaces the image's ENTRYPOINT ("" clears it).
	Entrypoint *string `json:"entrypoint,omitempty"`
}

// PreExec is one pre_exec entry: a shell command run in the container
// (Run), or a host directory copied into it (Copy → Dest), which is how a
// mod reaches the container before its run.sh runs.
type PreExec struct {
	Run  string `json:"run,omitempty"`
	Copy string `json:"copy,omitempty"`
	Dest string `json:"dest,omitempty"`
	// Archive is Copy read on the control host when the plan was rendered:
	// a tar whose entries lie under Dest (without its leading slash), so
	// the node copies it into the container without the source on its own
	// disk. Empty for copies past MaxModArchives, which the node then
	// reads at Copy.
	Archive []byte `json:"archive,omitempty"`
}

// MaxModArchives bounds the pre_exec copies a plan carries, every node's
// counted (the plan travels whole in workflow inputs, and Temporal refuses
// a payload of 2 MB): mods are scripts and patches, kilobytes.
const MaxModArchives = 384 << 10

// ExportPath is where an export tree of this hub-mirror block lives on the
// node: e.Path if absolute, relative to Dst if not, and
// DST/exports/ORG--NAME when empty. Validation, rendering and the node
// worker all ask here, so they check and bind the path that is written.
func (s Staging) ExportPath(e Export) string {
	switch {
	case e.Path == "":
		return filepath.Join(s.Dst, "exports", strings.ReplaceAll(e.Repo, "/", "--"))
	case filepath.IsAbs(e.Path):
		return filepath.Clean(e.Path)
	default:
		return filepath.Join(s.Dst, e.Path)
	}
}

// HubDir is the node directory holding the mirrored hub cache of a
// hub-mirror block (DST/hub, laid out like hf_cache_dir): what staging
// writes and what the plan binds.
func (s Staging) HubDir() string { return filepath.Join(s.Dst, "hub") }

// Probe model types: the values of Probe.ModelType.
const (
	ModelChat      = "chat"
	ModelEmbedding = "embedding"
	ModelReranker  = "reranker"
)

// ModelTypes are the values [probe] model_type takes.
var ModelTypes = []string{ModelChat, ModelEmbedding, ModelReranker}

// ProbeEndpoint is the OpenAI-style endpoint that proves a lane of this
// model type decodes: /v1/completions for chat, /v1/embeddings for
// embedding, /v1/rerank for reranker (vLLM's and SGLang's rerank route).
func (p Probe) ProbeEndpoint() string {
	switch p.ModelType {
	case ModelEmbedding:
		return "/v1/embeddings"
	case ModelReranker:
		return "/v1/rerank"
	}
	return "/v1/completions"
}

// BuildHint says how the recipe builds its image (sparkrun's builder and
// build_args, recorded as given), "" when it does not say: quoted when a
// node lacks the image.
func (r Recipe) BuildHint() string {
	var parts []string
	if r.Builder != "" {
		parts = append(parts, "builder "+r.Builder)
	}
	if r.BuildArgs != nil {
		b, err := json.Marshal(r.BuildArgs)
		if err == nil {
			parts = append(parts, "build_args "+string(b))
		}
	}
	return strings.Join(parts, ", ")
}

// Build is a recipe's [build]: an image built with the Docker Engine API
// on one node, from a context directory on a shared root (every node sees
// it alike) or from a git URL at a ref, tagged as the recipe's image.
type Build struct {
	// Context is an absolute directory under a shared root; Git a
	// repository URL (git://, https://….git or git@host:path) cloned by the node's
	// Docker at Ref. Exactly one is set.
	Context string `json:"context,omitempty"`
	Git     string `json:"git,omitempty"`
	Ref     string `json:"ref,omitempty"`
	// Dockerfile is relative to the context ("Dockerfile" when empty).
	Dockerfile string `json:"dockerfile,omitempty"`
	// Args are the build args (ARG values).
	Args map[string]string `json:"args,omitempty"`
	// Node builds it ("" : the cluster's head, or --node).
	Node string `json:"node,omitempty"`
}
