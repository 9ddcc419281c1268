package itest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/devserver"
)

// The gateway through every switch of a lane, on one fleet
// (gwfleet_test.go) for its cases, in order: gw-a serves; the keeper heals
// it after `docker kill` of its head rank; a cutover to gw-b that fails to
// start rolls back to gw-a; a cutover to gw-b under 200 clients; kill -9
// of the control service and of the gateway; hold_timeout, max_held and
// the keys; a stop that drains. Last, the API key is nowhere in the
// logs, the starters' output or the histories.
func TestGatewayThroughSwitchesHealsAndRestarts(t *testing.T) {
	g := newGWFleet(t, gwOptions{tight: true})
	ctx := withTimeout(t, 10*time.Minute)
	code, res, out := g.cutover(ctx, t, "--lane", "gw-a")
	if code != 0 || !res.OK {
		t.Fatalf("cutover gw-a: exit %d\n%s", code, out)
	}
	for name := range g.url {
		r := g.waitRoute(ctx, t, name, "serving gw-a", serving("gw-a"))
		if r.Served != "model-a" || !slices.Equal(r.Names, []string{"model-a", "chat"}) || r.BaseURL != res.Serve.BaseURL {
			t.Fatalf("gateway %s routes %+v, want gw-a at %s as model-a, chat", name, r, res.Serve.BaseURL)
		}
	}
	t.Run("keeper heal", g.heal)
	t.Run("rollback", g.rollback)
	t.Run("cutover", g.switchover)
	t.Run("restarts", g.restarts)
	t.Run("holds and keys", g.holdsAndKeys)
	t.Run("stop drains", g.stopDrains)
	t.Run("no key anywhere", g.noKey)
}

// heal: `docker kill` of gw-a's head rank under load. The requests in
// flight on it (streams and whole answers, through the tight gateway,
// which nothing else uses) end at once with an error in OpenAI's shape
// naming the lane; requests sent once the keeper holds the names wait
// through its restart and are answered by gw-a after its probe; the
// only failures are those sent before the hold, each a clear error.
func (g *gwFleet) heal(t *testing.T) {
	ctx := withTimeout(t, 8*time.Minute)
	kid := contract.KeeperID(gwCluster)
	waitKeeperOn(ctx, t, g.tc(ctx), kid, "watching gw-a", func(s contract.KeeperStatus) bool {
		return s.Lane == "gw-a" && s.State == contract.KeeperWatching && s.Health == "up"
	})
	d, err := g.tc(ctx).DescribeWorkflowExecution(ctx, kid, "")
	if err != nil {
		t.Fatal(err)
	}
	g.healRun = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	load := startGWLoad(g.url[gwMain], g.key, "chat", 40, 5000, 200*time.Millisecond)
	defer load.stop()
	load.waitCalls(ctx, t, 0, 40)

	// Six requests of 30 s of tokens in flight on the head, three of them
	// streams that got their first event.
	tight := gwSDK(g.url[gwTight], g.key)
	long := make(chan gwCall, 6)
	for i := range 6 {
		go func() { long <- gwAsk(ctx, tight, "chat", longPrompt, i%2 == 1, 3000) }()
	}
	on := map[string]string{"gateway": gwTight, "cluster": gwCluster, "lane": "gw-a"}
	waitScrape(ctx, t, g.metrics[gwTight], "sparklane_gateway_in_flight", on, "six requests in flight on gw-a", func(v float64) bool { return v == 6 })
	waitScrape(ctx, t, g.metrics[gwTight], "sparklane_gateway_ttft_seconds_count", map[string]string{"name": "chat", "lane": "gw-a"}, "three streams begun", func(v float64) bool { return v == 3 })

	head, _ := rankNames(t, g.dc, "gw-a")
	killed := time.Now()
	if err := g.dc.ContainerKill(ctx, head, "KILL"); err != nil {
		t.Fatalf("docker kill %s: %v", head, err)
	}
	for range 6 {
		c := <-long
		if c.ok() || !strings.Contains(c.Err, "lane_unreachable") || !strings.Contains(c.Err, "lane gw-a (cluster gw)") || c.End.Sub(killed) > 20*time.Second {
			t.Errorf("a request in flight on the killed head (stream %v) ended %.1fs after the kill with %q (HTTP %d): want at once an error naming the lane (lane_unreachable)", c.Stream, c.End.Sub(killed).Seconds(), c.Err, c.Status)
		}
	}

	// Once the keeper holds the names, new requests wait for its restart.
	g.waitRoute(ctx, t, gwMain, "held by the keeper", func(r contract.GatewayRoute) bool { return r.State == contract.GatewayHeld })
	main := gwSDK(g.url[gwMain], g.key)
	held := make(chan gwCall, 6)
	for i := range 6 {
		go func() { held <- gwAsk(ctx, main, "chat", sumPrompt, i%2 == 1, 8) }()
	}
	st := waitKeeperOn(ctx, t, g.tc(ctx), kid, "restarted gw-a", func(s contract.KeeperStatus) bool {
		return len(s.Restarts) == 1 && s.Restarts[0].OK && s.State == contract.KeeperWatching
	})
	g.waitRoute(ctx, t, gwMain, "serving gw-a again", serving("gw-a"))
	load.waitCalls(ctx, t, len(load.calls()), 40)
	calls := load.stop()

	ev := g.events(ctx, t, kid, g.healRun)
	hold, rel := oneSpan(t, ev, "GatewayHold", contract.GatewayQueue(gwMain)), oneSpan(t, ev, "GatewayRelease", contract.GatewayQueue(gwMain))
	probes := activitySpans(ev, "DecodeProbe", "")
	if len(probes) == 0 || !probes[len(probes)-1].OK {
		t.Fatalf("the keeper's history has no decode probe of the restarted lane: %+v", probes)
	}
	probed := probes[len(probes)-1].Ended
	for range 6 {
		c := <-held
		if !c.ok() || c.Lane != "gw-a" || c.Model != "model-a" || c.Head.Before(probed) {
			t.Errorf("a request held through the heal: %s; answered %s, gw-a's probe passed %s", describeCalls([]gwCall{c}), c.Head.Format(time.StampMilli), probed.Format(time.StampMilli))
		}
	}
	checkAnsweredBy(t, calls, "gw-a")
	var failed, heldCalls int
	for _, c := range calls {
		switch {
		case c.ok() && c.Start.After(hold.Ended) && c.Start.Before(rel.Started):
			heldCalls++
		case c.ok():
		case c.Start.After(hold.Ended):
			t.Errorf("a request sent once the names were held failed: %s", describeCalls([]gwCall{c}))
		case !strings.Contains(c.Err, "lane gw-a (cluster gw)") || !strings.Contains(c.Err, "lane_unreachable") || c.End.Sub(c.Start) > time.Minute:
			t.Errorf("a request sent before the hold ended with no clear error naming the lane: %s", describeCalls([]gwCall{c}))
		default:
			failed++
		}
	}
	if heldCalls == 0 {
		t.Errorf("no client request was sent while the keeper held the names (%s to %s)", hold.Ended.Format(time.StampMilli), rel.Started.Format(time.StampMilli))
	}
	t.Logf("docker kill %s; keeper: %s; hold %.2fs after the kill, release %.2fs after it; %d client calls, %d held and answered, %d failed before the hold (lane_unreachable)",
		head, st.Restarts[0].Reason, hold.Ended.Sub(killed).Seconds(), rel.Ended.Sub(killed).Seconds(), len(calls), heldCalls, failed)
}

// rollback: a cutover to gw-b whose engine exits while loading fails at
// its start and rolls back; the requests the gateway held meanwhile are
// answered by gw-a once it serves again (after its probe); none fails.
func (g *gwFleet) rollback(t *testing.T) {
	ctx := withTimeout(t, 8*time.Minute)
	load := startGWLoad(g.url[gwMain], g.key, "chat", 100, 5000, 300*time.Millisecond)
	defer load.stop()
	load.waitCalls(ctx, t, 0, 100)
	code, res, out := g.cutover(ctx, t, "--lane", "gw-b", "-o", "extra_args=--fail-at=load")
	load.waitCalls(ctx, t, len(load.calls()), 100)
	calls := load.stop()
	if code == 0 || res.OK || !slices.Equal(res.RolledBack, []string{"gw-a"}) || !res.OldLaneAnswers {
		t.Fatalf("cutover to a gw-b that exits while loading: exit %d ok %v rolled back %v (answers %v), failed at %q: %s\n%s", code, res.OK, res.RolledBack, res.OldLaneAnswers, res.FailedStep, res.Error, out)
	}
	id := contract.CutoverID(gwCluster)
	g.saveRun(ctx, t, id, "", "cutover-gateway-rollback")
	// This cutover ended the keeper that healed gw-a: its run is whole now.
	g.saveRun(ctx, t, contract.KeeperID(gwCluster), g.healRun, "keeper-gateway-heal")
	g.waitRoute(ctx, t, gwMain, "serving gw-a after the rollback", serving("gw-a"))

	ev := g.events(ctx, t, id, "")
	hold, rel := oneSpan(t, ev, "GatewayHold", contract.GatewayQueue(gwMain)), oneSpan(t, ev, "GatewayRelease", contract.GatewayQueue(gwMain))
	back := oneSpan(t, ev, "DecodeProbe", "") // gw-b never got to its probe: gw-a's, after the rollback
	if f := gwFailures(calls); len(f) > 0 {
		t.Errorf("%d of %d requests failed through the failed cutover: %s", len(f), len(calls), describeCalls(f))
	}
	n := checkAnsweredBy(t, calls, "gw-a")
	held := 0
	for _, c := range calls {
		if c.ok() && c.Start.After(hold.Ended) && c.Start.Before(rel.Started) {
			held++
			if c.Head.Before(back.Ended) {
				t.Errorf("a request held through the rollback was answered at %s, before gw-a's probe passed at %s", c.Head.Format(time.StampMilli), back.Ended.Format(time.StampMilli))
			}
		}
	}
	if held == 0 {
		t.Errorf("no request was held from %s to %s", hold.Ended.Format(time.StampMilli), rel.Started.Format(time.StampMilli))
	}
	t.Logf("failed at %s (%s); held %.2fs; %d calls answered by gw-a, %d of them held", res.FailedStep, res.Error, rel.Ended.Sub(hold.Started).Seconds(), n["gw-a"], held)
}

// switchover: `starter cutover --lane gw-b` with gw-a serving, under 200
// clients (half streaming, by the alias, with the key): none fails;
// every answer from gw-a is over before the first from gw-b begins;
// every request sent once the names were held is answered by gw-b, and
// none from gw-b before its decode probe passed.
func (g *gwFleet) switchover(t *testing.T) {
	ctx := withTimeout(t, 8*time.Minute)
	load := startGWLoad(g.url[gwMain], g.key, "chat", 200, 5000, 500*time.Millisecond)
	defer load.stop()
	load.waitCalls(ctx, t, 0, 200)
	code, res, out := g.cutover(ctx, t, "--lane", "gw-b")
	load.waitCalls(ctx, t, len(load.calls()), 200)
	calls := load.stop()
	if code != 0 || !res.OK || res.StageOrder != "ahead" {
		t.Fatalf("cutover gw-b: exit %d ok %v order %q: %s\n%s", code, res.OK, res.StageOrder, res.Error, out)
	}
	id := contract.CutoverID(gwCluster)
	g.saveRun(ctx, t, id, "", "cutover-gateway")
	ev := g.events(ctx, t, id, "")
	hold, rel := oneSpan(t, ev, "GatewayHold", contract.GatewayQueue(gwMain)), oneSpan(t, ev, "GatewayRelease", contract.GatewayQueue(gwMain))
	probe := oneSpan(t, ev, "DecodeProbe", "")
	if f := gwFailures(calls); len(f) > 0 {
		t.Errorf("%d of %d requests failed through the cutover: %s", len(f), len(calls), describeCalls(f))
	}
	n := checkAnsweredBy(t, calls, "gw-a", "gw-b")
	var lastA, firstB time.Time
	var held []gwCall
	for _, c := range calls {
		switch {
		case !c.ok():
		case c.Lane == "gw-a":
			if c.End.After(lastA) {
				lastA = c.End
			}
			if c.Start.After(hold.Ended) {
				t.Errorf("a request sent after the hold (%s) was answered by gw-a: %s", hold.Ended.Format(time.StampMilli), describeCalls([]gwCall{c}))
			}
		default:
			if firstB.IsZero() || c.Head.Before(firstB) {
				firstB = c.Head
			}
			if c.Head.Before(probe.Ended) {
				t.Errorf("gw-b answered at %s, before its decode probe passed (%s)", c.Head.Format(time.StampMilli), probe.Ended.Format(time.StampMilli))
			}
			if c.Start.After(hold.Ended) && c.Start.Before(rel.Started) {
				held = append(held, c)
			}
		}
	}
	if n["gw-a"] == 0 || n["gw-b"] == 0 || len(held) == 0 || !lastA.Before(firstB) {
		t.Errorf("answers: %v, %d held; gw-a's last over at %s, gw-b's first at %s: want both lanes, held requests, and gw-a over before gw-b began",
			n, len(held), lastA.Format(time.StampMilli), firstB.Format(time.StampMilli))
	}
	if len(res.Drained) != len(g.url) {
		t.Errorf("the cutover drained gw-a on %d gateways, want %d: %+v", len(res.Drained), len(g.url), res.Drained)
	}
	for _, d := range res.Drained {
		if d.Lane != "gw-a" || d.CutOff != 0 || d.Finished != d.InFlight {
			t.Errorf("drain of gw-a on gateway %s: %+v, want every request in flight finished", d.Gateway, d)
		}
	}
	ready, probeD := engineStart(t, res)
	waits := append(waitLatencies(held), 0)
	t.Logf("%d requests (%d streams): gw-a %d, gw-b %d, %d failed; %d held, longest wait %v, against gw-b's cold ready %v + probe %v; switch window %.2fs",
		len(calls), len(calls)/2, n["gw-a"], n["gw-b"], len(gwFailures(calls)), len(held), slices.Max(waits).Round(time.Millisecond), ready.Round(time.Millisecond), probeD.Round(time.Millisecond), res.SwitchSeconds)
}

// restarts: kill -9 of the control service under load: the gateway goes
// on routing (no request fails) until it is back; kill -9 of the
// gateway: the control service starts it again, from the same table.
func (g *gwFleet) restarts(t *testing.T) {
	ctx := withTimeout(t, 8*time.Minute)
	load := startGWLoad(g.url[gwMain], g.key, "chat", 50, 5000, 200*time.Millisecond)
	defer load.stop()
	load.waitCalls(ctx, t, 0, 50)
	killed := g.kill9Control(ctx)
	down := len(load.calls())
	load.waitCalls(ctx, t, down, 150)
	whileDown := len(load.calls()) - down
	if code, out := g.starter(ctx, "--json", "control", "start"); code != 0 {
		t.Fatalf("control start after kill -9: exit %d\n%s", code, out)
	}
	if o, ok := control.Find(g.state); !ok || o.PID == killed {
		t.Fatalf("no new control service after the restart: %+v", o)
	}
	g.mu.Lock()
	g.c = nil
	g.mu.Unlock()
	load.waitCalls(ctx, t, len(load.calls()), 50)
	calls := load.stop()
	if f := gwFailures(calls); len(f) > 0 {
		t.Errorf("%d of %d requests failed while the control service was killed and restarted: %s", len(f), len(calls), describeCalls(f))
	}
	checkAnsweredBy(t, calls, "gw-b")

	before, _ := g.route(t, gwMain)
	old := g.waitGateway(ctx, t, gwMain, 0)
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 gateway %s (pid %d): %v", gwMain, old.PID, err)
	}
	now := g.waitGateway(ctx, t, gwMain, old.PID)
	after, _ := g.route(t, gwMain)
	before.Held, after.Held = 0, 0
	if before.Lane != "gw-b" || after.Lane != before.Lane || after.BaseURL != before.BaseURL || after.State != before.State || !slices.Equal(after.Names, before.Names) {
		t.Errorf("gateway %s's route after its kill -9: %+v, before: %+v", gwMain, after, before)
	}
	c := gwAsk(ctx, gwSDK(g.url[gwMain], g.key), "chat", sumPrompt, true, 8)
	if !c.ok() || c.Lane != "gw-b" {
		t.Errorf("through the restarted gateway: %s", describeCalls([]gwCall{c}))
	}
	code, out := g.starter(ctx, "--json", "gateway", "routes")
	var tables []contract.GatewayTableFile
	err := json.NewDecoder(strings.NewReader(out[max(strings.Index(out, "["), 0):])).Decode(&tables)
	shown := false
	for _, tf := range tables {
		for _, r := range tf.Routes {
			shown = shown || (tf.Gateway == gwMain && r.Cluster == gwCluster && r.Lane == "gw-b" && r.State == contract.GatewayServing)
		}
	}
	if code != 0 || err != nil || len(tables) != len(g.url) || !shown {
		t.Errorf("starter gateway routes --json: exit %d (%v), want both gateways, main routing gw-b\n%s", code, err, out)
	}
	if code, out := g.starter(ctx, "status"); code != 0 || !strings.Contains(out, "gw-b") || !strings.Contains(out, g.url[gwMain][len("http://"):]) {
		t.Errorf("starter status does not show the gateway and its route (exit %d):\n%s", code, out)
	}
	t.Logf("control service %d killed: %d requests answered while it was away, none failed; gateway pid %d killed, pid %d started by the control service, route %s → %s",
		killed, whileDown, old.PID, now.PID, after.Lane, after.BaseURL)
}

// holdsAndKeys: the keys with curl (401 without, 403 for a name the key
// is not given, 200 with it); then a cutover to gw-c staging after the
// stop, its stage held at the fault point: the tight gateway holds three
// requests and refuses a fourth at once, and those three get 503 after
// its hold_timeout, each with Retry-After in OpenAI's error shape, while
// main's held requests are answered by gw-c once the stage goes on.
func (g *gwFleet) holdsAndKeys(t *testing.T) {
	ctx := withTimeout(t, 8*time.Minute)
	body := `{"model":"%s","max_tokens":8,"messages":[{"role":"user","content":"19+23"}]}`
	for _, k := range []struct {
		key, model string
		status     int
		want       string
	}{
		{"", "chat", 401, `"code":"missing_api_key"`},
		{"sk-not-the-key", "chat", 401, `"code":"invalid_api_key"`},
		{g.key, "model-b", 403, `"code":"model_not_allowed"`},
		{g.key, "chat", 200, `"model":"model-b"`},
	} {
		status, headers, out := curlChat(t, g.url[gwMain], k.key, strings.Replace(body, "%s", k.model, 1))
		if status != k.status || !strings.Contains(out, k.want) {
			t.Errorf("curl for %s with key %v: HTTP %d %s, want %d with %s", k.model, k.key == g.key, status, out, k.status, k.want)
		}
		if k.status == 200 && !strings.Contains(strings.ToLower(headers), "sparklane-lane: gw-b") {
			t.Errorf("curl's answer has no Sparklane-Lane: gw-b:\n%s", headers)
		}
	}

	if err := os.Remove(g.release); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		_, out := g.starter(ctx, "--json", "cutover", "--lane", "gw-c", "--stage-ahead=never")
		done <- out
	}()
	g.waitPaused(ctx, g.tc(ctx), contract.StageNodeID("gw-c", "g1"), contract.StageNodeID("gw-c", "g2"))
	for name := range g.url {
		g.waitRoute(ctx, t, name, "held while gw-c stages", func(r contract.GatewayRoute) bool { return r.State == contract.GatewayHeld })
	}
	main, tight := gwSDK(g.url[gwMain], g.key), gwSDK(g.url[gwTight], g.key)
	onMain, onTight := make(chan gwCall, 2), make(chan gwCall, 3)
	for i := range 2 {
		go func() { onMain <- gwAsk(ctx, main, "chat", sumPrompt, i == 1, 8) }()
	}
	for i := range 3 {
		go func() { onTight <- gwAsk(ctx, tight, "chat", sumPrompt, i == 1, 8) }()
	}
	heldOn := map[string]string{"cluster": gwCluster}
	waitScrape(ctx, t, g.metrics[gwMain], "sparklane_gateway_held", heldOn, "two requests held on main", func(v float64) bool { return v == 2 })
	waitScrape(ctx, t, g.metrics[gwTight], "sparklane_gateway_held", heldOn, "three requests held on tight", func(v float64) bool { return v == 3 })
	status, headers, out := curlChat(t, g.url[gwTight], g.key, strings.Replace(body, "%s", "chat", 1))
	if status != 503 || !strings.Contains(out, `"code":"too_many_held"`) || !strings.Contains(out, `"type":"server_error"`) || retryAfterOf(headers) < 1 {
		t.Errorf("a fourth request on tight (max_held 3): HTTP %d %s\n%s; want 503 too_many_held with Retry-After", status, out, headers)
	}
	for range 3 {
		c := <-onTight
		ra, _ := strconv.Atoi(c.RetryAfter)
		if c.Status != 503 || !strings.Contains(c.Err, "hold_timeout") || ra < 1 || c.End.Sub(c.Start) < 5*time.Second {
			t.Errorf("a request held on tight past its hold_timeout (5s) after %.2fs: %s, Retry-After %q; want 503 hold_timeout with Retry-After", c.End.Sub(c.Start).Seconds(), describeCalls([]gwCall{c}), c.RetryAfter)
		}
	}
	t.Logf("tight (max_held 3, hold_timeout 5s): a fourth request refused at once (503 too_many_held, Retry-After %d); the three held answered 503 hold_timeout", retryAfterOf(headers))
	if err := os.WriteFile(g.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out = <-done
	var res contract.CutoverResult
	if err := decodeJSON(out, &res); err != nil || !res.OK || res.StageOrder == "ahead" {
		t.Fatalf("cutover gw-c --stage-ahead=never: ok %v order %q: %s (%v)\n%s", res.OK, res.StageOrder, res.Error, err, out)
	}
	for range 2 {
		if c := <-onMain; !c.ok() || c.Lane != "gw-c" || c.Model != "model-c" {
			t.Errorf("a request held on main through gw-c's stage: %s", describeCalls([]gwCall{c}))
		}
	}
}

// stopDrains: `starter stop --lane gw-c` while a stream is in flight on
// it (1000 tokens: 10 s at gw-c's decode rate, far longer than the stop
// takes to reach its drain): the stop drains first (the stream finishes
// whole, after the drain began), then stops and removes the route (chat
// answers 404 naming what is served: nothing).
func (g *gwFleet) stopDrains(t *testing.T) {
	ctx := withTimeout(t, 5*time.Minute)
	main := gwSDK(g.url[gwMain], g.key)
	ttft := map[string]string{"name": "chat", "lane": "gw-c"}
	before := scrape(t, g.metrics[gwMain], "sparklane_gateway_ttft_seconds_count", ttft)
	stream := make(chan gwCall, 1)
	go func() { stream <- gwAsk(ctx, main, "chat", longPrompt, true, 1000) }()
	waitScrape(ctx, t, g.metrics[gwMain], "sparklane_gateway_ttft_seconds_count", ttft, "the stream begun", func(v float64) bool { return v > before })
	code, out := g.starter(ctx, "--json", "stop", "--lane", "gw-c")
	var res contract.StopResult
	if err := decodeJSON(out, &res); code != 0 || err != nil {
		t.Fatalf("stop --lane gw-c: exit %d (%v)\n%s", code, err, out)
	}
	c := <-stream
	if !c.ok() || c.Lane != "gw-c" {
		t.Errorf("the stream in flight through the stop: %s, want it whole", describeCalls([]gwCall{c}))
	}
	g.saveRun(ctx, t, contract.StopID("gw-c"), "", "stop-gateway-drain")
	drain := oneSpan(t, g.events(ctx, t, contract.StopID("gw-c"), ""), "GatewayDrain", contract.GatewayQueue(gwMain))
	if !c.End.After(drain.Started) || drain.Ended.Before(c.End.Add(-time.Second)) {
		t.Errorf("the stream ended at %s; main's drain ran %s to %s: want the drain waiting for it", c.End.Format(time.StampMilli), drain.Started.Format(time.StampMilli), drain.Ended.Format(time.StampMilli))
	}
	var drained bool
	for _, d := range res.Drained {
		drained = drained || (d.Gateway == gwMain && d.InFlight == 1 && d.Finished == 1 && d.CutOff == 0)
	}
	if !drained {
		t.Errorf("the stop's drains %+v: want main's with the one stream finished", res.Drained)
	}
	if _, routed := g.route(t, gwMain); routed {
		t.Errorf("gateway main still routes %s after the stop", gwCluster)
	}
	after := gwAsk(ctx, main, "chat", sumPrompt, false, 8)
	if after.Status != 404 || !strings.Contains(after.Err, "model_not_found") || !strings.Contains(after.Err, "Served: none") {
		t.Errorf("chat after the stop: %s, want 404 model_not_found saying nothing is served", describeCalls([]gwCall{after}))
	}
}

// noKey: the API key, and its hash, are in no file under state_dir (the
// control service's and the gateways' logs and tables, Temporal's
// database), no starter's output and no run's history.
func (g *gwFleet) noKey(t *testing.T) {
	ctx := withTimeout(t, 3*time.Minute)
	sum := sha256.Sum256([]byte(g.key))
	secrets := []string{g.key, hex.EncodeToString(sum[:])}
	db := false
	files := secretFreeFiles(t, g.state, secrets, func(p string, _ []byte) { db = db || filepath.Base(p) == devserver.DBFile })
	if !db {
		t.Errorf("Temporal's database (%s) was not among the files searched under %s", devserver.DBFile, g.state)
	}
	for _, p := range []string{control.LogPath(g.state), control.GatewayLogPath(g.state, gwMain), control.GatewayLogPath(g.state, gwTight)} {
		if b, err := os.ReadFile(p); err != nil || len(b) == 0 {
			t.Errorf("log %s is missing or empty (%v): nothing was checked", p, err)
		}
	}
	g.mu.Lock()
	for _, out := range g.outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("a starter's output holds the key or its hash:\n%s", out)
			}
		}
	}
	outs := len(g.outputs)
	g.mu.Unlock()
	runs := 0
	var next []byte
	for {
		resp, err := g.tc(ctx).ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", PageSize: 100, NextPageToken: next})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range resp.GetExecutions() {
			runs++
			h := g.events(ctx, t, w.GetExecution().GetWorkflowId(), w.GetExecution().GetRunId())
			for _, e := range h {
				b, _ := protojson.Marshal(e)
				for _, s := range secrets {
					if strings.Contains(string(b), s) {
						t.Errorf("history of %s holds the key or its hash: %s", w.GetExecution().GetWorkflowId(), b)
					}
				}
			}
		}
		if next = resp.GetNextPageToken(); len(next) == 0 {
			break
		}
	}
	if runs < 10 {
		t.Errorf("only %d runs listed: the histories were not all searched", runs)
	}
	t.Logf("the key is in none of %d files under state_dir, %d starter outputs, %d runs' histories", files, outs, runs)
}

// curlChat posts body to base's chat completions with curl (key as the
// bearer, "" none) and returns the status, the headers and the body.
func curlChat(t *testing.T, base, key, body string) (int, string, string) {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed by this test: apt-get install curl")
	}
	hdr := filepath.Join(t.TempDir(), "headers")
	args := []string{"-sS", "-D", hdr, "-H", "Content-Type: application/json", "-d", body, base + "/v1/chat/completions"}
	if key != "" {
		args = append([]string{"-H", "Authorization: Bearer " + key}, args...)
	}
	out, err := exec.Command(curl, args...).Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	h, err := os.ReadFile(hdr)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(h), "\n")
	f := strings.Fields(first)
	if len(f) < 2 {
		t.Fatalf("curl's status line %q", first)
	}
	status, _ := strconv.Atoi(f[1])
	return status, string(h), string(out)
}

// retryAfterOf is the Retry-After of headers in seconds (0: none).
func retryAfterOf(headers string) int {
	for _, l := range strings.Split(headers, "\n") {
		if v, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(l)), "retry-after:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
