package workers

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"strconv"
	"sync"

	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/engine/relay"
	"github.com/sparklane/sparklane/internal/pki"
)

// fleetIdentity is node's fleet identity under STATE_DIR/pki, as the
// relay and image transfers load it.
func fleetIdentity(stateDir, node string) relay.Identity {
	dir := pki.FleetDir(stateDir)
	f := pki.FleetIdentity(dir, node)
	return relay.Identity{CA: pki.CAFile(dir), Cert: f.Cert, Key: f.Key}
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
	id := fleetIdentity(cfg.StateDir, n.Name)
	for _, p := range []string{id.CA, id.Cert, id.Key} {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			log.Info("relay off on this node: no fleet identity; issue it with `starter control certs` and copy it here, or let `starter fleet install` do", zap.String("missing", p))
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
	id := fleetIdentity(cfg.StateDir, n.Name)
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
