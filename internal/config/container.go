package config

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/docker/go-units"
)

// Executor is a recipe's container shape, sparkrun's executor_config keys.
// Every field is optional; empty means sparklane's default.
type Executor struct {
	// GPUs is docker's --gpus value ("all"); "none" gives no GPUs.
	GPUs string `mapstructure:"gpus" json:"gpus,omitempty"`
	// Network and IPC default to "host": NCCL and the engines' rendezvous
	// use the node's own interfaces and shared memory.
	Network string `mapstructure:"network" json:"network,omitempty"`
	IPC     string `mapstructure:"ipc" json:"ipc,omitempty"`
	// ShmSize is /dev/shm's size ("32gb", sparkrun's default).
	ShmSize string `mapstructure:"shm_size" json:"shm_size,omitempty"`
	// User runs the container as this user ("1000:1000").
	User string `mapstructure:"user" json:"user,omitempty"`
	// SecurityOpt, CapAdd, Ulimit and Devices replace the defaults when
	// given (ulimits as docker writes them: "memlock=-1:-1").
	SecurityOpt []string `mapstructure:"security_opt" json:"security_opt,omitempty"`
	CapAdd      []string `mapstructure:"cap_add" json:"cap_add,omitempty"`
	Ulimit      []string `mapstructure:"ulimit" json:"ulimit,omitempty"`
	Devices     []string `mapstructure:"devices" json:"devices,omitempty"`
	// Privileged is off unless a recipe asks (sparkrun's rootless shape:
	// devices and ulimits instead).
	Privileged *bool `mapstructure:"privileged" json:"privileged,omitempty"`
	// MemoryLimit caps the container's memory ("100g").
	MemoryLimit string `mapstructure:"memory_limit" json:"memory_limit,omitempty"`
	// RestartPolicy and AutoRemove are carried for parity; the serve step
	// keeps its own restart policy and labels (a rank must not vanish
	// before its logs are read).
	RestartPolicy string   `mapstructure:"restart_policy" json:"restart_policy,omitempty"`
	AutoRemove    *bool    `mapstructure:"auto_remove" json:"auto_remove,omitempty"`
	Labels        []string `mapstructure:"labels" json:"labels,omitempty"`
	// Entrypoint replaces the image's ENTRYPOINT ("" clears it).
	Entrypoint *string `mapstructure:"entrypoint" json:"entrypoint,omitempty"`
}

// Ulimit is one resource limit of a container (-1 is unlimited).
type Ulimit struct {
	Name string `json:"name"`
	Soft int64  `json:"soft"`
	Hard int64  `json:"hard"`
}

// ContainerSpec is the rendered container shape of one rank: what the
// serve step passes to Docker, shown in --dry-run.
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

// PreExec is one pre_exec entry: a shell command run in the container
// (Run), or a host directory copied into it (Copy → Dest), which is how a
// mod reaches the container before its run.sh runs.
type PreExec struct {
	Run  string `mapstructure:"run" json:"run,omitempty"`
	Copy string `mapstructure:"copy" json:"copy,omitempty"`
	Dest string `mapstructure:"dest" json:"dest,omitempty"`
}

// Container defaults: what sparkrun runs on DGX Spark in its rootless
// mode (the shape that needs no --privileged): host network and IPC, all
// GPUs, 32 GB shm, memlock unlimited and a 64 MiB stack for NCCL over
// RoCE, no-new-privileges, /dev/infiniband on nodes that have it.
const (
	DefaultShmSize   = "32gb"
	DefaultNetwork   = "host"
	DefaultIPC       = "host"
	DefaultGPUs      = "all"
	InfinibandDevice = "/dev/infiniband"
)

// DefaultUlimits and DefaultSecurityOpt apply unless executor_config sets
// its own ulimit / security_opt.
var (
	DefaultUlimits     = []string{"memlock=-1:-1", "stack=67108864"}
	DefaultSecurityOpt = []string{"no-new-privileges"}
)

// containerSpec renders the container shape of recipe r on node n.
func containerSpec(r *Recipe, n *Node) (ContainerSpec, error) {
	e := r.Executor
	pick := func(v, def string) string {
		if v != "" {
			return v
		}
		return def
	}
	c := ContainerSpec{
		GPUs:          pick(e.GPUs, DefaultGPUs),
		Network:       pick(e.Network, DefaultNetwork),
		IPC:           pick(e.IPC, DefaultIPC),
		ShmSize:       pick(e.ShmSize, DefaultShmSize),
		User:          e.User,
		CapAdd:        e.CapAdd,
		RestartPolicy: e.RestartPolicy,
		Labels:        e.Labels,
		Entrypoint:    e.Entrypoint,
	}
	if r.Runtime == "sim" || c.GPUs == "none" {
		c.GPUs = ""
	}
	if e.Privileged != nil {
		c.Privileged = *e.Privileged
	}
	c.SecurityOpt = DefaultSecurityOpt
	if e.SecurityOpt != nil {
		c.SecurityOpt = e.SecurityOpt
	}
	if c.Privileged && e.SecurityOpt == nil {
		c.SecurityOpt = nil
	}
	// Docker's own reading of sizes: 32gb is 32 GiB.
	b, err := units.RAMInBytes(c.ShmSize)
	if err != nil {
		return c, recipeErr(r, "executor_config.shm_size", "%v", err)
	}
	c.ShmBytes = b
	if e.MemoryLimit != "" {
		if c.MemoryBytes, err = units.RAMInBytes(e.MemoryLimit); err != nil {
			return c, recipeErr(r, "executor_config.memory_limit", "%v", err)
		}
	}
	uls := DefaultUlimits
	if r.Runtime == "sim" {
		// engine-sim does no NCCL: it needs no locked memory, and a
		// dockerd not allowed to raise memlock (a CI runner) could not
		// start it.
		uls = nil
	}
	if e.Ulimit != nil {
		uls = e.Ulimit
	}
	for i, s := range uls {
		u, err := parseUlimit(s)
		if err != nil {
			return c, recipeErr(r, fmt.Sprintf("executor_config.ulimit[%d]", i), "%v", err)
		}
		c.Ulimits = append(c.Ulimits, u)
	}
	if e.Devices != nil {
		c.Devices = e.Devices
	} else {
		c.DetectRDMA = true
		if n.Infiniband || n.HCA != "" {
			c.Devices = []string{InfinibandDevice}
		}
	}
	return c, nil
}

// parseUlimit reads docker's NAME=SOFT[:HARD] form (-1 is unlimited).
func parseUlimit(s string) (Ulimit, error) {
	name, val, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || name == "" || val == "" {
		return Ulimit{}, fmt.Errorf("%q is not a ulimit: write it NAME=SOFT[:HARD], e.g. memlock=-1:-1", s)
	}
	softS, hardS, two := strings.Cut(val, ":")
	soft, err1 := strconv.ParseInt(softS, 10, 64)
	hard := soft
	var err2 error
	if two {
		hard, err2 = strconv.ParseInt(hardS, 10, 64)
	}
	if err1 != nil || err2 != nil {
		return Ulimit{}, fmt.Errorf("%q: limits are integers (-1 for unlimited)", s)
	}
	return Ulimit{Name: name, Soft: soft, Hard: hard}, nil
}

// CommEnvKeys are the per-node communication variables rendered from a
// node's hca/ifname, in the order they are documented.
var CommEnvKeys = []string{"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_CUMEM_ENABLE"}

// CommEnv is commEnv for the node worker, which renders it again from the
// devices it detects (Node.ApplyDetected) and adds what the plan lacks.
func CommEnv(n *Node) map[string]string { return commEnv(n) }

// commEnv is the per-node communication env of n: the engines find the
// RoCE interfaces by these names, or fall back to TCP on the wrong one.
// UCX names a device with its port (rocep1s0f1:1). Empty when the node has
// neither hca nor ifname.
func commEnv(n *Node) map[string]string {
	env := map[string]string{}
	if n.IfName != "" {
		for _, k := range []string{"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"} {
			env[k] = n.IfName
		}
	}
	if n.HCA != "" {
		env["NCCL_IB_HCA"] = n.HCA
		var ucx []string
		for _, h := range strings.Split(n.HCA, ",") {
			if h = strings.TrimSpace(h); h != "" {
				if !strings.Contains(h, ":") {
					h += ":1"
				}
				ucx = append(ucx, h)
			}
		}
		env["UCX_NET_DEVICES"] = strings.Join(ucx, ",")
	}
	if len(env) > 0 {
		env["NCCL_CUMEM_ENABLE"] = "0"
	}
	return env
}

// Probe model types.
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

// pooledModelType reads a sparkrun recipe's model type from its command:
// vLLM's --runner pooling (or --task embed/score/classify) serves
// embeddings, or scores for a reranker (the model's name says which).
func pooledModelType(model, command string) string {
	words, err := SplitArgs(command)
	if err != nil {
		return ModelChat
	}
	pooled := false
	for i, w := range words {
		next := ""
		if i+1 < len(words) {
			next = words[i+1]
		}
		switch {
		case (w == "--runner" && next == "pooling") || w == "--runner=pooling",
			(w == "--task" && (next == "embed" || next == "score")), w == "--task=embed", w == "--task=score",
			w == "--is-embedding":
			pooled = true
		}
	}
	if !pooled {
		return ModelChat
	}
	if strings.Contains(strings.ToLower(model), "rerank") {
		return ModelReranker
	}
	return ModelEmbedding
}

// ApplyDetected fills the node's RDMA facts from what the node activity
// found (/sys/class/infiniband/*): values set in the config win, so an
// operator can pin a device or interface the detection gets wrong.
func (n *Node) ApplyDetected(hca, ifname string, infiniband bool) {
	if n.HCA == "" {
		n.HCA = hca
	}
	if n.IfName == "" {
		n.IfName = ifname
	}
	n.Infiniband = n.Infiniband || infiniband
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
