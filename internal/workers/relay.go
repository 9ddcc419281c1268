package workers

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/engine/relay"
	"github.com/sparklane/sparklane/internal/pki"
)

// RelayPKIDir is where a node's relay identity lives: STATE_DIR/pki, the
// same CA `starter control certs` keeps.
func RelayPKIDir(stateDir string) string { return filepath.Join(stateDir, "pki") }

// RelayIdentity is node's relay identity files under dir: the fleet CA and
// relay-NODE.pem / relay-NODE-key.pem (pki.CA.Peer).
func RelayIdentity(dir, node string) relay.Identity {
	return relay.Identity{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, relay.PeerPrefix+node+".pem"), Key: filepath.Join(dir, relay.PeerPrefix+node+"-key.pem")}
}

// IssueRelayIdentities issues (or keeps) a relay identity for each node
// with an address from the CA under dir (created when absent). The
// control service does it for its local nodes before starting their
// workers; `starter control certs` for all nodes.
func IssueRelayIdentities(dir string, nodes []config.Node) (map[string]pki.Files, error) {
	out := map[string]pki.Files{}
	var ca *pki.CA
	for _, n := range nodes {
		if n.Address == "" {
			continue
		}
		if ca == nil {
			var err error
			if ca, err = pki.LoadOrCreateCA(dir, "sparklane fleet CA"); err != nil {
				return nil, err
			}
		}
		f, err := ca.Peer(relay.PeerPrefix+n.Name, []string{n.Address})
		if err != nil {
			return nil, fmt.Errorf("relay identity of node %s: %w", n.Name, err)
		}
		out[n.Name] = f
	}
	return out, nil
}

// localRelays are the relay servers node workers of this process bound,
// by state_dir and node: simulated nodes sharing one address bind free
// ports, and their peers in the same process find them here.
var localRelays sync.Map

func relayKey(stateDir, node string) string { return stateDir + "\x00" + node }

// sharesAddress reports whether another local node (empty ssh) of cfg has
// n's address: they cannot all bind relay_port on it.
func sharesAddress(cfg *config.Config, n *config.Node) bool {
	for i := range cfg.Nodes {
		o := &cfg.Nodes[i]
		if o.Name != n.Name && o.SSH == "" && o.Address == n.Address {
			return true
		}
	}
	return false
}

// startRelay starts node n's relay server and returns its receiver and a
// stop function; it returns nil (relay off on this node, said in the log)
// when relay is off, the node has no address or no identity, or the port
// cannot be bound. Staging then reads the NAS, as peers do for files they
// would have fetched from this node.
func startRelay(cfg *config.Config, n *config.Node, log *zap.Logger) (*relay.Receiver, func()) {
	if !config.RelayOn(cfg, nil) || n.Address == "" {
		return nil, nil
	}
	id := RelayIdentity(RelayPKIDir(cfg.StateDir), n.Name)
	for _, p := range []string{id.CA, id.Cert, id.Key} {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			log.Info("relay off on this node: no relay identity; issue it with `starter control certs` and copy it here, or let `starter fleet install` do", zap.String("missing", p))
			return nil, nil
		}
	}
	stls, err := relay.ServerTLS(id)
	if err != nil {
		log.Warn("relay off on this node", zap.Error(err))
		return nil, nil
	}
	ctls, err := relay.ClientTLS(id)
	if err != nil {
		log.Warn("relay off on this node", zap.Error(err))
		return nil, nil
	}
	port := cfg.RelayPort
	if n.SSH == "" && sharesAddress(cfg, n) {
		port = 0
	}
	reg := relay.NewRegistry()
	srv := &relay.Server{Registry: reg, Log: log.Named("relay")}
	addr := net.JoinHostPort(n.Address, strconv.Itoa(port))
	if err := srv.Listen(addr, stls); err != nil {
		log.Warn("relay off on this node", zap.Error(err))
		return nil, nil
	}
	key := relayKey(cfg.StateDir, n.Name)
	localRelays.Store(key, srv.Addr())
	log.Info("relay server listening (mTLS, fleet CA)", zap.String("addr", srv.Addr()))
	stop := func() {
		localRelays.CompareAndDelete(key, srv.Addr())
		srv.Close()
		reg.Close()
	}
	return &relay.Receiver{Registry: reg, TLS: ctls, Log: log.Named("relay")}, stop
}

// relayAddr is the in-process lookup NodeActivities.RelayAddr uses.
func relayAddr(stateDir string) func(string) string {
	return func(node string) string {
		if v, ok := localRelays.Load(relayKey(stateDir, node)); ok {
			return v.(string)
		}
		return ""
	}
}

// nodeWorker is a node's Temporal worker that also stops its relay server.
type nodeWorker struct {
	worker.Worker
	stopRelay func()
	watch     *rankWatch
}

// Start starts the worker, then the watch for dying rank containers.
func (w nodeWorker) Start() error {
	if err := w.Worker.Start(); err != nil {
		return err
	}
	if w.watch != nil {
		w.watch.start()
	}
	return nil
}

// Stop stops the watch, the worker, then the relay server.
func (w nodeWorker) Stop() {
	if w.watch != nil {
		w.watch.stop()
	}
	w.Worker.Stop()
	if w.stopRelay != nil {
		w.stopRelay()
	}
}

// imageTLS is node n's fleet identity for image transfers (its relay
// identity), or nil (said in the log) when the node has no address or no
// identity: it then neither sends nor receives images.
func imageTLS(cfg *config.Config, n *config.Node, log *zap.Logger) *activities.ImageTLS {
	if n.Address == "" {
		return nil
	}
	id := RelayIdentity(RelayPKIDir(cfg.StateDir), n.Name)
	for _, p := range []string{id.CA, id.Cert, id.Key} {
		if _, err := os.Stat(p); err != nil {
			log.Info("image transfers off on this node: no fleet identity; issue it with `starter control certs`, or let `starter fleet install` do", zap.String("missing", p))
			return nil
		}
	}
	s, err := relay.ServerTLS(id)
	if err != nil {
		log.Warn("image transfers off on this node", zap.Error(err))
		return nil
	}
	c, err := relay.ClientTLS(id)
	if err != nil {
		log.Warn("image transfers off on this node", zap.Error(err))
		return nil
	}
	return &activities.ImageTLS{Server: s, Client: c}
}
