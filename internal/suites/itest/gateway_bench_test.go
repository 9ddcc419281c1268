//go:build benchgateway

package itest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

// The gateway's "through a cutover" benchmark of issue 54
// (scripts/bench-gateway-cutover.sh builds the suite with -tags
// benchgateway and runs it under the heavy-test lock): the gateway
// suite's fleet (gwfleet_test.go: a real control service process that
// starts the gateway as its own process, engine-sim containers) with its
// main gateway only. gw-a serves; SPARKLANE_BENCH_GATEWAY_CLIENTS clients
// (default 200; the official OpenAI Go SDK, no retries, half streaming,
// by the alias chat, with the key, each pausing 0.25–0.75 s between
// requests) ask the gateway while `starter cutover --lane gw-b` runs
// (staged ahead). It prints the client-visible failures; the requests
// held (sent between the gateway's hold and its release, from the run's
// history) and the longest wait of one (sent to its answer's first
// byte) against gw-b's cold ready + probe (the run's steps: first rank
// started to ready, smoke and decode probe); the switch window; and the
// gateway's own count of held requests.
func TestBenchGatewayCutover(t *testing.T) {
	clients := 200
	if v := os.Getenv("SPARKLANE_BENCH_GATEWAY_CLIENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("SPARKLANE_BENCH_GATEWAY_CLIENTS=%q: want a number of clients above 0", v)
		}
		clients = n
	}
	g := newGWFleet(t, gwOptions{})
	ctx := withTimeout(t, 20*time.Minute)
	if code, res, out := g.cutover(ctx, t, "--lane", "gw-a"); code != 0 || !res.OK {
		t.Fatalf("cutover gw-a: exit %d\n%s", code, out)
	}
	g.waitRoute(ctx, t, gwMain, "serving gw-a", serving("gw-a"))
	load := startGWLoad(g.url[gwMain], g.key, "chat", clients, 5000, 500*time.Millisecond)
	defer load.stop()
	load.waitCalls(ctx, t, 0, clients)
	from := time.Now()
	code, res, out := g.cutover(ctx, t, "--lane", "gw-b")
	load.waitCalls(ctx, t, len(load.calls()), clients)
	calls := load.stop()
	if code != 0 || !res.OK || res.StageOrder != "ahead" {
		t.Fatalf("cutover gw-b: exit %d ok %v order %q: %s\n%s", code, res.OK, res.StageOrder, res.Error, out)
	}
	ev := g.events(ctx, t, contract.CutoverID(gwCluster), "")
	hold, rel := oneSpan(t, ev, "GatewayHold", contract.GatewayQueue(gwMain)), oneSpan(t, ev, "GatewayRelease", contract.GatewayQueue(gwMain))
	var held []gwCall
	streams := 0
	for _, c := range calls {
		if c.Stream {
			streams++
		}
		if c.ok() && c.Start.After(hold.Ended) && c.Start.Before(rel.Started) {
			held = append(held, c)
		}
	}
	if len(held) == 0 {
		t.Fatalf("no request was held between %s and %s", hold.Ended.Format(time.StampMilli), rel.Started.Format(time.StampMilli))
	}
	waits := waitLatencies(held)
	longest := slices.Max(waits)
	ready, probe := engineStart(t, res)
	failed := gwFailures(calls)
	fmt.Printf("BENCH gateway through a cutover (gw-a -> gw-b, staged ahead), %d clients (half streaming) for %.1fs around it, one run:\n", clients, time.Since(from).Seconds())
	fmt.Printf("BENCH   requests %d (%d streams); client-visible failures %d (goal 0)\n", len(calls), streams, len(failed))
	fmt.Printf("BENCH   held %d (sent between the gateway's hold and its release); wait p50 %v, longest %v\n",
		len(held), percentile(waits, 50).Round(time.Millisecond), longest.Round(time.Millisecond))
	fmt.Printf("BENCH   gw-b cold ready %v + probe %v = %v; longest held wait / (cold ready + probe) = %.2f\n",
		ready.Round(time.Millisecond), probe.Round(time.Millisecond), (ready + probe).Round(time.Millisecond), float64(longest)/float64(ready+probe))
	fmt.Printf("BENCH   switch window %.2fs; gateway hold -> release %.2fs; drains %+v\n", res.SwitchSeconds, rel.Ended.Sub(hold.Started).Seconds(), res.Drained)
	fmt.Printf("BENCH   the gateway's own count: %v requests held, %.2fs held in all\n",
		scrape(t, g.metrics[gwMain], "sparklane_gateway_hold_seconds_count", map[string]string{"cluster": gwCluster}),
		scrape(t, g.metrics[gwMain], "sparklane_gateway_hold_seconds_sum", map[string]string{"cluster": gwCluster}))
	if len(failed) > 0 {
		t.Errorf("%d requests failed: %s", len(failed), describeCalls(failed))
	}
}
