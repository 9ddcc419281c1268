package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// refusedRetryEvery is how often a request whose lane refused it looks
// again when the table does not change meanwhile (an engine restarted by
// its container's policy, not by a workflow).
const refusedRetryEvery = time.Second

// refusedWait is a request whose lane's head refused the connection
// before anything was sent: its engine died, and the keeper has not held
// the cluster yet. It waits as a held request does — counted in the
// cluster's held gauge and bounded by max_held while it waits, and by
// hold_timeout from its first refusal — and goes again when the table
// changes (the keeper's hold, then its route and release) or every
// second. A client that went away ends it.
type refusedWait struct {
	g        *Gateway
	cluster  string
	since    time.Time
	deadline *time.Timer
}

// startRefusedWait begins the wait of a request rt's head refused.
func (g *Gateway) startRefusedWait(rt *route) *refusedWait {
	g.log.Debug("gateway: the lane's head refused a request; it waits", zap.String("cluster", rt.Cluster), zap.String("lane", rt.Lane))
	return &refusedWait{g: g, cluster: rt.Cluster, since: g.now(), deadline: time.NewTimer(g.cfg.HoldTimeout)}
}

// wait holds the request until the table changes, a second passed, its
// hold_timeout passed (503 with Retry-After), max_held is reached, the
// client goes away or the gateway stops.
func (w *refusedWait) wait(ctx context.Context, rt *route) *apiError {
	g := w.g
	g.mu.Lock()
	if g.held[w.cluster] >= g.cfg.MaxHeld {
		g.mu.Unlock()
		return errHeldTooMany(rt, g.cfg.MaxHeld)
	}
	g.held[w.cluster]++
	g.m.heldNow(w.cluster, g.held[w.cluster])
	changed := rt.changed
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.held[w.cluster]--
		g.m.heldNow(w.cluster, g.held[w.cluster])
		g.mu.Unlock()
	}()
	tick := time.NewTimer(refusedRetryEvery)
	defer tick.Stop()
	select {
	case <-changed:
	case <-tick.C:
	case <-w.deadline.C:
		return errLaneRefused(rt, g.cfg.HoldTimeout)
	case <-ctx.Done():
		return errGone
	case <-g.stopping:
		return errStopping(rt.Cluster)
	}
	return nil
}

// end records the wait's length (none when the request never waited).
func (w *refusedWait) end() {
	if w == nil {
		return
	}
	w.deadline.Stop()
	w.g.m.holdEnded(w.cluster, w.g.now().Sub(w.since))
}

// errLaneRefused answers a request whose lane kept refusing it for
// hold_timeout with no change of the table.
func errLaneRefused(rt *route, waited time.Duration) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "lane_unreachable", retryAfter: retryAfter(rt.ETA),
		msg:    fmt.Sprintf("lane %s (cluster %s) refused connections for %s (hold_timeout) and nothing healed it: retry later", rt.Lane, rt.Cluster, waited.Round(time.Second)),
		reason: "hold_timeout", cluster: rt.Cluster}
}
