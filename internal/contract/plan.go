package contract

import (
	"fmt"
	"strconv"
)

// NodePlan is what one node runs for a lane: the rendered result of a
// recipe on a cluster. It is plain data so it can travel in workflow inputs.
type NodePlan struct {
	Node          string   `json:"node"`
	Rank          int      `json:"rank"`
	Head          bool     `json:"head"`
	ContainerName string   `json:"container_name"`
	Image         ImageRef `json:"image"`
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
	// Topology is the cluster's declared fabric (switch, pair, ring,
	// mesh; empty: undeclared): the node worker renders the comm env of
	// the RDMA devices it detects for it, as the plan's were.
	Topology string `json:"topology,omitempty"`
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

// LanePlan is a recipe rendered on its cluster (lane.Render): what every
// node of the lane runs, carried by the workflows that start, probe, bench
// and keep it, so a run does exactly what the plan recorded in its
// history says even if the recipe file changes meanwhile.
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
	// PostExec are the recipe's post_exec commands rendered ({head_ip},
	// {port}, {base_url}, {container_name}, {cache_dir}, {cluster_id} and
	// the defaults filled): run in the head's container, in order, once
	// the lane answers. PostCommands, rendered alike, run on the control
	// host after them. StopAfterPost stops the lane when both succeeded.
	PostExec      []string `json:"post_exec,omitempty"`
	PostCommands  []string `json:"post_commands,omitempty"`
	StopAfterPost bool     `json:"stop_after_post,omitempty"`
	// Relay is set when the lane's hub-mirror blocks are relayed between
	// its nodes (relay on, more than one node, every node with an address).
	Relay *RelayPlan `json:"relay,omitempty"`
	// ImageInsecureRegistries are the fleet config's
	// image_insecure_registries (host[:port]): registries the node pulling
	// the lane's image may reach over plain HTTP or unverified TLS
	// (Recipe.PullFor). ConfigFile is the fleet config the plan was
	// rendered from, named in a pull's errors.
	ImageInsecureRegistries []string `json:"image_insecure_registries,omitempty"`
	ConfigFile              string   `json:"config_file,omitempty"`
}

// RelayPlan is what node workers need to relay a lane's staging: where
// each node's relay server listens. Addresses only — identities stay in
// files on the nodes, never in workflow inputs.
type RelayPlan struct {
	// Peers maps each node of the lane to its relay server's host:port.
	Peers map[string]string `json:"peers"`
}

// Ulimit is one resource limit of a container (-1 is unlimited), as the
// serve step hands it to Docker.
type Ulimit struct {
	Name string `json:"name"`
	Soft int64  `json:"soft"`
	Hard int64  `json:"hard"`
}

// ContainerSpec is the rendered container shape of one rank: what the
// serve step passes to Docker, shown in --dry-run. Empty Network and IPC
// mean DefaultNetwork and DefaultIPC.
type ContainerSpec struct {
	// GPUs is the --gpus value ("all"), empty for none.
	GPUs        string   `json:"gpus,omitempty"`
	Network     string   `json:"network"`
	IPC         string   `json:"ipc"`
	ShmSize     string   `json:"shm_size,omitempty"`
	ShmBytes    int64    `json:"shm_bytes,omitempty"`
	User        string   `json:"user,omitempty"`
	Privileged  bool     `json:"privileged"`
	SecurityOpt []string `json:"security_opt,omitempty"`
	CapAdd      []string `json:"cap_add,omitempty"`
	Ulimits     []Ulimit `json:"ulimits,omitempty"`
	// Devices are host device paths bound at the same path.
	Devices       []string `json:"devices,omitempty"`
	MemoryBytes   int64    `json:"memory_bytes,omitempty"`
	RestartPolicy string   `json:"restart_policy,omitempty"`
	Labels        []string `json:"labels,omitempty"`
	Entrypoint    *string  `json:"entrypoint,omitempty"`
	// DetectRDMA is true when the recipe names no devices: the node
	// worker then adds /dev/infiniband itself when it finds the device
	// there (a node the config says nothing about still gets RDMA).
	DetectRDMA bool `json:"detect_rdma,omitempty"`
}

// Container shape values the serve step and DockerArgs fall back on when a
// spec leaves them empty: NCCL and the engines' rendezvous use the node's
// own interfaces and shared memory. InfinibandDevice is the RDMA device
// bound into a rank's container when its node has one.
const (
	DefaultNetwork   = "host"
	DefaultIPC       = "host"
	InfinibandDevice = "/dev/infiniband"
)

// ContainerName is the deterministic name of a lane's rank container, so a
// retried start looks before it creates. Plans are only rendered for lanes
// whose name passed config.ValidName, so it is always a valid Docker name.
func ContainerName(lane string, rank int) string {
	return fmt.Sprintf("sparklane-%s-r%d", lane, rank)
}

// DockerArgs is the container shape as `docker run` flags (what --dry-run
// and `recipe render` show, and what an operator would type by hand).
// Devices the node worker adds when it detects RDMA are not known yet and
// are said so by DetectRDMA.
func (c ContainerSpec) DockerArgs() []string {
	var out []string
	if c.GPUs != "" {
		out = append(out, "--gpus", c.GPUs)
	}
	out = append(out, "--network", pickStr(c.Network, DefaultNetwork), "--ipc", pickStr(c.IPC, DefaultIPC))
	if c.ShmSize != "" {
		out = append(out, "--shm-size", c.ShmSize)
	}
	if c.Privileged {
		out = append(out, "--privileged")
	}
	for _, s := range c.SecurityOpt {
		out = append(out, "--security-opt", s)
	}
	for _, s := range c.CapAdd {
		out = append(out, "--cap-add", s)
	}
	for _, u := range c.Ulimits {
		v := strconv.FormatInt(u.Soft, 10)
		if u.Hard != u.Soft {
			v += ":" + strconv.FormatInt(u.Hard, 10)
		} else if u.Soft == -1 {
			v = "-1:-1"
		}
		out = append(out, "--ulimit", u.Name+"="+v)
	}
	for _, d := range c.Devices {
		out = append(out, "--device", d)
	}
	if c.User != "" {
		out = append(out, "--user", c.User)
	}
	if c.MemoryBytes > 0 {
		out = append(out, "--memory", strconv.FormatInt(c.MemoryBytes, 10))
	}
	if c.Entrypoint != nil {
		out = append(out, "--entrypoint", *c.Entrypoint)
	}
	for _, l := range c.Labels {
		out = append(out, "--label", l)
	}
	return out
}

func pickStr(v, def string) string {
	if v != "" {
		return v
	}
	return def
}
