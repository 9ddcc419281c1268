package config

import (
	"path/filepath"
	"strings"

	"github.com/sparklane/sparklane/internal/pki"
)

// LocalPath maps a recipe path to the path the node's worker touches:
// prefixed by the node's fs_root (so simulated nodes on one machine do not
// share a disk) unless it lies under a shared root (the NAS, seen alike by
// every node).
func (n Node) LocalPath(p string, sharedRoots []string) string {
	if n.FSRoot == "" || n.FSRoot == "/" || !filepath.IsAbs(p) {
		return p
	}
	c := filepath.Clean(p)
	for _, r := range sharedRoots {
		r = filepath.Clean(r)
		if c == r || strings.HasPrefix(c, r+string(filepath.Separator)) {
			return p
		}
	}
	return filepath.Join(n.FSRoot, c)
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

// RelayOn reports whether staging relays between nodes: the recipe's
// relay key (nil when the recipe does not say, or for the fleet as a
// whole), else the config's, else on.
func RelayOn(cfg *Config, recipe *bool) bool {
	if recipe != nil {
		return *recipe
	}
	if cfg != nil && cfg.Relay != nil {
		return *cfg.Relay
	}
	return true
}

// FleetHosts are nodes as the fleet CA issues their identities for: each
// name with the address its peers reach it at (pki.IssueFleetIdentities
// skips a node without one).
func FleetHosts(nodes []Node) []pki.FleetHost {
	out := make([]pki.FleetHost, len(nodes))
	for i, n := range nodes {
		out[i] = pki.FleetHost{Name: n.Name, Address: n.Address}
	}
	return out
}
