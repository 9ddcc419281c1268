package lane

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/docker/go-units"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// Container defaults: what sparkrun runs on DGX Spark in its rootless
// mode (the shape that needs no --privileged): host network and IPC, all
// GPUs, 32 GB shm, memlock unlimited and a 64 MiB stack for NCCL over
// RoCE, no-new-privileges, /dev/infiniband on nodes that have it.
// (contract.DefaultNetwork, contract.DefaultIPC and
// contract.InfinibandDevice are the rest of that shape.)
const (
	DefaultShmSize = "32gb"
	DefaultGPUs    = "all"
)

// DefaultUlimits and DefaultSecurityOpt apply unless executor_config sets
// its own ulimit / security_opt.
var (
	DefaultUlimits     = []string{"memlock=-1:-1", "stack=67108864"}
	DefaultSecurityOpt = []string{"no-new-privileges"}
)

// containerSpec renders the container shape of recipe r on node n.
func containerSpec(r *contract.Recipe, n *config.Node) (contract.ContainerSpec, error) {
	e := r.Executor
	pick := func(v, def string) string {
		if v != "" {
			return v
		}
		return def
	}
	c := contract.ContainerSpec{
		GPUs:          pick(e.GPUs, DefaultGPUs),
		Network:       pick(e.Network, contract.DefaultNetwork),
		IPC:           pick(e.IPC, contract.DefaultIPC),
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
			c.Devices = []string{contract.InfinibandDevice}
		}
	}
	return c, nil
}

// parseUlimit reads docker's NAME=SOFT[:HARD] form (-1 is unlimited).
func parseUlimit(s string) (contract.Ulimit, error) {
	name, val, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || name == "" || val == "" {
		return contract.Ulimit{}, fmt.Errorf("%q is not a ulimit: write it NAME=SOFT[:HARD], e.g. memlock=-1:-1", s)
	}
	softS, hardS, two := strings.Cut(val, ":")
	soft, err1 := strconv.ParseInt(softS, 10, 64)
	hard := soft
	var err2 error
	if two {
		hard, err2 = strconv.ParseInt(hardS, 10, 64)
	}
	if err1 != nil || err2 != nil {
		return contract.Ulimit{}, fmt.Errorf("%q: limits are integers (-1 for unlimited)", s)
	}
	return contract.Ulimit{Name: name, Soft: soft, Hard: hard}, nil
}

// CommEnvKeys are the per-node communication variables rendered from a
// node's hca/ifname, in the order they are documented.
var CommEnvKeys = []string{"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_CUMEM_ENABLE"}

// CommEnv is the comm env of n on a cluster of topology (the plan's
// NodePlan.Topology) for the node worker, which renders it again from the
// devices it detects (config.Node.ApplyDetected) and adds what the plan lacks.
func CommEnv(n *config.Node, topology string) map[string]string { return topologyEnv(topology, n) }

// commEnv is the per-node communication env of n: the engines find the
// RoCE interfaces by these names, or fall back to TCP on the wrong one.
// UCX names a device with its port (rocep1s0f1:1). Empty when the node has
// neither hca nor ifname.
func commEnv(n *config.Node) map[string]string {
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
