package activities

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// fakeSys builds ROOT/sys/class/infiniband/HCA/device/net/NETDEV for each
// pair and ROOT/dev/infiniband: a test double of a DGX Spark's RDMA tree
// (this machine has none).
func fakeSys(t *testing.T, pairs ...string) string {
	t.Helper()
	root := t.TempDir()
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := os.MkdirAll(filepath.Join(root, "sys/class/infiniband", pairs[i], "device/net", pairs[i+1]), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "dev/infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// The node worker completes a rank's env and devices from what it detects;
// the recipe's env and the config's hca/ifname win over detection.
func TestStartRankDetectsRDMA(t *testing.T) {
	root := fakeSys(t, "rocep1s0f1", "enp1s0f1np1", "roceP2p1s0f1", "enP2p1s0f1np1")
	a := &NodeActivities{Node: config.Node{Name: "dgx1"}, RDMARoot: root}
	plan := contract.NodePlan{Env: map[string]string{"NODE_RANK": "0"}, Container: contract.ContainerSpec{DetectRDMA: true}}
	env, ctr := a.withRDMA(plan)
	want := map[string]string{
		"NCCL_SOCKET_IFNAME": "enP2p1s0f1np1,enp1s0f1np1", "GLOO_SOCKET_IFNAME": "enP2p1s0f1np1,enp1s0f1np1",
		"TP_SOCKET_IFNAME": "enP2p1s0f1np1,enp1s0f1np1", "NCCL_IB_HCA": "roceP2p1s0f1,rocep1s0f1",
		"UCX_NET_DEVICES": "roceP2p1s0f1:1,rocep1s0f1:1", "NCCL_CUMEM_ENABLE": "0", "NODE_RANK": "0",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if len(ctr.Devices) != 1 || ctr.Devices[0] != filepath.Join(root, "dev/infiniband")+":/dev/infiniband" {
		t.Errorf("devices %v, want the detected /dev/infiniband", ctr.Devices)
	}
	if len(plan.Env) != 1 {
		t.Errorf("the plan's env was changed in place: %v", plan.Env)
	}

	// Config pins the HCA; the recipe sets NCCL_SOCKET_IFNAME; a recipe
	// with its own devices keeps them.
	a.Node.HCA = "rocep1s0f1"
	plan = contract.NodePlan{Env: map[string]string{"NCCL_SOCKET_IFNAME": "eth9", "NCCL_IB_HCA": "rocep1s0f1"},
		Container: contract.ContainerSpec{Devices: []string{"/dev/foo"}}}
	env, ctr = a.withRDMA(plan)
	if env["NCCL_SOCKET_IFNAME"] != "eth9" || env["NCCL_IB_HCA"] != "rocep1s0f1" || env["UCX_NET_DEVICES"] != "rocep1s0f1:1" {
		t.Errorf("recipe/config values must win: %v", env)
	}
	if env["GLOO_SOCKET_IFNAME"] != "enP2p1s0f1np1,enp1s0f1np1" {
		t.Errorf("GLOO_SOCKET_IFNAME %q: the detected netdevs fill what config and recipe leave unset", env["GLOO_SOCKET_IFNAME"])
	}
	if len(ctr.Devices) != 1 || ctr.Devices[0] != "/dev/foo" {
		t.Errorf("recipe devices replaced: %v", ctr.Devices)
	}

	// A node without RDMA: nothing added.
	a = &NodeActivities{Node: config.Node{Name: "dgx2"}, RDMARoot: t.TempDir()}
	env, ctr = a.withRDMA(contract.NodePlan{Env: map[string]string{}, Container: contract.ContainerSpec{DetectRDMA: true}})
	if len(env) != 0 || len(ctr.Devices) != 0 {
		t.Errorf("node without RDMA got env %v devices %v", env, ctr.Devices)
	}
}

// On a ring the node worker completes a rank's env from the devices it
// detects with the ring's variables too (the plan's topology).
func TestStartRankDetectsRDMAOnARing(t *testing.T) {
	root := fakeSys(t, "rocep1s0f1", "enp1s0f1np1")
	a := &NodeActivities{Node: config.Node{Name: "dgx3"}, RDMARoot: root}
	env, _ := a.withRDMA(contract.NodePlan{Env: map[string]string{}, Topology: "ring", Container: contract.ContainerSpec{DetectRDMA: true}})
	for k, v := range map[string]string{"NCCL_IB_HCA": "rocep1s0f1", "MN_IF_NAME": "enp1s0f1np1", "NCCL_NET": "IB",
		"NCCL_NET_PLUGIN": "none", "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_MERGE_NICS": "0"} {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}
