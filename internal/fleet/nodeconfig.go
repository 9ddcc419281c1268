package fleet

import (
	"fmt"
	"net"
	"strconv"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/sparklane/sparklane/internal/config"
)

// The node config is written from these structs, not from a map, so the
// same control config always gives the same bytes (an unchanged config is
// not rewritten and does not restart the worker).
type nodeFile struct {
	StateDir    string         `toml:"state_dir"`
	HFCacheDir  string         `toml:"hf_cache_dir,omitempty"`
	SharedRoots []string       `toml:"shared_roots,omitempty"`
	RelayPort   int            `toml:"relay_port,omitempty"`
	ImagePort   int            `toml:"image_port,omitempty"`
	Temporal    nodeTemporal   `toml:"temporal"`
	Staging     *nodeStaging   `toml:"staging,omitempty"`
	Nodes       []nodeEntry    `toml:"nodes"`
	Clusters    []clusterEntry `toml:"clusters,omitempty"`
}

type nodeTemporal struct {
	Address   string `toml:"address"`
	Namespace string `toml:"namespace"`
}

// nodeStaging is the control config's [staging], in bytes: the node's
// worker applies it while it stages beside a serving lane.
type nodeStaging struct {
	ServingRate  int64  `toml:"serving_rate,omitempty"`
	MinAvailable *int64 `toml:"min_available,omitempty"`
}

type nodeEntry struct {
	Name        string   `toml:"name"`
	SSH         string   `toml:"ssh,omitempty"`
	Address     string   `toml:"address,omitempty"`
	Docker      string   `toml:"docker,omitempty"`
	Roots       []string `toml:"roots,omitempty"`
	FSRoot      string   `toml:"fs_root,omitempty"`
	ClearHelper []string `toml:"clear_helper,omitempty"`
}

type clusterEntry struct {
	Name  string   `toml:"name"`
	Nodes []string `toml:"nodes"`
}

// NodeConfig is the sparklane.toml a node service reads, derived from the
// control's config: the same nodes, clusters, shared_roots and
// hf_cache_dir; state_dir on the node; and a Temporal address the node can
// reach — its own 127.0.0.1:PORT, where the control service's reverse SSH
// tunnel delivers the embedded frontend (PORT = temporal.port), or the
// external cluster's address as configured.
//
// The [staging] limits are the node worker's own to apply, and relay_port
// and image_port are where node workers listen for each other, so they are
// carried. What only the control host uses is left out: known_hosts and identity
// (control-host paths), power settings (token locations), devices, recipes.
// The node's TLS files for an external mTLS cluster are not carried either:
// the returned notices say so.
func NodeConfig(cfg *config.Config, stateDir string) ([]byte, []string, error) {
	var notices []string
	addr := cfg.Temporal.Address
	if addr == "" {
		port := cfg.Temporal.Port
		if port == 0 {
			port = config.DefaultPort
		}
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	} else if cfg.Temporal.TLSCert != "" || cfg.Temporal.TLSCA != "" || cfg.Temporal.APIKeyEnv != "" {
		notices = append(notices, fmt.Sprintf("temporal.address %s uses TLS or an API key: the node config does not carry certificate files or keys; put the node's client certificate on it and add tls_cert/tls_key/tls_ca to %s by hand", addr, "the node's sparklane.toml"))
	}
	ns := cfg.Temporal.Namespace
	if ns == "" {
		ns = config.DefaultNamespace
	}
	f := nodeFile{StateDir: stateDir, HFCacheDir: cfg.HFCacheDir, SharedRoots: cfg.SharedRoots,
		Temporal: nodeTemporal{Address: addr, Namespace: ns}}
	// The ports node workers listen on and dial each other at: a node
	// left at the defaults would listen where its peers do not call.
	if cfg.RelayPort != config.DefaultRelayPort {
		f.RelayPort = cfg.RelayPort
	}
	if cfg.ImagePort != config.DefaultImagePort && cfg.ImagePort != 0 {
		f.ImagePort = cfg.ImagePort
	}
	if st := cfg.Staging; st.ServingRate != 0 || st.MinAvailable != nil {
		f.Staging = &nodeStaging{ServingRate: st.ServingRate, MinAvailable: st.MinAvailable}
	}
	for _, n := range cfg.Nodes {
		f.Nodes = append(f.Nodes, nodeEntry{Name: n.Name, SSH: n.SSH, Address: n.Address, Docker: n.Docker,
			Roots: n.Roots, FSRoot: n.FSRoot, ClearHelper: n.ClearHelper})
	}
	for _, c := range cfg.Clusters {
		f.Clusters = append(f.Clusters, clusterEntry{Name: c.Name, Nodes: c.Nodes})
	}
	b, err := toml.Marshal(f)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the node config: %w", err)
	}
	head := fmt.Sprintf("# Written by 'starter fleet install' from %s; changes here are overwritten.\n", cfg.File)
	return append([]byte(head), b...), notices, nil
}
