package lane

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// Topologies are the fabrics a cluster may declare (topology = "…"): a
// RoCE switch, a direct-attach pair, or three or more nodes cabled
// port to port without a switch (ring; mesh is the same cabling by
// sparkrun's other name, "3-node mesh/ring").
var Topologies = []string{"switch", "pair", "ring", "mesh"}

// TopologyEnvKeys are the variables a declared topology adds to
// CommEnvKeys, as sparkrun's orchestration/infiniband.py
// generate_nccl_env computes them for a node with RDMA devices.
var TopologyEnvKeys = []string{"NCCL_IGNORE_CPU_AFFINITY", "NCCL_NET", "NCCL_IB_DISABLE", "NCCL_CROSS_NIC", "MN_IF_NAME",
	"OMPI_MCA_btl_tcp_if_include", "NCCL_NET_PLUGIN", "NCCL_IB_SUBNET_AWARE_ROUTING", "NCCL_IB_MERGE_NICS"}

// checkTopology refuses a topology that is not one of Topologies, or
// that the cluster's node count cannot have.
func checkTopology(cfg *config.Config, c *config.Cluster) error {
	switch t := c.Topology; {
	case t == "":
	case !slices.Contains(Topologies, t):
		return fmt.Errorf("%s: clusters.%s.topology: %q is not a topology: write one of %s", cfg.File, c.Name, t, strings.Join(Topologies, ", "))
	case t == "pair" && len(c.Nodes) != 2:
		return fmt.Errorf("%s: clusters.%s.topology: pair is two nodes cabled to each other, the cluster has %d: write switch, ring or mesh", cfg.File, c.Name, len(c.Nodes))
	case (t == "ring" || t == "mesh") && len(c.Nodes) < 3:
		return fmt.Errorf("%s: clusters.%s.topology: a %s has three or more nodes, the cluster has %d: write pair (two nodes cabled to each other) or switch", cfg.File, c.Name, t, len(c.Nodes))
	}
	return nil
}

// topologyEnv is node n's communication env on a cluster of topology
// t. Undeclared (""), it is commEnv, the interface and device names
// alone. Declared, a node with RDMA devices (hca) gets what sparkrun
// gives it on that fabric: NCCL over IB with cross-NIC rings, the netdevs
// (ifname) for every socket transport (MN_IF_NAME and OpenMPI's TCP
// list too), and on a ring or mesh the switchless overrides — no net
// plugin, subnet-aware routing, NICs not merged — that a fabric without
// a switch needs (sparkrun #157, #174). sparkrun puts its detected
// default-route interface first in NCCL_SOCKET_IFNAME and the socket
// variables; sparklane's ifname is that list, in the order given.
func topologyEnv(t string, n *config.Node) map[string]string {
	env := commEnv(n)
	if t == "" || n.HCA == "" {
		return env
	}
	env["NCCL_IGNORE_CPU_AFFINITY"] = "1"
	env["NCCL_NET"] = "IB"
	env["NCCL_IB_DISABLE"] = "0"
	env["NCCL_CROSS_NIC"] = "1"
	if n.IfName != "" {
		env["MN_IF_NAME"] = n.IfName
		env["OMPI_MCA_btl_tcp_if_include"] = n.IfName
	}
	if t == "ring" || t == "mesh" {
		env["NCCL_NET_PLUGIN"] = "none"
		env["NCCL_IB_SUBNET_AWARE_ROUTING"] = "1"
		env["NCCL_IB_MERGE_NICS"] = "0"
	}
	return env
}

// clusterTopology is the topology of the cluster r is rendered on.
func clusterTopology(cfg *config.Config, r *contract.Recipe) string {
	if c := cfg.Cluster(r.Cluster); c != nil {
		return c.Topology
	}
	return ""
}
