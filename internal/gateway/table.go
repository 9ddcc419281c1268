package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"

	"maps"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/contract"
)

// route is one installed entry of the table. It never changes once
// installed: a change installs a new one and closes changed, so every
// request waiting on the old one looks again.
type route struct {
	contract.GatewayRoute
	target  *url.URL      // BaseURL parsed; nil for a route without a lane yet
	changed chan struct{} // closed when the table changes
}

// The on-disk table is a contract.GatewayTableFile: routes in the order
// they were set (the last one set wins a name two clusters claim), each
// lane's last ready time, and the held counts as of Written.

// loadTable reads the table kept at path (none there: empty).
func loadTable(path string) (contract.GatewayTableFile, error) {
	var sf contract.GatewayTableFile
	if path == "" {
		return sf, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return sf, nil
	}
	if err != nil {
		return sf, fmt.Errorf("gateway state file %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &sf); err != nil {
		return sf, fmt.Errorf("gateway state file %s: %v: it is not the table this gateway wrote; move it away and start again (the gateway reconciles with the keepers at start)", path, err)
	}
	for i, r := range sf.Routes {
		if err := checkRoute(r, false); err != nil {
			return sf, fmt.Errorf("gateway state file %s: routes[%d]: %v; move the file away and start again (the gateway reconciles with the keepers at start)", path, i, err)
		}
		sf.Routes[i].Held = 0
	}
	return sf, nil
}

// checkRoute is what a table entry must hold; needLane: a lane to
// forward to (Route, and any entry that serves).
func checkRoute(r contract.GatewayRoute, needLane bool) error {
	if r.Cluster == "" {
		return errors.New("the route names no cluster")
	}
	switch r.State {
	case contract.GatewayServing, contract.GatewayHeld, contract.GatewayDraining, contract.GatewayOff, contract.GatewayDown:
	default:
		return fmt.Errorf("cluster %s: state %q is not serving, held, draining, off or down", r.Cluster, r.State)
	}
	if !needLane && r.State != contract.GatewayServing && r.BaseURL == "" {
		return nil // held or off before its first lane
	}
	if r.Lane == "" {
		return fmt.Errorf("cluster %s: the route names no lane", r.Cluster)
	}
	if r.Served == "" {
		return fmt.Errorf("cluster %s lane %s: the route has no served model name", r.Cluster, r.Lane)
	}
	if _, err := parseBase(r.BaseURL); err != nil {
		return fmt.Errorf("cluster %s lane %s: %v", r.Cluster, r.Lane, err)
	}
	for _, n := range r.Names {
		if strings.TrimSpace(n) == "" {
			return fmt.Errorf("cluster %s lane %s: an empty name among names", r.Cluster, r.Lane)
		}
	}
	return nil
}

// table is a copy of the routes, in set order, that a change edits.
type table struct{ list []contract.GatewayRoute }

func (t *table) find(cluster string) int {
	for i := range t.list {
		if t.list[i].Cluster == cluster {
			return i
		}
	}
	return -1
}

// entry is cluster's route, a new one without a lane when it has none
// (a hold or an off before the cluster's first route).
func (t *table) entry(cluster string) *contract.GatewayRoute {
	i := t.find(cluster)
	if i < 0 {
		t.list = append(t.list, contract.GatewayRoute{Cluster: cluster})
		i = len(t.list) - 1
	}
	return &t.list[i]
}

// set puts r last (the route set last wins a name).
func (t *table) set(r contract.GatewayRoute) {
	t.remove(r.Cluster)
	t.list = append(t.list, r)
}

func (t *table) remove(cluster string) {
	if i := t.find(cluster); i >= 0 {
		t.list = append(t.list[:i], t.list[i+1:]...)
	}
}

// change edits a copy of the table with fn, writes it to the state file
// and installs it; nothing changes when fn or the write fails.
func (g *Gateway) change(fn func(t *table) error) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	t := &table{list: g.list()}
	if err := fn(t); err != nil {
		return err
	}
	if err := g.write(t.list); err != nil {
		return err
	}
	g.install(t.list)
	return nil
}

// write keeps list in the state file (g.wmu held), with the lanes' ready
// times and the held counts now.
func (g *Gateway) write(list []contract.GatewayRoute) error {
	if g.stateFile == "" {
		return nil
	}
	sf := contract.GatewayTableFile{Gateway: g.cfg.Name, Routes: make([]contract.GatewayRoute, len(list)), Written: g.now().UTC()}
	copy(sf.Routes, list)
	g.mu.Lock()
	for i := range sf.Routes {
		sf.Routes[i].Held = g.held[sf.Routes[i].Cluster]
	}
	if len(g.ready) > 0 {
		sf.Ready = maps.Clone(g.ready)
	}
	g.mu.Unlock()
	b, err := json.MarshalIndent(sf, "", "  ")
	if err != nil {
		return fmt.Errorf("gateway table: %w", err)
	}
	if err := atomicfile.Write(g.stateFile, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("gateway %s: keep the route table: %w", g.label(), err)
	}
	g.written = heldCounts(sf.Routes)
	return nil
}

// heldCounts is "cluster=n ..." of routes' held counts (what the state
// file says now).
func heldCounts(routes []contract.GatewayRoute) string {
	var b strings.Builder
	for _, r := range routes {
		fmt.Fprintf(&b, "%s=%d ", r.Cluster, r.Held)
	}
	return b.String()
}

// refreshHeld writes the state file again when the held counts changed
// since it was written (status and `starter gateway routes` read them
// there); Serve calls it every second.
func (g *Gateway) refreshHeld() {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	list := g.list()
	now := g.Routes()
	if heldCounts(now) == g.written {
		return
	}
	if err := g.write(list); err != nil {
		g.log.Warn("gateway: refresh the held counts in the state file", zap.Error(err))
	}
}

// list is the table in set order.
func (g *Gateway) list() []contract.GatewayRoute {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]contract.GatewayRoute, 0, len(g.order))
	for _, c := range g.order {
		r := g.routes[c].GatewayRoute
		r.Names = append([]string(nil), r.Names...)
		r.Nodes = append([]string(nil), r.Nodes...)
		out = append(out, r)
	}
	return out
}

// install makes list the table requests are routed by, and wakes every
// request waiting on the one before.
func (g *Gateway) install(list []contract.GatewayRoute) {
	routes := make(map[string]*route, len(list))
	names := map[string]*route{}
	order := make([]string, 0, len(list))
	for _, r := range list {
		rt := &route{GatewayRoute: r, changed: make(chan struct{})}
		if r.BaseURL != "" {
			rt.target, _ = parseBase(r.BaseURL) // checked by checkRoute
		}
		routes[r.Cluster] = rt
		order = append(order, r.Cluster)
		if rt.target == nil {
			continue
		}
		for _, n := range routeNames(r) {
			names[n] = rt
		}
	}
	g.mu.Lock()
	old := g.routes
	g.routes, g.names, g.order = routes, names, order
	g.mu.Unlock()
	for _, rt := range old {
		close(rt.changed)
	}
	for _, r := range list {
		g.m.zeroRoute(r, routeNames(r))
	}
}

// routeNames are the names a route answers to: its served name first,
// then the others, without repeats.
func routeNames(r contract.GatewayRoute) []string {
	out := make([]string, 0, len(r.Names)+1)
	seen := map[string]bool{}
	for _, n := range append([]string{r.Served}, r.Names...) {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// Routes is the table, sorted by cluster, each with the number of
// requests it holds now.
func (g *Gateway) Routes() []contract.GatewayRoute {
	list := g.list()
	g.mu.Lock()
	for i := range list {
		list[i].Held = g.held[list[i].Cluster]
	}
	g.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Cluster < list[j].Cluster })
	return list
}

// routeOf is cluster's route with its held count ("": none).
func (g *Gateway) routeOf(cluster string) (contract.GatewayRoute, bool) {
	for _, r := range g.Routes() {
		if r.Cluster == cluster {
			return r, true
		}
	}
	return contract.GatewayRoute{}, false
}

// fronts refuses a cluster outside the gateway's [gateway] clusters.
func (g *Gateway) fronts(cluster string) error {
	if cluster == "" {
		return errors.New("gateway: no cluster named")
	}
	if !g.cfg.Fronts(cluster) {
		return fmt.Errorf("gateway %s does not front cluster %s (its clusters are %s): route it through the gateway that does, or add it to [gateway] clusters", g.label(), cluster, strings.Join(g.cfg.Clusters, ", "))
	}
	return nil
}

// Hold makes new requests for cluster's names wait until Release (a
// switch, a heal, a power-on). A cluster with no route yet gets a held
// entry, so a Route after it stays held too.
func (g *Gateway) Hold(in contract.GatewayHoldInput) (contract.GatewayRoute, error) {
	if err := g.fronts(in.Cluster); err != nil {
		return contract.GatewayRoute{}, err
	}
	err := g.change(func(t *table) error {
		r := t.entry(in.Cluster)
		r.State, r.Why = contract.GatewayHeld, in.Why
		if eta := g.etaOf(in.Lane, in.ETA); eta > 0 {
			r.ETA = eta
		}
		return nil
	})
	return g.after(in.Cluster, "hold", err)
}

// Route points cluster's names at a lane. The route keeps its state (a
// held route stays held until Release, an off one stays off); a cluster
// with no route starts serving (or in the state r gives). It becomes the
// route set last: a name another cluster claims too comes here.
func (g *Gateway) Route(r contract.GatewayRoute) (contract.GatewayRoute, error) {
	if err := g.fronts(r.Cluster); err != nil {
		return contract.GatewayRoute{}, err
	}
	r.Held = 0
	err := g.change(func(t *table) error {
		if i := t.find(r.Cluster); i >= 0 {
			old := t.list[i]
			r.State, r.Why = old.State, old.Why
			if r.ETA == 0 {
				r.ETA = old.ETA
			}
			if old.Lane == r.Lane {
				// A keeper that knows the lane but not its head (it was
				// started before it recorded one) routes it again as it is.
				r.BaseURL, r.Served = nonEmpty(r.BaseURL, old.BaseURL), nonEmpty(r.Served, old.Served)
			}
		} else if r.State == "" {
			r.State = contract.GatewayServing
		}
		r.Names = routeNames(r)
		if err := checkRoute(r, true); err != nil {
			return fmt.Errorf("gateway route: %w", err)
		}
		t.set(r)
		if r.ETA > 0 {
			g.mu.Lock()
			g.ready[r.Lane] = r.ETA
			g.mu.Unlock()
		}
		return nil
	})
	return g.after(r.Cluster, "route", err)
}

// Release sends cluster's held requests, and every new one, to its route
// as it is now.
func (g *Gateway) Release(cluster string) (contract.GatewayRoute, error) {
	err := g.change(func(t *table) error {
		i := t.find(cluster)
		if i < 0 {
			return fmt.Errorf("gateway release: cluster %s has no route: Route it first", cluster)
		}
		r := &t.list[i]
		if r.BaseURL == "" {
			return fmt.Errorf("gateway release: cluster %s has no lane to release to: Route it first", cluster)
		}
		r.State, r.Why = contract.GatewayServing, ""
		return nil
	})
	return g.after(cluster, "release", err)
}

// Unroute removes cluster's route (its lane stopped by hand): its names
// answer 404, and requests it held look again (and get 404 too).
func (g *Gateway) Unroute(cluster string) error {
	err := g.change(func(t *table) error {
		t.remove(cluster)
		return nil
	})
	if err == nil {
		g.log.Info("gateway unroute", zap.String("cluster", cluster))
	}
	return err
}

// Off marks cluster off by schedule: 503 with Retry-After, or a wake with
// [gateway] wake; with in.Down, down (503 at once, never woken). Requests
// it held look again.
func (g *Gateway) Off(in contract.GatewayOffInput) (contract.GatewayRoute, error) {
	if err := g.fronts(in.Cluster); err != nil {
		return contract.GatewayRoute{}, err
	}
	err := g.change(func(t *table) error {
		r := t.entry(in.Cluster)
		state := contract.GatewayOff
		if in.Down {
			state = contract.GatewayDown
		}
		r.State, r.Why = state, in.Why
		if in.ETA > 0 {
			r.ETA = in.ETA
		}
		return nil
	})
	return g.after(in.Cluster, "off", err)
}

// Reconcile replaces the routes of the clusters in routes (the keepers'
// view of what serves where, at start) and leaves the others. An entry
// that is not a valid route, or of a cluster this gateway does not front,
// is skipped and logged; a failure to keep the table is logged too.
func (g *Gateway) Reconcile(routes []contract.GatewayRoute) {
	err := g.change(func(t *table) error {
		for _, r := range routes {
			if r.State == "" {
				r.State = contract.GatewayServing
			}
			r.Names = routeNames(r)
			if err := g.fronts(r.Cluster); err != nil {
				g.log.Warn("gateway reconcile: skipped", zap.Error(err))
				continue
			}
			if err := checkRoute(r, false); err != nil {
				g.log.Warn("gateway reconcile: skipped", zap.Error(err))
				continue
			}
			t.set(r)
		}
		return nil
	})
	if err != nil {
		g.log.Error("gateway reconcile", zap.Error(err))
		return
	}
	for _, r := range routes {
		g.log.Info("gateway reconciled", zap.String("cluster", r.Cluster), zap.String("lane", r.Lane), zap.String("state", r.State))
	}
}

// after logs a table change and returns the cluster's route after it.
func (g *Gateway) after(cluster, op string, err error) (contract.GatewayRoute, error) {
	if err != nil {
		return contract.GatewayRoute{}, err
	}
	r, _ := g.routeOf(cluster)
	g.log.Info("gateway "+op, zap.String("cluster", cluster), zap.String("lane", r.Lane),
		zap.String("state", r.State), zap.String("why", r.Why), zap.Int("held", r.Held))
	return r, nil
}
