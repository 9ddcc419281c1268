package probe_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/probe"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// rank is an in-process engine-sim rank with its log, standing in for a
// rank container: ranksOf reports it the way InspectLane reports Docker
// containers (a test double for the Docker side only; the engine is real).
type rank struct {
	node string
	n    int
	e    *simtest.Engine
	log  *syncbuf.Buffer
}

func ranksOf(rs ...*rank) probe.RanksFunc {
	return func(context.Context) ([]probe.RankState, error) {
		var out []probe.RankState
		for _, r := range rs {
			st := probe.RankState{Node: r.node, Rank: r.n, Container: fmt.Sprintf("sparklane-test-r%d", r.n), State: "running"}
			select {
			case <-r.e.Done():
				st.State, st.ExitCode, st.Logs = "exited", 1, r.log.Lines()
				if err := r.e.Err(); err != nil {
					st.Logs = append(st.Logs, "engine-sim: "+err.Error())
				}
			default:
			}
			out = append(out, st)
		}
		return out, nil
	}
}

func TestWaitReadyLoadingThenReady(t *testing.T) {
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	port := simtest.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	var mu sync.Mutex
	var states []string
	// Nothing listens for 0.7 s (container starting), then the engine
	// loads 16 KiB at 0.02 MiB/s (~0.8 s) with its port closed.
	startAt := time.Now().Add(700 * time.Millisecond)
	log := &syncbuf.Buffer{}
	r0 := &rank{node: "n0", n: 0, log: log}
	var startOnce sync.Once
	ranks := func(ctx context.Context) ([]probe.RankState, error) {
		if time.Now().After(startAt) {
			startOnce.Do(func() {
				r0.e = simtest.Start(t, sim.Config{ModelPath: model, Port: port, LoadMiBps: 0.02, Log: log, ServedModelName: "org/m"})
			})
		}
		if r0.e == nil {
			return []probe.RankState{{Node: "n0", Rank: 0, State: "created"}}, nil
		}
		return ranksOf(r0)(ctx)
	}
	res, err := probe.WaitReady(context.Background(), probe.ReadyInput{BaseURL: base, Budget: 20 * time.Second, Interval: 100 * time.Millisecond}, ranks, func(p probe.ReadyProgress) {
		mu.Lock()
		defer mu.Unlock()
		if len(states) == 0 || states[len(states)-1] != p.State {
			states = append(states, p.State)
		}
	})
	if err != nil {
		t.Fatalf("WaitReady: %v (states %v)", err, states)
	}
	if res.Model != "org/m" || res.Polls < 5 {
		t.Errorf("result %+v: want model org/m after several polls", res)
	}
	if strings.Join(states, ",") != "loading,ready" {
		t.Errorf("states %v, want loading then ready", states)
	}
}

func TestWaitReadyRankDeathDuringLoad(t *testing.T) {
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	dist := fmt.Sprintf("127.0.0.1:%d", simtest.FreePort(t))
	port := simtest.FreePort(t)
	base := sim.Config{ModelPath: model, NNodes: 2, DistInitAddr: dist, Heartbeat: 200 * time.Millisecond}
	c0, c1 := base, base
	c0.Port = port
	c1.NodeRank, c1.LoadMiBps = 1, 0.001 // rank 1 loads for ~16 s
	r0 := &rank{node: "dgx1", n: 0, log: &syncbuf.Buffer{}}
	r1 := &rank{node: "dgx2", n: 1, log: &syncbuf.Buffer{}}
	c0.Log, c1.Log = r0.log, r1.log
	r0.e = simtest.Start(t, c0)
	r1.e = simtest.Start(t, c1)

	time.AfterFunc(time.Second, func() { r1.e.Stop() }) // killed while loading
	start := time.Now()
	_, err := probe.WaitReady(context.Background(), probe.ReadyInput{BaseURL: fmt.Sprintf("http://127.0.0.1:%d", port), Budget: time.Minute, Interval: 200 * time.Millisecond}, ranksOf(r0, r1), nil)
	took := time.Since(start)
	if typ, _ := fault.TypeOf(err); typ != fault.RankExited {
		t.Fatalf("WaitReady after a rank died: %v (type %q), want %s", err, typ, fault.RankExited)
	}
	if took > 5*time.Second {
		t.Errorf("rank death reported after %s, want within 5s", took)
	}
	msg := err.Error()
	for _, want := range []string{"node dgx2 rank 1", "exit code 1", "rank 1 connecting to rank 0", "log lines"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

func TestWaitReadyRefusalAfterAnswerFails(t *testing.T) {
	// A test double for a head that answers 503 while warming up, then
	// goes away: refusal after an answer is a failure, not "loading".
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls sync.WaitGroup
	calls.Add(2)
	var once [2]sync.Once
	n := 0
	var mu sync.Mutex
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		i := n
		n++
		mu.Unlock()
		http.Error(w, "warming up", http.StatusServiceUnavailable)
		if i < 2 {
			once[i].Do(calls.Done)
		}
	})}
	go srv.Serve(ln)
	go func() { calls.Wait(); srv.Close() }()
	start := time.Now()
	_, err = probe.WaitReady(context.Background(), probe.ReadyInput{BaseURL: "http://" + ln.Addr().String(), Budget: 30 * time.Second, Interval: 50 * time.Millisecond}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "answered before") || !strings.Contains(err.Error(), "refuses") {
		t.Fatalf("refusal after an answer: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
}

func TestWaitReadyBudget(t *testing.T) {
	port := simtest.FreePort(t) // nothing listens: loading forever
	_, err := probe.WaitReady(context.Background(), probe.ReadyInput{BaseURL: fmt.Sprintf("http://127.0.0.1:%d", port), Budget: 400 * time.Millisecond, Interval: 50 * time.Millisecond}, nil, nil)
	if typ, _ := fault.TypeOf(err); typ != fault.ProbeFailed || !strings.Contains(err.Error(), "400ms") || !strings.Contains(err.Error(), "loading") {
		t.Fatalf("budget exhausted: %v (type %q), want ProbeFailed naming 400ms and the last state", err, typ)
	}
}

func TestSmokeAndDecodeAgainstSim(t *testing.T) {
	const decode, prefill = 100.0, 4000.0
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	e := simtest.Start(t, sim.Config{ModelPath: model, ServedModelName: "org/sim", DecodeTPS: decode, PrefillTPS: prefill, ContextLength: 8192})
	e.WaitServing(t, 10*time.Second)
	ctx := context.Background()

	name, err := probe.ModelName(ctx, e.URL)
	if err != nil || name != "org/sim" {
		t.Fatalf("ModelName: %q %v", name, err)
	}
	res, err := probe.Smoke(ctx, e.URL, "", []contract.Smoke{{Prompt: "What is 127*89?", Expect: "11303"}, {Prompt: "19+23", Expect: "42"}})
	if err != nil || len(res) != 2 || !res[0].OK || !res[1].OK {
		t.Fatalf("Smoke: %+v %v", res, err)
	}
	res, err = probe.Smoke(ctx, e.URL, "org/sim", []contract.Smoke{{Prompt: "19+23", Expect: "42"}, {Prompt: "What is 2+2?", Expect: "5"}})
	if typ, _ := fault.TypeOf(err); typ != fault.ProbeFailed || !strings.Contains(err.Error(), `"What is 2+2?"`) || !strings.Contains(err.Error(), "2+2 = 4") {
		t.Fatalf("failing smoke: %v, want ProbeFailed naming the prompt and the answer", err)
	}
	if len(res) != 2 || !res[0].OK || res[1].OK {
		t.Errorf("failing smoke results %+v", res)
	}

	// A prompt beyond the context is the lane's answer, not a glitch.
	_, err = probe.DecodeProbe(ctx, probe.DecodeInput{BaseURL: e.URL, Model: "org/sim", PromptTokens: 9000, MaxTokens: 8})
	if typ, _ := fault.TypeOf(err); typ != fault.ProbeFailed || !strings.Contains(err.Error(), "maximum context length is 8192") {
		t.Errorf("over-long decode probe: %v", err)
	}
}

// The decode probe measures the engine's configured rates: engine and
// probe run in a synctest bubble over an in-memory network, so the clock
// is fake and the times are the engine's schedule, however busy this
// machine is.
func TestDecodeProbeMeasuresConfiguredRates(t *testing.T) {
	const decode, prefill = 100.0, 4000.0
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	synctest.Test(t, func(t *testing.T) {
		e, c := simtest.StartOnPipe(t, sim.Config{ModelPath: model, ServedModelName: "org/sim", DecodeTPS: decode, PrefillTPS: prefill, ContextLength: 8192})
		probe.UseHTTPClient(t, c)
		d, err := probe.DecodeProbe(context.Background(), probe.DecodeInput{BaseURL: e.URL, PromptTokens: 2000, MaxTokens: 151})
		if err != nil {
			t.Fatal(err)
		}
		if d.PromptTokens != 2000 || d.CompletionTokens != 151 {
			t.Errorf("token counts %+v, want 2000 in / 151 out (from usage)", d)
		}
		if math.Abs(d.DecodeTPS-decode)/decode > 0.01 {
			t.Errorf("decode %.2f tok/s, configured %.0f: off by more than 1%%", d.DecodeTPS, decode)
		}
		if math.Abs(d.PrefillTPS-prefill)/prefill > 0.01 {
			t.Errorf("prefill %.1f tok/s, configured %.0f: off by more than 1%%", d.PrefillTPS, prefill)
		}
		if want := 2000 / prefill; math.Abs(d.TTFTSeconds-want) > 0.001 {
			t.Errorf("TTFT %.4fs, want %.4fs", d.TTFTSeconds, want)
		}
		t.Logf("decode %.2f tok/s, prefill %.1f tok/s, TTFT %.4fs (configured %g, %g)", d.DecodeTPS, d.PrefillTPS, d.TTFTSeconds, decode, prefill)
	})
}
