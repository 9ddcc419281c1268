//go:build benchcutover

package itest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
)

// The cutover benchmark of issue 53 (scripts/bench-cutover.sh builds the
// suite with -tags benchcutover and runs it under the heavy-test lock):
// one node, lane bench-a (the demo's small NAS, context 16384) serving,
// and a lane that stages SPARKLANE_BENCH_CUTOVER_GIB GiB (default 4) of
// its own NAS replacing it twice, on the same data in one run: in the old
// order (--stage-ahead=never, bench-never) and staged ahead (bench-ahead),
// each into a fresh dst, the page cache dropped before each. A client asks
// the lanes' port every 200 ms throughout. It prints each order's switch
// window (the run's SwitchSeconds: the stop to the probe passed), the
// client's downtime (its last answer from bench-a to its first from the
// new lane) and failed rounds, their ratio, the new lane's cold ready +
// probe + 2 s, and the serving lane's completion latency (p50, p99) idle
// against during the stage ahead.
func TestBenchCutover(t *testing.T) {
	gib := int64(4)
	if v := os.Getenv("SPARKLANE_BENCH_CUTOVER_GIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("SPARKLANE_BENCH_CUTOVER_GIB=%q: want a whole number of GiB above 0", v)
		}
		gib = n
	}
	f, dc := demoFleet(t, 24<<20, func(o *fleetOptions) { o.clusters["bench"] = []string{"n1"} })
	big, err := demo.GenerateNAS(filepath.Join(filepath.Dir(f.cfg.HFCacheDir), "big"), gib<<30)
	if err != nil {
		t.Fatal(err)
	}
	cl := []string{`cluster = "demo-2x"`, `cluster = "bench"`}
	newLane := append([]string{f.cfg.HFCacheDir, big.Hub, "context_length = 16384", "context_length = 8192"}, cl...)
	deriveRecipe(t, f.cfg.RecipesDir, "demo-2x", "bench-a", cl...)
	deriveRecipe(t, f.cfg.RecipesDir, "demo-2x", "bench-never", newLane...)
	deriveRecipe(t, f.cfg.RecipesDir, "demo-2x", "bench-ahead", newLane...)
	f.reload()
	t.Cleanup(func() { removeLaneContainers(dc, "bench-a", "bench-never", "bench-ahead") })
	port := recipePort(t, filepath.Join(f.cfg.RecipesDir, "bench-a.toml"))

	benchCut(t, f, "bench-a")
	idle := startLaneClient(port, 75)
	<-idle.done
	idleLat := latencies(idle.stop(), time.Time{}, time.Now())

	never := benchSwitch(t, f, port, "bench-never", "--stage-ahead=never")
	benchCut(t, f, "bench-a")
	ahead := benchSwitch(t, f, port, "bench-ahead")
	if ahead.res.StageOrder != "ahead" || !strings.Contains(never.res.StageOrder, "--stage-ahead=never") {
		t.Fatalf("orders %q and %q, want after stop (--stage-ahead=never) and ahead", never.res.StageOrder, ahead.res.StageOrder)
	}

	fmt.Printf("BENCH cutover staging %d GiB on one node, one run each:\n", gib)
	for _, o := range []benchOrder{never, ahead} {
		fmt.Printf("BENCH   %-12s stage %.1fs, switch window %.2fs, client downtime %.2fs, %d failed rounds; new lane cold ready %.2fs + probe %.2fs + 2 s = %.2fs\n",
			o.lane, o.res.StageSeconds, o.res.SwitchSeconds, o.view.Downtime.Seconds(), len(o.view.Failures), o.ready.Seconds(), o.probe.Seconds(), (o.ready + o.probe + 2*time.Second).Seconds())
	}
	fmt.Printf("BENCH RATIO client downtime, stage ahead / old order: %.3f (goal <= 0.05); switch window: %.3f\n",
		ahead.view.Downtime.Seconds()/never.view.Downtime.Seconds(), ahead.res.SwitchSeconds/never.res.SwitchSeconds)
	fmt.Printf("BENCH stage-ahead downtime %.2fs against its lane's cold ready + probe + 2 s %.2fs (goal: under)\n",
		ahead.view.Downtime.Seconds(), (ahead.ready + ahead.probe + 2*time.Second).Seconds())
	fmt.Printf("BENCH serving lane latency, idle (%d rounds): p50 %v p99 %v; during the stage ahead (%d rounds): p50 %v p99 %v; p99 ratio %.2f (goal <= 1.5)\n",
		len(idleLat), percentile(idleLat, 50), percentile(idleLat, 99), len(ahead.view.During), percentile(ahead.view.During, 50), percentile(ahead.view.During, 99),
		float64(percentile(ahead.view.During, 99))/float64(percentile(idleLat, 99)))
}

// benchOrder is one cutover of the benchmark and what its client saw.
type benchOrder struct {
	lane         string
	res          contract.CutoverResult
	view         clientView
	ready, probe time.Duration
}

// benchCut cuts over to lane, failing the benchmark if it does not serve.
func benchCut(t *testing.T, f *fleet, lane string, args ...string) contract.CutoverResult {
	t.Helper()
	code, res, errOut := cutover(t, f, append([]string{"--lane", lane}, args...)...)
	if code != 0 || !res.OK {
		t.Fatalf("cutover %s: exit %d, %s (failed at %s)\n%s", lane, code, res.Error, res.FailedStep, errOut)
	}
	return res
}

// benchSwitch drops the page cache and cuts over to lane with a client
// on port throughout.
func benchSwitch(t *testing.T, f *fleet, port int, lane string, args ...string) benchOrder {
	t.Helper()
	dropCaches(t)
	client := startLaneClient(port, 20000)
	res := benchCut(t, f, lane, args...)
	// The client's first answer from the new lane ends its view.
	deadline := time.Now().Add(30 * time.Second)
	for !answeredBy(client.seen(), 8192) && time.Now().Before(deadline) {
		time.Sleep(clientEvery)
	}
	seen := client.stop()
	stageFrom, _, _ := stepSpan(res, "stage")
	_, verified, _ := stepSpan(res, "verify")
	stop, _, _ := stepSpan(res, "stop bench-a")
	o := benchOrder{lane: lane, res: res, view: viewOf(seen, stop, 16384, 8192, stageFrom, verified)}
	o.ready, o.probe = engineStart(t, res)
	return o
}

// dropCaches writes dirty pages out and drops the page cache (root), so
// each order stages and loads cold.
func dropCaches(t *testing.T) {
	t.Helper()
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		t.Logf("cannot drop the page cache (timings are warm): %v", err)
	}
}

// answeredBy: a round of seen was answered by the lane of context ctx.
func answeredBy(seen []sample, ctx int) bool {
	for _, s := range seen {
		if s.OK && s.CtxLen == ctx {
			return true
		}
	}
	return false
}
