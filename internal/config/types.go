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
	// DisabledRegistries are those `starter registry disable` took out of Registries (name → path).
	DisabledRegistries map[string]string `mapstructure:"-" json:"disabled_registries,omitempty"`
	// Notes are what the load read in a form it still accepts but that
	// should be rewritten (an ssh target without its port): the starter
	// prints them once per command, so the file gets fixed, never refused.
	Notes []string `mapstructure:"-" json:"-"`
	// DefaultCluster is the cluster a recipe without one (every sparkrun
	// recipe) runs on when no --cluster is given.
	DefaultCluster string `mapstructure:"default_cluster" json:"default_cluster,omitempty"`
	// HFCacheDir is the NAS hub root (models--org--name/...) that staging reads.
	HFCacheDir string `mapstructure:"hf_cache_dir" json:"hf_cache_dir"`
	// HFEndpoint is the Hub `starter fetch` downloads from (a mirror, an
	// air-gapped endpoint). Empty: the HF_ENDPOINT of the shell running
	// the starter (it travels with the run), else the fetching worker's,
	// as the Hub's own tools read it, else the public Hub.
	HFEndpoint string `mapstructure:"hf_endpoint" json:"hf_endpoint,omitempty"`
	// HFTokenFile is a file on the fetching worker's host holding the Hub
	// token for private and gated repos. Only its path travels in a run;
	// the worker reads the token when it fetches, so it never enters
	// history, logs or reports. Empty: the worker's HF_TOKEN, else the
	// Hub tools' token file (~/.cache/huggingface/token).
	HFTokenFile string `mapstructure:"hf_token_file" json:"hf_token_file,omitempty"`
	// FetchNode is the worker that downloads from the Hub into the NAS:
	// a node's name (its worker must mount the NAS read-write), or
	// "control" (the control service, the default).
	FetchNode string `mapstructure:"fetch_node" json:"fetch_node,omitempty"`
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
	// ImageRegistry (host[:port][/prefix]), when set, is where one node
	// pulls a lane's image when no node has it, instead of the registry the
	// image's name carries (Docker's rules: docker.io without a host).
	// ImageRegistryAuthFile is a Docker config.json on the control host:
	// the control service hands the pulling node only that registry's
	// entry, for one pull (internal/imagespec.CheckRegistry). A
	// recipe's own keys override both.
	ImageRegistry         string `mapstructure:"image_registry" json:"image_registry,omitempty"`
	ImageRegistryAuthFile string `mapstructure:"image_registry_auth_file" json:"image_registry_auth_file,omitempty"`
	// ImageInsecureRegistries (host[:port]) are registries a pulling node
	// may reach over plain HTTP, or HTTPS without verifying its
	// certificate (a LAN registry): sparklane's own registry client pulls,
	// so no node's Docker needs insecure-registries.
	ImageInsecureRegistries []string `mapstructure:"image_insecure_registries" json:"image_insecure_registries,omitempty"`
	// Keep is how the keeper of each cluster watches its lane ([keep]); a
	// recipe's [keep] wins key by key.
	Keep Keep `mapstructure:"keep" json:"keep,omitempty"`
	// Gateway is the one [gateway] table, GatewayList the [[gateways]]
	// (several, each named): the lanes' client-facing address (gateway.go).
	Gateway     *Gateway  `mapstructure:"gateway" json:"gateway,omitempty"`
	GatewayList []Gateway `mapstructure:"gateways" json:"gateways,omitempty"`
	// Staging bounds what a staging pass takes from a node while a lane
	// serves there ([staging]; a recipe's [[staging]] blocks are another
	// thing: what to stage).
	Staging StagingLimits `mapstructure:"staging" json:"staging,omitempty"`
	// Relay lets a multi-node lane read the NAS about once: each file is
	// read by one node and relayed to the others over the node network
	// (mTLS between node workers, internal/engine/relay). Default on; false turns
	// it off for every lane (a recipe may turn it off for its own).
	Relay *bool `mapstructure:"relay" json:"relay,omitempty"`
	// RelayPort is the TCP port each node worker's relay server binds on
	// the node's address (default 7290; 0 picks a free port, reachable
	// only by node workers in the same process, as in the demo).
	RelayPort int `mapstructure:"relay_port" json:"relay_port"`
	// ImagePort is the TCP port a node binds on its address only while it
	// sends a lane's image to the next node of a transfer (default 7291;
	// mTLS with the relay's fleet identities; 0 is the default).
	ImagePort int `mapstructure:"image_port" json:"image_port"`
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
	// Port is the embedded server's frontend gRPC port (default 7233 when
	// the key is absent). 0 asks for a free port, picked when the control
	// service starts and published in STATE_DIR/control.lock, where
	// starters and workers on this machine read it (tests, benchmarks, a
	// second fleet on one host); remote nodes need a fixed one, as their
	// tunnels forward it.
	Port int `mapstructure:"port" json:"port"`
	// UIPort is the embedded web UI port (default 8233; 0: a free port,
	// shown where the service prints its web UI; -1: no web UI).
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
	// GPUMemory ("128GB") is what a lane may use here; 0: as discovered (internal/engine/memfit).
	GPUMemory int64 `mapstructure:"gpu_memory" json:"gpu_memory,omitempty" unit:"bytes"`
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
	// Topology (switch|pair|ring|mesh) picks the comm env (internal/lane/topology.go).
	Topology string `mapstructure:"topology" json:"topology,omitempty"`
}

// Recipe is a lane recipe file as decoded: sparklane TOML or sparkrun v2
// YAML, checked key by key and defaulted by the loader. It is the file
// format only; internal/lane turns it into contract.Recipe, the form a run
// carries, whose fields say what each key does to a lane. Here each key's
// file rules are kept (names, defaults, what a sparkrun recipe maps to).
type Recipe struct {
	// File is the recipe's path, so errors can name it; Format is "toml"
	// or "sparkrun" (rendering follows sparkrun's rules for the latter).
	File   string `mapstructure:"-"`
	Format string `mapstructure:"-"`
	// Name is the lane's name (default: the file name without extension);
	// it names paths and containers, so ValidName checks it. Aliases let
	// operators say --lane mia.
	Name    string   `mapstructure:"name"`
	Aliases []string `mapstructure:"aliases"`
	// Cluster may be empty (every sparkrun recipe): --cluster or
	// default_cluster decide then. Runtime is one of Runtimes.
	Cluster string `mapstructure:"cluster"`
	Runtime string `mapstructure:"runtime"`
	Image   string `mapstructure:"image"`
	Model   string `mapstructure:"model"`
	// MinNodes, MaxNodes, Mode and ModelRevision are sparkrun's topology
	// and pin keys (a TOML recipe may use them too); Mode solo/cluster
	// sets MinNodes and MaxNodes at load.
	MinNodes      int    `mapstructure:"min_nodes"`
	MaxNodes      int    `mapstructure:"max_nodes"`
	Mode          string `mapstructure:"mode"`
	ModelRevision string `mapstructure:"model_revision"`
	// Executor is executor_config: the container's shape.
	Executor Executor `mapstructure:"executor_config"`
	// PreExec, PostExec and PostCommands are sparkrun's hooks; loading
	// appends each resolved mod's copy and run.sh to PreExec.
	PreExec      []PreExec `mapstructure:"pre_exec"`
	PostExec     []string  `mapstructure:"post_exec"`
	PostCommands []string  `mapstructure:"post_commands"`
	// StopAfterPost stops the lane once its post hooks succeeded
	// (sparkrun's stop_after_post: a one-shot batch job on a lane).
	StopAfterPost bool `mapstructure:"stop_after_post"`
	// RuntimeConfig is recorded, never applied. BuildArgs, Builder and
	// BuilderConfig are sparkrun's build keys: internal/lane maps them onto
	// Build where they can.
	RuntimeConfig map[string]any `mapstructure:"runtime_config"`
	BuildArgs     any            `mapstructure:"build_args"`
	Builder       string         `mapstructure:"builder"`
	BuilderConfig map[string]any `mapstructure:"builder_config"`
	// Build is [build]: how the image is built on one node when no node
	// has it (contract.Build says what each key does; internal/lane checks).
	Build Build `mapstructure:"build"`
	// ImageRegistry and ImageRegistryAuthFile override the config's (the
	// auth file is on the control host).
	ImageRegistry         string `mapstructure:"image_registry"`
	ImageRegistryAuthFile string `mapstructure:"image_registry_auth_file"`
	// LoadWarnings are findings of loading (a sparkrun key sparklane does
	// not apply, and why); rendering copies them into the plan's warnings.
	LoadWarnings []string `mapstructure:"-"`
	// RecipeVersion and Metadata round-trip a sparkrun v2 recipe; Mods name
	// mod directories (a run.sh each), resolved at load or an error.
	RecipeVersion string         `mapstructure:"recipe_version"`
	Metadata      map[string]any `mapstructure:"metadata"`
	Mods          []string       `mapstructure:"mods"`
	// Command is the serve command template with {key} placeholders,
	// filled from Defaults, -o overrides and the built-ins.
	Command  string            `mapstructure:"command"`
	Defaults map[string]any    `mapstructure:"defaults"`
	Env      map[string]string `mapstructure:"env"`
	// EnvFrom maps a container variable to where its secret value is read
	// on the node ("env:NAME" or "file:/path"), never to the value.
	EnvFrom map[string]string `mapstructure:"env_from"`
	Mounts  []Mount           `mapstructure:"mounts"`
	Hooks   Hooks             `mapstructure:"hooks"`
	Staging []Staging         `mapstructure:"staging"`
	Probe   Probe             `mapstructure:"probe"`
	// NodeOutageBudget overrides the config's for this lane.
	NodeOutageBudget time.Duration `mapstructure:"node_outage_budget"`
	// Relay = false stages this lane without relaying, whatever the config says.
	Relay *bool `mapstructure:"relay"`
	Bench Bench `mapstructure:"bench"`
	// Keep overrides the config's [keep] for this lane (a lane that takes
	// 20 minutes to load wants a longer window).
	Keep Keep `mapstructure:"keep"`
	// Gateway is the recipe's [gateway]: the model names clients may ask
	// the gateway for this lane by, besides the name its engine serves
	// (aliases = ["chat"]; distinct from the lane's own aliases).
	Gateway RecipeGateway `mapstructure:"gateway"`
}

// RecipeGateway is a recipe's [gateway] table.
type RecipeGateway struct {
	Aliases []string `mapstructure:"aliases"`
}

// Build is a recipe's [build] table (contract.Build).
type Build struct {
	Context    string            `mapstructure:"context"`
	Git        string            `mapstructure:"git"`
	Ref        string            `mapstructure:"ref"`
	Dockerfile string            `mapstructure:"dockerfile"`
	Args       map[string]string `mapstructure:"args"`
	Node       string            `mapstructure:"node"`
}

// Keep is a [keep] table: how a cluster's keeper watches its lane after
// a cutover or up. Interval is the time between checks (default 30s);
// Restarts whole-lane restarts are allowed within Window (default 3 per
// 1h) before a crash-looping lane is stopped; Off = true starts no keeper.
type Keep struct {
	// Interval and Window have floors (the min tags): a keeper that checks
	// more often than every second only costs CPU, and a restart budget
	// over less than a minute never holds a crash loop (a written "0s" is
	// refused; leave the key out for the default).
	Interval time.Duration `mapstructure:"interval" json:"interval,omitempty" min:"1s"`
	Restarts int           `mapstructure:"restarts" json:"restarts,omitempty"`
	Window   time.Duration `mapstructure:"window" json:"window,omitempty" min:"1m"`
	Off      bool          `mapstructure:"off" json:"off,omitempty"`
	// Notify (config only) is told when a keeper stops healing: a command run on the control host, or a webhook URL.
	Notify string `mapstructure:"notify" json:"notify,omitempty"`
}

// Mount is one [[mounts]] table: a bind into every rank's container
// (contract.Mount says how src is mapped and checked).
type Mount struct {
	Src      string `mapstructure:"src"`
	Dst      string `mapstructure:"dst"`
	ReadOnly bool   `mapstructure:"read_only"`
	// Host allows a source outside the node's roots; Create has the serve
	// step make a missing source under a node root.
	Host   bool `mapstructure:"host"`
	Create bool `mapstructure:"create"`
}

// Hooks is the [hooks] table: shell commands before serve and the
// directories cleared before it.
type Hooks struct {
	BeforeServe []string `mapstructure:"before_serve"`
	Clear       []string `mapstructure:"clear"`
	// Timeout bounds each hook (default DefaultHookTimeout).
	Timeout time.Duration `mapstructure:"timeout"`
}

// StagingLimits is the fleet config's [staging] table: what a node's
// staging may take from a lane serving on the same node (a cutover
// stages the next lane while the previous one serves). On a DGX Spark the
// page cache and the engine's GPU allocations share one memory, so a
// pass beside a serving lane drops its pages behind it (always), writes
// at most ServingRate, and pauses while MemAvailable is under
// MinAvailable rather than push the engine into the OOM killer. A node
// serving nothing stages unbounded.
type StagingLimits struct {
	// ServingRate bounds the bytes per second a pass writes beside a
	// serving lane ("400M"; absent or "0": unbounded).
	ServingRate int64 `mapstructure:"serving_rate" json:"serving_rate,omitempty" unit:"bytes"`
	// MinAvailable is the node's MemAvailable under which a pass beside
	// a serving lane pauses until it is back over it (absent:
	// DefaultMinAvailable; "0": no floor).
	MinAvailable *int64 `mapstructure:"min_available" json:"min_available,omitempty" unit:"bytes"`
}

// DefaultMinAvailable is the memory floor when [staging] min_available is
// absent (issue 53): 8 GiB of a DGX Spark's 128 GB left to the engine's
// own growth beside its static allocation.
const DefaultMinAvailable = 8 << 30

// MinServingRate is the smallest serving_rate accepted: below it a block
// of hundreds of GB would stage for days.
const MinServingRate = 1 << 20

// Floor is the memory floor in bytes (0: none).
func (s StagingLimits) Floor() int64 {
	if s.MinAvailable == nil {
		return DefaultMinAvailable
	}
	return *s.MinAvailable
}

// Staging is one [[staging]] block as written: kind hub-mirror or
// sparse-rows, each with its own keys (contract.Staging says what they do).
type Staging struct {
	Kind string `mapstructure:"kind"`
	ID   string `mapstructure:"id"`
	Src  string `mapstructure:"src"`
	Dst  string `mapstructure:"dst"`
	// MinFree is a size ("100G"), read into bytes by the size hook.
	MinFree int64 `mapstructure:"min_free" unit:"bytes"`
	// hub-mirror keys; Verify defaults to DefaultVerify.
	Repos   []string `mapstructure:"repos"`
	Skip    []string `mapstructure:"skip"`
	Verify  string   `mapstructure:"verify"`
	Exports []Export `mapstructure:"exports"`
	// Revision pins the Hub commit (or branch or tag) `starter fetch`
	// downloads the block's repos at; Fetch = true fetches them before
	// each stage of the lane.
	Revision string `mapstructure:"revision"`
	Fetch    bool   `mapstructure:"fetch"`
	// sparse-rows keys; the env key is the variable pointing at Mount.
	Format      string   `mapstructure:"format"`
	Tensors     []string `mapstructure:"tensors"`
	Layers      []int    `mapstructure:"layers"`
	Mount       string   `mapstructure:"mount"`
	EnvVar      string   `mapstructure:"env"`
	RowsEnv     string   `mapstructure:"rows_env"`
	Rows        int64    `mapstructure:"rows"`
	RecordBytes int64    `mapstructure:"record_bytes"`
}

// Export is one exports entry of a hub-mirror block: a regular-file tree
// of one repo, bound at Mount.
type Export struct {
	Repo  string `mapstructure:"repo"`
	Path  string `mapstructure:"path"`
	Mount string `mapstructure:"mount"`
}

// Probe is the [probe] table: how a lane is judged serving.
type Probe struct {
	// Ready defaults to DefaultProbeReady, Path to DefaultProbePath;
	// ModelType is one of contract.ModelTypes (a sparkrun recipe's is read
	// from its command).
	Ready              time.Duration `mapstructure:"ready"`
	Path               string        `mapstructure:"path"`
	Smoke              []Smoke       `mapstructure:"smoke"`
	ModelType          string        `mapstructure:"model_type"`
	LogSignatures      []string      `mapstructure:"log_signatures"`
	APIKeyEnv          string        `mapstructure:"api_key_env"`
	DecodePromptTokens int           `mapstructure:"decode_prompt_tokens"`
	DecodeMaxTokens    int           `mapstructure:"decode_max_tokens"`
}

// Smoke is one [[probe.smoke]] prompt whose answer must contain Expect.
type Smoke struct {
	Prompt string `mapstructure:"prompt"`
	Expect string `mapstructure:"expect"`
}

// Bench is the [bench] table; Seed defaults to contract.DefaultBenchSeed,
// Mode to "standard" (one of contract.BenchModes), QualityBand to
// DefaultQualityBand, Runs (0: 3) to at most MaxBenchRuns.
type Bench struct {
	PromptLengths []int   `mapstructure:"prompt_lengths"`
	Depths        []int   `mapstructure:"depths"`
	Concurrency   []int   `mapstructure:"concurrency"`
	GenTokens     int     `mapstructure:"gen_tokens"`
	Runs          int     `mapstructure:"runs"`
	Harness       string  `mapstructure:"harness"`
	HarnessFormat string  `mapstructure:"harness_format"`
	QualityBand   float64 `mapstructure:"quality_band"`
	Seed          *int64  `mapstructure:"seed"`
	Mode          string  `mapstructure:"mode"`
}

// Executor is executor_config, sparkrun's container shape keys; list keys
// take a single string too. Empty fields take sparklane's defaults when
// the plan is rendered.
type Executor struct {
	GPUs          string   `mapstructure:"gpus"`
	Network       string   `mapstructure:"network"`
	IPC           string   `mapstructure:"ipc"`
	ShmSize       string   `mapstructure:"shm_size"`
	User          string   `mapstructure:"user"`
	SecurityOpt   []string `mapstructure:"security_opt"`
	CapAdd        []string `mapstructure:"cap_add"`
	Ulimit        []string `mapstructure:"ulimit"`
	Devices       []string `mapstructure:"devices"`
	Privileged    *bool    `mapstructure:"privileged"`
	MemoryLimit   string   `mapstructure:"memory_limit"`
	RestartPolicy string   `mapstructure:"restart_policy"`
	AutoRemove    *bool    `mapstructure:"auto_remove"`
	Labels        []string `mapstructure:"labels"`
	Entrypoint    *string  `mapstructure:"entrypoint"`
}

// PreExec is one pre_exec entry: a shell command (Run) or a host directory
// copied into the container (Copy → Dest), as a mod is.
type PreExec struct {
	Run  string `mapstructure:"run"`
	Copy string `mapstructure:"copy"`
	Dest string `mapstructure:"dest"`
	// Archive is never read from a file: the renderer fills the plan's
	// copy (contract.PreExec.Archive); here for the wire conversion.
	Archive []byte `mapstructure:"-"`
}
