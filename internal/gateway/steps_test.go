package gateway

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// TestStepsSelectAndRemember: the workflows' steps (Steps) select routes
// by lane (a stop) and by nodes (a power-off); a route's ready time is
// the next hold's ETA for its lane, kept across a restart; down answers
// 503 at once with Retry-After and is never woken; the state file carries
// the held counts while requests wait.
func TestStepsSelectAndRemember(t *testing.T) {
	a := startSim(t, "org/model-a")
	dir := t.TempDir()
	woke := 0
	g := startGateway(t, config.Gateway{Wake: true}, dir, func(o *Options) {
		o.Wake = func(string, []string) error { woke++; return nil }
	})
	s := Steps{G: g.Gateway}
	r := lane("c1", "lane-a", a, "org/model-a", "chat")
	r.ETA = contract.Duration(42 * time.Second)
	if res, err := s.Route(contract.GatewayRouteInput{Route: r}); err != nil || res.Changed != 1 || res.Route.State != contract.GatewayServing {
		t.Fatalf("Route: %+v %v", res, err)
	}
	mustRoute(t, g, lane("c2", "lane-b", a, "org/model-b"))

	// A hold for lane-a takes its last ready time as the ETA.
	res, err := s.Hold(contract.GatewayHoldInput{Cluster: "c1", Lane: "lane-a", ETA: contract.Duration(time.Second), Why: "healing"})
	if err != nil || res.Route.ETA != contract.Duration(42*time.Second) {
		t.Fatalf("Hold for lane-a: %+v %v, want lane-a's ready time 42s as the ETA", res.Route, err)
	}
	ch := chatAsync(g.client(""), "chat")
	waitHeld(t, g, "c1", 1)
	waitFor(t, "the held count in the state file", func() bool {
		var sf contract.GatewayTableFile
		b, _ := os.ReadFile(g.state)
		return json.Unmarshal(b, &sf) == nil && len(sf.Routes) == 2 && sf.Routes[0].Held == 1 && sf.Ready["lane-a"] == contract.Duration(42*time.Second)
	})
	if _, err := s.Release(contract.GatewayReleaseInput{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.err != nil {
		t.Fatalf("held request: %v", got.err)
	}

	// Down by lane: 503 at once, Retry-After the ETA, no wake.
	if res, err := s.Off(contract.GatewayOffInput{Lane: "lane-b", Down: true, Why: "stopping lane lane-b failed"}); err != nil || res.Changed != 1 {
		t.Fatalf("Off by lane: %+v %v", res, err)
	}
	_, err = chat(context.Background(), g.client(""), "org/model-b", "hi")
	if e := apiErr(t, err); e.StatusCode != 503 || e.Code != "lane_down" || e.Response.Header.Get("Retry-After") == "" || woke != 0 {
		t.Fatalf("down route: %d %q Retry-After %q, %d wakes", e.StatusCode, e.Code, e.Response.Header.Get("Retry-After"), woke)
	}

	// Off by nodes selects c1 (its node c1-n1) only; a drain by nodes
	// drains its lane (nothing in flight) and counts it.
	if d, err := s.Drain(context.Background(), contract.GatewayDrainInput{Nodes: []string{"c1-n1"}}); err != nil || d.InFlight != 0 {
		t.Fatalf("Drain by nodes: %+v %v", d, err)
	}
	if res, err := s.Off(contract.GatewayOffInput{Nodes: []string{"c1-n1"}, Why: "powered off"}); err != nil || res.Changed != 1 || res.Route.Cluster != "c1" || res.Route.State != contract.GatewayOff {
		t.Fatalf("Off by nodes: %+v %v", res, err)
	}

	// Unroute by lane removes lane-b's route; the ready times survive a
	// restart from the state file.
	if res, err := s.Unroute(contract.GatewayUnrouteInput{Lane: "lane-b"}); err != nil || res.Changed != 1 {
		t.Fatalf("Unroute by lane: %+v %v", res, err)
	}
	g.stop()
	g2 := startGateway(t, config.Gateway{}, dir)
	if got := g2.etaOf("lane-a", 0); got != contract.Duration(42*time.Second) {
		t.Errorf("lane-a's ready time after a restart: %v, want 42s", got)
	}
	if rs := g2.Routes(); len(rs) != 1 || rs[0].Cluster != "c1" || rs[0].State != contract.GatewayOff {
		t.Errorf("routes after a restart: %+v, want c1 off", rs)
	}
	// A keeper that knows the lane but not its head routes it as it was.
	res, err = Steps{G: g2.Gateway}.Route(contract.GatewayRouteInput{Route: contract.GatewayRoute{Cluster: "c1", Lane: "lane-a", Names: []string{"chat"}}})
	if err != nil || res.Route.BaseURL != a || res.Route.Served != "org/model-a" {
		t.Errorf("Route without a head: %+v %v, want lane-a's head and served name kept", res.Route, err)
	}
}
