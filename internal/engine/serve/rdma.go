package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// RDMA is what a node offers NCCL over RoCE: its RDMA devices
// (/sys/class/infiniband/NAME) with their netdevs
// (/sys/class/infiniband/NAME/device/net/*), and whether /dev/infiniband
// (the verbs devices a container needs) exists.
type RDMA struct {
	// HCAs are the RDMA device names, sorted.
	HCAs []string `json:"hcas,omitempty"`
	// Netdevs are the devices' network interfaces, in HCA order.
	Netdevs []string `json:"netdevs,omitempty"`
	// Infiniband is true when /dev/infiniband exists.
	Infiniband bool `json:"infiniband"`
}

// HCA is the comma-separated device list NCCL_IB_HCA takes.
func (r RDMA) HCA() string { return strings.Join(r.HCAs, ",") }

// IfName is the comma-separated interface list the *_SOCKET_IFNAME
// variables take.
func (r RDMA) IfName() string { return strings.Join(r.Netdevs, ",") }

// DetectRDMA reads root/sys/class/infiniband and root/dev/infiniband
// (root "" or "/" on a real node; tests point it at a fake tree, a test
// double for hardware this machine lacks). A node without RDMA returns
// the zero RDMA and no error.
func DetectRDMA(root string) (RDMA, error) {
	if root == "" {
		root = "/"
	}
	var out RDMA
	class := filepath.Join(root, "sys/class/infiniband")
	ents, err := os.ReadDir(class)
	if err != nil && !os.IsNotExist(err) {
		return out, fmt.Errorf("read %s: %w", class, err)
	}
	for _, e := range ents {
		out.HCAs = append(out.HCAs, e.Name())
	}
	sort.Strings(out.HCAs)
	seen := map[string]bool{}
	for _, h := range out.HCAs {
		nets, err := os.ReadDir(filepath.Join(class, h, "device", "net"))
		if err != nil {
			continue // a device without a netdev (IB only): NCCL_IB_HCA still names it
		}
		for _, n := range nets {
			if !seen[n.Name()] {
				seen[n.Name()] = true
				out.Netdevs = append(out.Netdevs, n.Name())
			}
		}
	}
	if st, err := os.Stat(filepath.Join(root, "dev/infiniband")); err == nil && st.IsDir() {
		out.Infiniband = true
	}
	return out, nil
}
