package gateway

import (
	"context"
	"errors"
	"slices"

	"github.com/sparklane/sparklane/internal/contract"
)

// Steps is the gateway's table as the workflows' steps change it (the
// gateway activities' table, activities.GatewayTable): each takes a
// step's input as it is in the history and answers the route it left. A
// step by lane (a stop) or by nodes (a power-off) applies to every route
// it selects; Changed counts them.
type Steps struct{ G *Gateway }

// Hold holds a cluster's names; the hold's ETA is the next lane's last
// ready time when the gateway has one.
func (s Steps) Hold(in contract.GatewayHoldInput) (contract.GatewayStepResult, error) {
	r, err := s.G.Hold(in)
	return one(r, err)
}

// Route points a cluster's names at a lane.
func (s Steps) Route(in contract.GatewayRouteInput) (contract.GatewayStepResult, error) {
	r, err := s.G.Route(in.Route)
	return one(r, err)
}

// Release sends a cluster's held requests to its route.
func (s Steps) Release(in contract.GatewayReleaseInput) (contract.GatewayStepResult, error) {
	r, err := s.G.Release(in.Cluster)
	return one(r, err)
}

// Unroute removes the routes in selects (none: nothing to do).
func (s Steps) Unroute(in contract.GatewayUnrouteInput) (contract.GatewayStepResult, error) {
	var res contract.GatewayStepResult
	for _, c := range s.G.selectRoutes(in.Cluster, in.Lane, nil) {
		if err := s.G.Unroute(c); err != nil {
			return res, err
		}
		res.Changed++
	}
	return res, nil
}

// Off marks the routes in selects off by schedule (or down); a cluster
// named that has no route yet gets an entry.
func (s Steps) Off(in contract.GatewayOffInput) (contract.GatewayStepResult, error) {
	clusters := s.G.selectRoutes(in.Cluster, in.Lane, in.Nodes)
	if in.Cluster != "" && len(clusters) == 0 {
		clusters = []string{in.Cluster}
	}
	var res contract.GatewayStepResult
	for _, c := range clusters {
		one := in
		one.Cluster, one.Lane, one.Nodes = c, "", nil
		r, err := s.G.Off(one)
		if err != nil {
			return res, err
		}
		if res.Route == nil {
			res.Route = &r
		}
		res.Changed++
	}
	return res, nil
}

// Drain drains the lane of every route in selects, one after another
// (a stop's lane, or a power-off's routes on its nodes), and sums the
// counts; a drain of a cluster names the cluster's route for the lane.
func (s Steps) Drain(ctx context.Context, in contract.GatewayDrainInput) (contract.GatewayDrainResult, error) {
	res := contract.GatewayDrainResult{Gateway: s.G.cfg.Name, Lane: in.Lane}
	targets := s.G.drainTargets(in)
	var errs []error
	for _, t := range targets {
		one := in
		one.Cluster, one.Lane, one.Nodes = t[0], t[1], nil
		r, err := s.G.Drain(ctx, one)
		res.InFlight += r.InFlight
		res.Finished += r.Finished
		res.CutOff += r.CutOff
		res.Seconds = max(res.Seconds, r.Seconds)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

// drainTargets are the (cluster, lane) pairs a drain selects: the one
// given, or every route serving in.Lane, or every route on in.Nodes.
func (g *Gateway) drainTargets(in contract.GatewayDrainInput) [][2]string {
	if in.Cluster != "" && in.Lane != "" {
		// A cutover drains the previous lane of its cluster; a route of
		// another cluster that serves the same lane drains too.
		out := [][2]string{{in.Cluster, in.Lane}}
		for _, c := range g.selectRoutes("", in.Lane, nil) {
			if c != in.Cluster {
				out = append(out, [2]string{c, in.Lane})
			}
		}
		return out
	}
	var out [][2]string
	for _, c := range g.selectRoutes("", in.Lane, in.Nodes) {
		if r, ok := g.routeOf(c); ok && r.Lane != "" {
			out = append(out, [2]string{c, r.Lane})
		}
	}
	return out
}

// selectRoutes are the clusters of the routes a step selects: cluster's,
// or every route serving lane, or every route on one of nodes.
func (g *Gateway) selectRoutes(cluster, lane string, nodes []string) []string {
	var out []string
	for _, r := range g.Routes() {
		switch {
		case cluster != "":
			if r.Cluster == cluster {
				out = append(out, r.Cluster)
			}
		case lane != "":
			if r.Lane == lane {
				out = append(out, r.Cluster)
			}
		default:
			if slices.ContainsFunc(r.Nodes, func(n string) bool { return slices.Contains(nodes, n) }) {
				out = append(out, r.Cluster)
			}
		}
	}
	return out
}

// one is a single route's step result.
func one(r contract.GatewayRoute, err error) (contract.GatewayStepResult, error) {
	if err != nil {
		return contract.GatewayStepResult{}, err
	}
	return contract.GatewayStepResult{Route: &r, Changed: 1}, nil
}
