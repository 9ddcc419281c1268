// Package config loads the fleet configuration and lane recipes, validates
// them as a whole (every error at once, each naming its file and key), and
// renders per-node commands, env and mounts. It knows nothing of Temporal.
//
// The fleet config (sparklane.toml) is read with viper. Each value comes from
// the first of these that sets it:
//
//  1. a command-line flag bound to the key (starter and worker bind only
//     --config, which names the file);
//  2. the environment: SPARKLANE_ + the key path upper-cased with "." → "_"
//     (SPARKLANE_STATE_DIR, SPARKLANE_TEMPORAL_ADDRESS, SPARKLANE_CONFIG for
//     the file itself); lists are comma-separated (SPARKLANE_SHARED_ROOTS=/a,/b);
//     keys inside [[nodes]], [[clusters]] and [[devices]] have no variable;
//  3. the file: --config, else $SPARKLANE_CONFIG, else ./sparklane.toml;
//  4. the defaults (DefaultStateDir, DefaultNamespace, ...).
//
// Before viper sees a file it is parsed with go-toml to check what the
// operator wrote: size and key-count limits, unknown keys with their full
// path, keys in the wrong case (viper folds case, so State_Dir would
// otherwise be read as state_dir silently) and types. Recipes (TOML and
// sparkrun YAML) are decoded with mapstructure under the same rules.
package config

import "time"

// Config is the fleet: where state lives, which nodes exist and how to reach
// them, and which clusters group them. Loaded from sparklane.toml.
type Config struct {
	// File is the path the config was loaded from, so errors can name it.
	// It is viper's "config" key (--config, $SPARKLANE_CONFIG), never a key
	// of the file itself (toml:"-").
	File string `mapstructure:"config" toml:"-" json:"file,omitempty"`
	// StateDir holds the embedded Temporal SQLite file, demo data and reports
	// that are not under recipes_dir.
	StateDir string `mapstructure:"state_dir" json:"state_dir"`
	// RecipesDir is where lane recipes (*.toml, sparkrun *.yaml) are read from.
	RecipesDir string `mapstructure:"recipes_dir" json:"recipes_dir"`
	// RecipesDirs are more recipe directories, searched recursively (a
	// clone of a recipe registry keeps its recipes in subdirectories).
	RecipesDirs []string `mapstructure:"recipes_dirs" json:"recipes_dirs,omitempty"`
	// Registries maps a registry name to a local clone, so a recipe can be
	// named @NAME/recipe (sparkrun's scoped reference) without copying it.
	Registries map[string]string `mapstructure:"registries" json:"registries,omitempty"`
	// DefaultCluster is the cluster a recipe without one (every sparkrun
	// recipe) runs on when no --cluster is given.
	DefaultCluster string `mapstructure:"default_cluster" json:"default_cluster,omitempty"`
	// HFCacheDir is the NAS hub root (models--org--name/...) that staging reads.
	HFCacheDir string `mapstructure:"hf_cache_dir" json:"hf_cache_dir"`
	// SharedRoots are paths every node sees alike (the NAS); fs_root never
	// prefixes them.
	SharedRoots []string `mapstructure:"shared_roots" json:"shared_roots"`
	// ProbeGrace is how long the fleet probe waits before its one re-probe
	// when a lane needs more free nodes than it found (a node still warming up).
	ProbeGrace time.Duration `mapstructure:"probe_grace" json:"probe_grace"`
	// NodeOutageBudget is how long a run waits for a node whose worker went
	// away mid-run (a reboot, an upgrade) before failing naming it; a lane's
	// recipe may set its own (default 30m).
	NodeOutageBudget time.Duration `mapstructure:"node_outage_budget" json:"node_outage_budget,omitempty"`
	// Relay lets a multi-node lane read the NAS about once: each file is
	// read by one node and relayed to the others over the node network
	// (mTLS between node workers, internal/relay). Default on; false turns
	// it off for every lane (a recipe may turn it off for its own).
	Relay *bool `mapstructure:"relay" json:"relay,omitempty"`
	// RelayPort is the TCP port each node worker's relay server binds on
	// the node's address (default 7290; 0 picks a free port, reachable
	// only by node workers in the same process, as in the demo).
	RelayPort int `mapstructure:"relay_port" json:"relay_port"`
	// MetricsAddress is where every worker process of this config (worker
	// dev/control/node, the control service) serves Prometheus metrics at
	// /metrics: loopback only, since the endpoint has no authentication
	// (scrape a remote node through SSH, or a Prometheus on the node).
	// "off" serves none; port 0 picks a free port (tests).
	MetricsAddress string    `mapstructure:"metrics_address" json:"metrics_address,omitempty"`
	Temporal       Temporal  `mapstructure:"temporal" json:"temporal"`
	Nodes          []Node    `mapstructure:"nodes" json:"nodes"`
	Clusters       []Cluster `mapstructure:"clusters" json:"clusters"`
	// Devices are extra powered gear (switches) that power workflows drive.
	Devices []Device `mapstructure:"devices" json:"devices,omitempty"`
}

// Temporal says which Temporal server to use. An empty Address means the
// embedded server on 127.0.0.1 with its SQLite file under state_dir.
type Temporal struct {
	Address   string `mapstructure:"address" json:"address"`
	Namespace string `mapstructure:"namespace" json:"namespace"`
	// Port is the embedded server's frontend gRPC port (default 7233).
	Port int `mapstructure:"port" json:"port"`
	// UIPort is the embedded web UI port (default 8233).
	UIPort int `mapstructure:"ui_port" json:"ui_port"`
	// TLSCert/TLSKey/TLSCA are file paths for mTLS to an external cluster.
	TLSCert string `mapstructure:"tls_cert" json:"tls_cert,omitempty"`
	TLSKey  string `mapstructure:"tls_key" json:"tls_key,omitempty"`
	TLSCA   string `mapstructure:"tls_ca" json:"tls_ca,omitempty"`
	// APIKeyEnv names the environment variable holding a Temporal Cloud API
	// key; the key itself never appears in config.
	APIKeyEnv string `mapstructure:"api_key_env" json:"api_key_env,omitempty"`
}

// Node is one GPU machine.
type Node struct {
	Name string `mapstructure:"name" json:"name"`
	// SSH is user@host:port; empty means this machine.
	SSH string `mapstructure:"ssh" json:"ssh"`
	// KnownHosts is the known_hosts file the host key is checked against.
	KnownHosts string `mapstructure:"known_hosts" json:"known_hosts,omitempty"`
	// Identity is the private key file for SSH.
	Identity string `mapstructure:"identity" json:"identity,omitempty"`
	// Docker is the Docker endpoint on the node (default unix:///var/run/docker.sock).
	Docker string `mapstructure:"docker" json:"docker,omitempty"`
	// Address is the node's data-plane address (RoCE/IP) used for
	// --dist-init-addr and API URLs.
	Address string `mapstructure:"address" json:"address"`
	// Roots are the directories staging may write on this node.
	Roots []string `mapstructure:"roots" json:"roots"`
	// FSRoot prefixes every node-local path the node worker touches, so
	// several simulated nodes on one machine do not share a disk. Default "/".
	FSRoot string `mapstructure:"fs_root" json:"fs_root,omitempty"`
	// Power says how to switch the node on and off.
	Power Power `mapstructure:"power" json:"power,omitempty"`
	// Infiniband says the node has /dev/infiniband (RDMA over RoCE), so
	// its containers get the device for NCCL. Set here, or by the node
	// activity that detects it; HCA set implies it.
	Infiniband bool `mapstructure:"infiniband" json:"infiniband,omitempty"`
	// HCA lists the node's RDMA devices (rocep1s0f1,roceP2p1s0f1) and
	// IfName its RoCE netdevs (enp1s0f1np1), comma-separated, as NCCL
	// reads them: rendered into NCCL_IB_HCA, UCX_NET_DEVICES and the
	// *_SOCKET_IFNAME variables of that node's ranks.
	HCA    string `mapstructure:"hca" json:"hca,omitempty"`
	IfName string `mapstructure:"ifname" json:"ifname,omitempty"`
	// ClearHelper is an argv prefix (["sudo", "-n"]) the node worker puts
	// before its remove command when a [hooks] clear directory holds entries
	// it cannot delete itself (receipt roots written by root-run
	// containers). Empty: the worker removes them itself.
	ClearHelper []string `mapstructure:"clear_helper" json:"clear_helper,omitempty"`
}

// Power configures a node's or device's power control.
type Power struct {
	// Relay is a Home Assistant switch entity (switch.dgx1_outlet).
	Relay string `mapstructure:"relay" json:"relay,omitempty"`
	// HAURL is the Home Assistant base URL.
	HAURL string `mapstructure:"ha_url" json:"ha_url,omitempty"`
	// TokenEnv / TokenFile name where the HA token is read from; the token
	// itself never appears in config, workflow inputs or history.
	TokenEnv  string `mapstructure:"token_env" json:"token_env,omitempty"`
	TokenFile string `mapstructure:"token_file" json:"token_file,omitempty"`
	// WOL is the MAC address for Wake-on-LAN, Broadcast its target address.
	WOL       string `mapstructure:"wol" json:"wol,omitempty"`
	Broadcast string `mapstructure:"broadcast" json:"broadcast,omitempty"`
	// Shutdown is the graceful shutdown: "ssh:COMMAND" or "routeros:HOST".
	Shutdown string `mapstructure:"shutdown" json:"shutdown,omitempty"`
}

// Device is powered network gear (a switch) that is not a node.
type Device struct {
	Name       string `mapstructure:"name" json:"name"`
	SSH        string `mapstructure:"ssh" json:"ssh,omitempty"`
	KnownHosts string `mapstructure:"known_hosts" json:"known_hosts,omitempty"`
	Identity   string `mapstructure:"identity" json:"identity,omitempty"`
	Power      Power  `mapstructure:"power" json:"power"`
	// Behind names the nodes whose network goes through this gear: `power
	// off` switches it off only after every one of them is off (cutting a
	// switch first strands their shutdown), and `power off --cluster`
	// takes the gear behind which the cluster's nodes sit.
	Behind []string `mapstructure:"behind" json:"behind,omitempty"`
}

// Cluster is a named, ordered set of nodes; the first node is the head (rank 0).
type Cluster struct {
	Name  string   `mapstructure:"name" json:"name"`
	Nodes []string `mapstructure:"nodes" json:"nodes"`
}

// Recipe is one lane: what to run, where, and what to stage first.
type Recipe struct {
	// File is the recipe's path; Format is "toml" or "sparkrun".
	File   string `mapstructure:"-" json:"file"`
	Format string `mapstructure:"-" json:"format"`
	// Name is the lane's name (default: the file name without extension).
	// It becomes part of paths and container names, so it is a name, not a
	// path: ^[a-z0-9][a-z0-9._-]*$ (see ValidName).
	Name string `mapstructure:"name" json:"name"`
	// Aliases let operators say --lane mia.
	Aliases []string `mapstructure:"aliases" json:"aliases,omitempty"`
	Cluster string   `mapstructure:"cluster" json:"cluster"`
	// Runtime is sglang | vllm | exllamav3 | sim.
	Runtime string `mapstructure:"runtime" json:"runtime"`
	Image   string `mapstructure:"image" json:"image"`
	Model   string `mapstructure:"model" json:"model"`
	// MinNodes comes from sparkrun recipes; 0 means the cluster's size.
	MinNodes int `mapstructure:"min_nodes" json:"min_nodes,omitempty"`
	// MaxNodes comes from sparkrun recipes (single-node lanes say 1); 0
	// means no upper bound. On a larger cluster the lane runs on the
	// first MaxNodes nodes (the plan says so).
	MaxNodes int `mapstructure:"max_nodes" json:"max_nodes,omitempty"`
	// Mode is sparkrun's topology (solo | cluster | auto): solo runs on
	// the cluster's head alone, cluster needs at least two nodes.
	Mode string `mapstructure:"mode" json:"mode,omitempty"`
	// ModelRevision pins the model's hub revision (sparkrun's
	// model_revision): the {model_revision} placeholder, for a command
	// that passes --revision.
	ModelRevision string `mapstructure:"model_revision" json:"model_revision,omitempty"`
	// Executor is the container's shape (sparkrun's executor_config):
	// GPUs, network, IPC, shm, user, ulimits, devices. Empty fields take
	// sparklane's defaults (DefaultExecutor), which are what NCCL over
	// RoCE needs on DGX Spark.
	Executor Executor `mapstructure:"executor_config" json:"executor_config,omitempty"`
	// PreExec runs in each rank's container before the serve command
	// (sparkrun's pre_exec; resolved mods add their copy and run.sh here),
	// PostExec in the head's container once it serves, PostCommands on
	// the control host after that. Strings are shell commands; a copy
	// entry is {copy: SRC, dest: DST}.
	PreExec      []PreExec `mapstructure:"pre_exec" json:"pre_exec,omitempty"`
	PostExec     []string  `mapstructure:"post_exec" json:"post_exec,omitempty"`
	PostCommands []string  `mapstructure:"post_commands" json:"post_commands,omitempty"`
	// RuntimeConfig is sparkrun's runtime-specific table; BuildArgs,
	// Builder and BuilderConfig say how the image was built. sparklane
	// builds no image: it records them (the image must exist on every
	// node) and the plan warns.
	RuntimeConfig map[string]any `mapstructure:"runtime_config" json:"runtime_config,omitempty"`
	BuildArgs     any            `mapstructure:"build_args" json:"build_args,omitempty"`
	Builder       string         `mapstructure:"builder" json:"builder,omitempty"`
	BuilderConfig map[string]any `mapstructure:"builder_config" json:"builder_config,omitempty"`
	// LoadWarnings are findings of loading (a sparkrun key sparklane does
	// not apply, and why); Render copies them into the plan's warnings.
	LoadWarnings []string `mapstructure:"-" json:"-"`
	// RecipeVersion and Metadata are carried from sparkrun v2 recipes so a
	// loaded recipe round-trips what its authors wrote. Mods name mod
	// directories (a run.sh each) found next to the recipe or in its
	// registry clone's *-mods/; loading turns each into PreExec entries
	// (copy to /workspace/mods/NAME, run run.sh), or fails naming it.
	RecipeVersion string         `mapstructure:"recipe_version" json:"recipe_version,omitempty"`
	Metadata      map[string]any `mapstructure:"metadata" json:"metadata,omitempty"`
	Mods          []string       `mapstructure:"mods" json:"mods,omitempty"`
	// Command is a template with {key} placeholders filled from Defaults,
	// overrides and the built-ins (model, image, node_rank, nnodes, head_addr...).
	Command  string            `mapstructure:"command" json:"command"`
	Defaults map[string]any    `mapstructure:"defaults" json:"defaults,omitempty"`
	Env      map[string]string `mapstructure:"env" json:"env,omitempty"`
	// EnvFrom are container variables whose values are secrets (API
	// tokens): each names where the node worker reads the value when it
	// creates the container — "env:NAME" (its own environment) or
	// "file:/path" (a file on the node) — so the value never enters a
	// workflow input, the Temporal history, a plan, a log or a report.
	EnvFrom map[string]string `mapstructure:"env_from" json:"env_from,omitempty"`
	Mounts  []Mount           `mapstructure:"mounts" json:"mounts,omitempty"`
	Hooks   Hooks             `mapstructure:"hooks" json:"hooks,omitempty"`
	Staging []Staging         `mapstructure:"staging" json:"staging,omitempty"`
	Probe   Probe             `mapstructure:"probe" json:"probe,omitempty"`
	// NodeOutageBudget overrides the config's for this lane (a lane whose
	// nodes take long to reboot).
	NodeOutageBudget Duration `mapstructure:"node_outage_budget" json:"node_outage_budget,omitempty"`
	// Relay = false stages this lane without relaying between nodes (each
	// node reads the NAS itself), whatever the config says.
	Relay *bool `mapstructure:"relay" json:"relay,omitempty"`
	Bench Bench `mapstructure:"bench" json:"bench,omitempty"`
}

// Mount is a bind mount into every rank's container. Src is a node-local
// path (prefixed by the node's fs_root) unless it lies under shared_roots.
type Mount struct {
	Src      string `mapstructure:"src" json:"src"`
	Dst      string `mapstructure:"dst" json:"dst"`
	ReadOnly bool   `mapstructure:"read_only" json:"read_only"`
	// Host lets Src name a host path outside the node's roots and
	// shared_roots (a device socket, a driver directory). Without it such a
	// source is refused; recipe check lists every host mount.
	Host bool `mapstructure:"host" json:"host,omitempty"`
	// Create makes the serve step create Src when it is missing (a JIT
	// cache the engine fills: nothing stages it, so a fresh node would
	// otherwise fail with SourceMissing). Src must lie under a node root
	// (not a shared root, not a host path); it is made beneath the root
	// without following links, owned by the container's user when the
	// lane runs as a numeric user, else by the node worker.
	Create bool `mapstructure:"create" json:"create,omitempty"`
}

// Hooks run on each node before its containers start.
type Hooks struct {
	// BeforeServe are shell commands run with sh -c on the node.
	BeforeServe []string `mapstructure:"before_serve" json:"before_serve,omitempty"`
	// Clear lists node directories whose contents are removed (the
	// directories themselves kept) before serve: per-run receipt roots that a
	// runtime treats as strict-on-exist, where a stale entry poisons every
	// restart. Each must lie strictly inside a node root, and never be (or
	// hold) a staging dst or export of the recipe.
	Clear []string `mapstructure:"clear" json:"clear,omitempty"`
	// Timeout bounds each hook (default 2m).
	Timeout Duration `mapstructure:"timeout" json:"timeout,omitempty"`
}

// Staging is one [[staging]] block.
type Staging struct {
	// Kind is "hub-mirror" or "sparse-rows"; ID names the block in reports.
	Kind string `mapstructure:"kind" json:"kind"`
	ID   string `mapstructure:"id" json:"id"`
	Src  string `mapstructure:"src" json:"src"`
	Dst  string `mapstructure:"dst" json:"dst"`
	// MinFree is the free space required on dst before any write, in bytes
	// (parsed from "100G" by the size hook: unit:"bytes").
	MinFree int64 `mapstructure:"min_free" unit:"bytes" json:"min_free,omitempty"`
	// hub-mirror
	Repos   []string `mapstructure:"repos" json:"repos,omitempty"`
	Skip    []string `mapstructure:"skip" json:"skip,omitempty"`
	Verify  string   `mapstructure:"verify" json:"verify,omitempty"` // sampled | sha256
	Exports []Export `mapstructure:"exports" json:"exports,omitempty"`
	// sparse-rows
	Format  string   `mapstructure:"format" json:"format,omitempty"` // packed | sparse-copy
	Tensors []string `mapstructure:"tensors" json:"tensors,omitempty"`
	Layers  []int    `mapstructure:"layers" json:"layers,omitempty"`
	// Mount is the container path dst is bound at (read-only), EnvVar the
	// variable that points the runtime at it (DSV41_PACKED_DIR).
	Mount  string `mapstructure:"mount" json:"mount,omitempty"`
	EnvVar string `mapstructure:"env" json:"env,omitempty"`
	// RowsEnv names the variable the runtime cross-checks each layer's
	// table against (SPARK_ENGRAM_ROWS): the table's total rows, one number
	// per layer, comma-separated in layer order. The serve step fills it on
	// each node from the staged manifest (sparse-copy) and checks the
	// rank's staged rows are its tile of those totals; Rows (the total,
	// every layer alike), when given, is rendered and cross-checked too. A
	// packed block needs Rows (its files hold only the rank's rows).
	RowsEnv string `mapstructure:"rows_env" json:"rows_env,omitempty"`
	Rows    int64  `mapstructure:"rows" json:"rows,omitempty"`
	// RecordBytes is the size of one record the runtime reads from packed
	// files (264 on mia; internal/sparserows/FORMAT.md). Staging refuses,
	// before writing anything, a table whose row width gives another size,
	// instead of packing rows the runtime would misread. 0: any width.
	RecordBytes int64 `mapstructure:"record_bytes" json:"record_bytes,omitempty"`
}

// Export materializes a regular-file tree of one repo for O_NOFOLLOW runtimes.
type Export struct {
	Repo string `mapstructure:"repo" json:"repo"`
	Path string `mapstructure:"path" json:"path"`
	// Mount is the container path the export is bound at (read-only).
	Mount string `mapstructure:"mount" json:"mount,omitempty"`
}

// Probe says how to decide a lane is serving.
type Probe struct {
	// Ready is the readiness budget (default 30m).
	Ready Duration `mapstructure:"ready" json:"ready,omitempty"`
	// Path is the health path (default /v1/models).
	Path  string  `mapstructure:"path" json:"path,omitempty"`
	Smoke []Smoke `mapstructure:"smoke" json:"smoke,omitempty"`
	// ModelType is chat (the default), embedding or reranker: an
	// embedding or reranker engine has no completions endpoint, so it is
	// probed on its own (ProbeEndpoint). For sparkrun recipes it is read
	// from the command (--runner pooling) and the model name.
	ModelType string `mapstructure:"model_type" json:"model_type,omitempty"`
	// LogSignatures must all appear in the head's log (each rank's, with
	// the rank's own lines) before the lane is ready: the lines a
	// production engine prints when its gated features are on. A missing
	// one fails readiness naming it.
	LogSignatures []string `mapstructure:"log_signatures" json:"log_signatures,omitempty"`
	// APIKeyEnv names the environment variable (on the control host) that
	// holds the engine's API key, sent by probe and bench as a bearer
	// token; the key itself never enters config, plans or history.
	APIKeyEnv string `mapstructure:"api_key_env" json:"api_key_env,omitempty"`
	// DecodePromptTokens / DecodeMaxTokens shape the decode probe
	// (temperature 0); unset, the operator's log's shape
	// (DefaultDecodePromptTokens, DefaultDecodeMaxTokens), so probe numbers
	// compare with the ones recorded there.
	DecodePromptTokens int `mapstructure:"decode_prompt_tokens" json:"decode_prompt_tokens,omitempty"`
	DecodeMaxTokens    int `mapstructure:"decode_max_tokens" json:"decode_max_tokens,omitempty"`
}

// The decode probe's default shape: the operator's log measured decode
// with a 487-token prompt and 400 generated tokens at temperature 0.
const (
	DefaultDecodePromptTokens = 487
	DefaultDecodeMaxTokens    = 400
)

// Smoke is one prompt whose answer must contain Expect.
type Smoke struct {
	Prompt string `mapstructure:"prompt" json:"prompt"`
	Expect string `mapstructure:"expect" json:"expect"`
}

// Bench configures the bench step.
type Bench struct {
	PromptLengths []int `mapstructure:"prompt_lengths" json:"prompt_lengths,omitempty"`
	Depths        []int `mapstructure:"depths" json:"depths,omitempty"`
	Concurrency   []int `mapstructure:"concurrency" json:"concurrency,omitempty"`
	GenTokens     int   `mapstructure:"gen_tokens" json:"gen_tokens,omitempty"`
	// Runs is how many times the pp/tg sweep is repeated (0: the bench's
	// default, 3): figures are medians over the runs and their spread is
	// what a verdict must beat, so more runs on a noisy engine mean fewer
	// changes called on noise, at the cost of a longer bench.
	Runs int `mapstructure:"runs" json:"runs,omitempty"`
	// Harness is an external command template ({base_url} {model}
	// {output_dir} {seed} {mode} {mode_flags} {parallel} {tokenizer}), or
	// the word "tool-eval-bench" for the shipped template of that harness
	// (bench.ToolEvalBenchTemplate); HarnessFormat names its JSON report
	// shape (tool-eval-bench).
	Harness       string `mapstructure:"harness" json:"harness,omitempty"`
	HarnessFormat string `mapstructure:"harness_format" json:"harness_format,omitempty"`
	// QualityBand is the ± score band judged neutral against a baseline (default 2).
	QualityBand float64 `mapstructure:"quality_band" json:"quality_band,omitempty"`
	// Seed seeds the perf sweep's prompts and is passed to the harness as
	// {seed} (default 42), so two benches of one lane send the same
	// requests and their scores can be compared; `starter bench --seed`
	// overrides it.
	Seed *int64 `mapstructure:"seed" json:"seed,omitempty"`
	// Mode is the harness's scenario pool: "standard", "hardmode" (adds
	// tool-eval-bench's hard scenarios) or "short"; the template gets it as
	// {mode} and as tool-eval-bench's flags {mode_flags}. Reports of
	// different modes are not comparable, and the verdict says so.
	Mode string `mapstructure:"mode" json:"mode,omitempty"`
}

// DefaultBenchSeed is the seed every bench uses unless told otherwise: the
// operator's runs were all made with 42.
const DefaultBenchSeed int64 = 42

// BenchModes are the harness scenario pools [bench] mode may name.
var BenchModes = []string{"standard", "hardmode", "short"}

// NodePlan is what one node runs for a lane: the rendered result of a
// recipe on a cluster. It is plain data so it can travel in workflow inputs.
type NodePlan struct {
	Node          string `json:"node"`
	Rank          int    `json:"rank"`
	Head          bool   `json:"head"`
	ContainerName string `json:"container_name"`
	Image         string `json:"image"`
	// Command is the rendered command line; Argv the same split for exec.
	Command string            `json:"command"`
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env"`
	// EnvFrom is the recipe's env_from, resolved by the node worker
	// (secretenv.Resolve) when it creates the container; values never
	// travel in the plan.
	EnvFrom map[string]string `json:"env_from,omitempty"`
	Mounts  []Mount           `json:"mounts"`
	// GPUs is true for real runtimes (device requests), false for sim.
	GPUs bool `json:"gpus"`
	// Container is how the rank's container is started: network, IPC,
	// shm, ulimits, devices, user, security options.
	Container ContainerSpec `json:"container"`
	// PreExec runs in the container before the serve command (mods).
	PreExec []PreExec `json:"pre_exec,omitempty"`
	// RowsFrom are the sparse-rows blocks whose rows_env the serve step
	// fills on the node from what was staged there (the manifest's table
	// totals, per layer), cross-checked against the rank's tile and the
	// recipe's rows: the numbers the runtime checks its tables against
	// cannot drift from the staged data.
	RowsFrom []RowsFrom `json:"rows_from,omitempty"`
}

// RowsFrom is one sparse-rows block's row-count variable, filled at serve
// time from the block's staged dst.
type RowsFrom struct {
	// Env is the variable (SPARK_ENGRAM_ROWS); Dst the block's staged dir
	// on the node (fs_root not applied); Format packed or sparse-copy.
	Env    string `json:"env"`
	Dst    string `json:"dst"`
	Format string `json:"format"`
	// Layers are the block's layers in order; Rows the recipe's total rows
	// per layer (0: not given).
	Layers []int `json:"layers"`
	Rows   int64 `json:"rows,omitempty"`
	// Rank and TP are the rank's place in the tensor-parallel world the
	// rows were tiled for.
	Rank int `json:"rank"`
	TP   int `json:"tp"`
}

// LanePlan is a recipe rendered on its cluster.
type LanePlan struct {
	Lane       string     `json:"lane"`
	Cluster    string     `json:"cluster"`
	Runtime    string     `json:"runtime"`
	Model      string     `json:"model"`
	RecipeHash string     `json:"recipe_hash"`
	HeadAddr   string     `json:"head_addr"`
	APIPort    int        `json:"api_port"`
	TP         int        `json:"tp"`
	Nodes      []NodePlan `json:"nodes"`
	// Warnings are non-fatal findings of rendering, e.g. an -o override no
	// placeholder uses (a typo would otherwise change nothing, silently).
	Warnings []string `json:"warnings,omitempty"`
	// Relay is set when the lane's hub-mirror blocks are relayed between
	// its nodes (relay on, more than one node, every node with an address).
	Relay *RelayPlan `json:"relay,omitempty"`
}

// RelayPlan is what node workers need to relay a lane's staging: where
// each node's relay server listens. Addresses only — identities stay in
// files on the nodes, never in workflow inputs.
type RelayPlan struct {
	// Peers maps each node of the lane to its relay server's host:port.
	Peers map[string]string `json:"peers"`
}
