package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/contract"
)

// errCutOff is the cause of a request cut off by a drain past its timeout.
var errCutOff = errors.New("cut off: the lane stopped draining")

// flightKey names a lane of a cluster: what a drain waits for.
type flightKey struct{ cluster, lane string }

// flight is one request forwarded to a lane, until its answer (a stream
// included) is over.
type flight struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// laneFlights are a lane's requests in flight; idle, when a drain waits,
// is closed once there are none.
type laneFlights struct {
	set  map[*flight]struct{}
	idle chan struct{}
}

// enter registers a request forwarded to rt (g.mu held): from here a
// drain of its lane counts it and may cut it off.
func (g *Gateway) enter(ctx context.Context, rt *route) (*flight, flightKey) {
	k := flightKey{rt.Cluster, rt.Lane}
	lf := g.flights[k]
	if lf == nil {
		lf = &laneFlights{set: map[*flight]struct{}{}}
		g.flights[k] = lf
	}
	f := &flight{}
	f.ctx, f.cancel = context.WithCancelCause(ctx)
	lf.set[f] = struct{}{}
	return f, k
}

// leave ends a request's flight.
func (g *Gateway) leave(k flightKey, f *flight) {
	f.cancel(nil)
	g.mu.Lock()
	defer g.mu.Unlock()
	lf := g.flights[k]
	if lf == nil {
		return
	}
	delete(lf.set, f)
	if len(lf.set) > 0 {
		return
	}
	if lf.idle != nil {
		close(lf.idle)
		lf.idle = nil
	}
	delete(g.flights, k)
}

// inFlight is a snapshot of the lane's requests in flight and a channel
// closed once it has none (nil when it has none now).
func (g *Gateway) inFlight(k flightKey) ([]*flight, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	lf := g.flights[k]
	if lf == nil || len(lf.set) == 0 {
		return nil, nil
	}
	out := make([]*flight, 0, len(lf.set))
	for f := range lf.set {
		out = append(out, f)
	}
	if lf.idle == nil {
		lf.idle = make(chan struct{})
	}
	return out, lf.idle
}

// Drain drains the lane in.Lane of in.Cluster before it stops: new
// requests for the cluster's names wait (the route is draining, then held
// once drained, until Release), and the lane's requests in flight, streams
// included, get up to in.Timeout (default drain_timeout) to finish; those
// left are cut off (their upstream requests cancelled). When the cluster
// already routes to another lane, its route is left as it is and only the
// lane's requests in flight are waited for. A ctx that ends first stops
// the wait (nothing is cut off) and returns its error.
func (g *Gateway) Drain(ctx context.Context, in contract.GatewayDrainInput) (contract.GatewayDrainResult, error) {
	res := contract.GatewayDrainResult{Gateway: g.cfg.Name, Lane: in.Lane}
	if in.Cluster == "" || in.Lane == "" {
		return res, fmt.Errorf("gateway drain: give the cluster and the lane (got cluster %q, lane %q)", in.Cluster, in.Lane)
	}
	timeout := in.Timeout.D()
	if timeout <= 0 {
		timeout = g.cfg.DrainTimeout
	}
	start := g.now()
	err := g.change(func(t *table) error {
		if i := t.find(in.Cluster); i >= 0 && t.list[i].Lane == in.Lane && t.list[i].State == contract.GatewayServing {
			t.list[i].State, t.list[i].Why = contract.GatewayDraining, "draining lane "+in.Lane
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	k := flightKey{in.Cluster, in.Lane}
	flights, idle := g.inFlight(k)
	res.InFlight = len(flights)
	g.log.Info("gateway drain", zap.String("cluster", in.Cluster), zap.String("lane", in.Lane), zap.Int("in_flight", res.InFlight), zap.Duration("timeout", timeout))
	if idle != nil {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-idle:
		case <-timer.C:
			res.CutOff = g.cutOff(k, flights)
		case <-ctx.Done():
			return res, fmt.Errorf("gateway drain of lane %s: %w", in.Lane, ctx.Err())
		}
	}
	res.Finished = res.InFlight - res.CutOff
	res.Seconds = g.now().Sub(start).Seconds()
	err = g.change(func(t *table) error {
		if i := t.find(in.Cluster); i >= 0 && t.list[i].Lane == in.Lane && t.list[i].State == contract.GatewayDraining {
			t.list[i].State, t.list[i].Why = contract.GatewayHeld, "drained lane "+in.Lane
		}
		return nil
	})
	g.m.drained(in.Cluster, in.Lane, res.Finished, res.CutOff)
	g.log.Info("gateway drained", zap.String("cluster", in.Cluster), zap.String("lane", in.Lane),
		zap.Int("in_flight", res.InFlight), zap.Int("finished", res.Finished), zap.Int("cut_off", res.CutOff), zap.Float64("seconds", res.Seconds))
	return res, err
}

// cutOff cancels those of flights still in flight on k and waits (a
// bounded while) until they have unwound; it returns how many it cut.
func (g *Gateway) cutOff(k flightKey, flights []*flight) int {
	g.mu.Lock()
	var cut []*flight
	if lf := g.flights[k]; lf != nil {
		for _, f := range flights {
			if _, ok := lf.set[f]; ok {
				cut = append(cut, f)
			}
		}
	}
	g.mu.Unlock()
	for _, f := range cut {
		f.cancel(errCutOff)
	}
	if _, idle := g.inFlight(k); idle != nil {
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-idle:
		case <-t.C:
			g.log.Warn("gateway drain: requests cut off have not ended within 10s", zap.String("cluster", k.cluster), zap.String("lane", k.lane))
		}
	}
	return len(cut)
}
