package activities

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/contract"
)

// GatewayTable is the route table the gateway's activities change: the
// running gateway (internal/gateway), which writes it to disk before it
// answers, so what a step changed outlives the gateway's process.
type GatewayTable interface {
	Hold(in contract.GatewayHoldInput) (contract.GatewayStepResult, error)
	Route(in contract.GatewayRouteInput) (contract.GatewayStepResult, error)
	Release(in contract.GatewayReleaseInput) (contract.GatewayStepResult, error)
	// Drain returns once the lane's requests in flight finished or
	// in.Timeout passed (those still running are cut off then).
	Drain(ctx context.Context, in contract.GatewayDrainInput) (contract.GatewayDrainResult, error)
	Unroute(in contract.GatewayUnrouteInput) (contract.GatewayStepResult, error)
	Off(in contract.GatewayOffInput) (contract.GatewayStepResult, error)
}

// GatewayActivities run on a gateway's queue (contract.GatewayQueue), in
// the gateway's own process: the workflows' steps that decide what a
// cluster's names reach. Each is a thin call into the table; a step's
// result is the route it left, so the history shows every change clients
// saw.
type GatewayActivities struct {
	// Name is the gateway's name ("" for the one [gateway]).
	Name  string
	Table GatewayTable
	Log   *zap.Logger
}

// GatewayHold holds new requests for a cluster's names until Release.
func (a *GatewayActivities) GatewayHold(ctx context.Context, in contract.GatewayHoldInput) (contract.GatewayStepResult, error) {
	r, err := a.Table.Hold(in)
	return a.step("hold", routesOf(in.Cluster, "", nil), r, err)
}

// GatewayRoute points a cluster's names at a lane's head.
func (a *GatewayActivities) GatewayRoute(ctx context.Context, in contract.GatewayRouteInput) (contract.GatewayStepResult, error) {
	r, err := a.Table.Route(in)
	return a.step("route", routesOf(in.Route.Cluster, "", nil), r, err)
}

// GatewayRelease sends a cluster's held requests to its route.
func (a *GatewayActivities) GatewayRelease(ctx context.Context, in contract.GatewayReleaseInput) (contract.GatewayStepResult, error) {
	r, err := a.Table.Release(in)
	return a.step("release", routesOf(in.Cluster, "", nil), r, err)
}

// GatewayOff marks a cluster off by schedule.
func (a *GatewayActivities) GatewayOff(ctx context.Context, in contract.GatewayOffInput) (contract.GatewayStepResult, error) {
	r, err := a.Table.Off(in)
	return a.step("off", routesOf(in.Cluster, in.Lane, in.Nodes), r, err)
}

// GatewayUnroute removes a cluster's route.
func (a *GatewayActivities) GatewayUnroute(ctx context.Context, in contract.GatewayUnrouteInput) (contract.GatewayStepResult, error) {
	r, err := a.Table.Unroute(in)
	return a.step("unroute", routesOf(in.Cluster, in.Lane, nil), r, err)
}

// GatewayDrain drains a cluster's lane before it stops, heartbeating
// while its requests in flight finish; the result counts them.
func (a *GatewayActivities) GatewayDrain(ctx context.Context, in contract.GatewayDrainInput) (contract.GatewayDrainResult, error) {
	stop := keepAlive(ctx)
	defer stop()
	res, err := a.Table.Drain(ctx, in)
	res.Gateway, res.Lane = a.Name, in.Lane
	if err != nil {
		return res, classify(fmt.Errorf("gateway %s: drain lane %s (cluster %s, nodes %v): %w", a.label(), in.Lane, in.Cluster, in.Nodes, err))
	}
	a.Log.Info("gateway drained", zap.String("cluster", in.Cluster), zap.String("lane", in.Lane),
		zap.Int("in_flight", res.InFlight), zap.Int("finished", res.Finished), zap.Int("cut_off", res.CutOff), zap.Float64("seconds", res.Seconds))
	return res, nil
}

// step is a table change's result, logged; err names the gateway, the
// step and the cluster.
func (a *GatewayActivities) step(what, routes string, r contract.GatewayStepResult, err error) (contract.GatewayStepResult, error) {
	r.Gateway = a.Name
	if err != nil {
		return r, classify(fmt.Errorf("gateway %s: %s %s: %w", a.label(), what, routes, err))
	}
	f := []zap.Field{zap.String("step", what), zap.String("routes", routes), zap.Int("changed", r.Changed)}
	if r.Route != nil {
		f = append(f, zap.String("lane", r.Route.Lane), zap.String("state", r.Route.State))
	}
	a.Log.Info("gateway step", f...)
	return r, nil
}

// routesOf names the routes a step selects: a cluster's, a lane's or
// those on nodes.
func routesOf(cluster, lane string, nodes []string) string {
	switch {
	case cluster != "":
		return "cluster " + cluster
	case lane != "":
		return "the routes of lane " + lane
	default:
		return "the routes on nodes " + strings.Join(nodes, ", ")
	}
}

// label names the gateway in an error.
func (a *GatewayActivities) label() string {
	if a.Name == "" {
		return "(the one [gateway])"
	}
	return a.Name
}
