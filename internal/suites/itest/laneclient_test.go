package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

// A client of a serving lane, as an operator's users see it: every 200 ms
// it asks the lane's address for /v1/models and a small completion, and
// records whether both answered, how long the completion took, and which
// lane answered (each test lane serves its own context length, which
// /v1/models reports as max_model_len). Used by the stage-ahead tests and
// the cutover benchmark (bench_cutover_test.go).

// clientEvery is the client's interval.
const clientEvery = 200 * time.Millisecond

// sample is one round of the client: /v1/models, then a completion.
type sample struct {
	At time.Time
	// OK: both answered 200 with a body that parses.
	OK bool
	// CtxLen is the max_model_len /v1/models reported: which lane answered.
	CtxLen int
	// Latency is the completion's round trip.
	Latency time.Duration
	Err     string
}

// laneClient is a running client loop; stop ends it and returns what it saw.
type laneClient struct {
	base    string
	http    *http.Client
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	samples []sample
}

// startLaneClient asks http://127.0.0.1:port every 200 ms, at most max
// rounds (the loop also ends by itself then), until stop.
func startLaneClient(port, max int) *laneClient {
	c := &laneClient{
		base: fmt.Sprintf("http://127.0.0.1:%d", port),
		http: &http.Client{Timeout: 5 * time.Second},
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	go c.loop(max)
	return c
}

func (c *laneClient) loop(max int) {
	defer close(c.done)
	tick := time.NewTicker(clientEvery)
	defer tick.Stop()
	for i := 0; i < max; i++ {
		s := c.round()
		c.mu.Lock()
		c.samples = append(c.samples, s)
		c.mu.Unlock()
		select {
		case <-c.quit:
			return
		case <-tick.C:
		}
	}
}

// round asks /v1/models and then a completion of the model it names.
func (c *laneClient) round() sample {
	s := sample{At: time.Now()}
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := c.getJSON(http.MethodGet, "/v1/models", nil, &models); err != nil {
		s.Err = err.Error()
		return s
	}
	if len(models.Data) != 1 {
		s.Err = fmt.Sprintf("/v1/models lists %d models", len(models.Data))
		return s
	}
	s.CtxLen = models.Data[0].MaxModelLen
	body, _ := json.Marshal(map[string]any{"model": models.Data[0].ID, "prompt": "19+23", "max_tokens": 4})
	var out struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	start := time.Now()
	err := c.getJSON(http.MethodPost, "/v1/completions", body, &out)
	s.Latency = time.Since(start)
	switch {
	case err != nil:
		s.Err = err.Error()
	case len(out.Choices) != 1 || !strings.Contains(out.Choices[0].Text, "42"):
		s.Err = fmt.Sprintf("completion of 19+23 answered %+v", out.Choices)
	default:
		s.OK = true
	}
	return s
}

func (c *laneClient) getJSON(method, path string, body []byte, v any) error {
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d", method, path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// seen is what the client saw so far.
func (c *laneClient) seen() []sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sample(nil), c.samples...)
}

// stop ends the loop (once: later calls only wait) and returns every
// sample.
func (c *laneClient) stop() []sample {
	c.once.Do(func() { close(c.quit) })
	<-c.done
	return c.seen()
}

// clientView is a client's samples read against a cutover's steps.
type clientView struct {
	// Failures is every failed round; BeforeStop those before the
	// previous lane's stop began.
	Failures, BeforeStop []sample
	// Downtime is the client's gap: its last answer from the old lane
	// before the stop to its first answer from the new lane.
	Downtime time.Duration
	// During are the old lane's completion latencies while [from, to).
	During []time.Duration
}

// viewOf reads samples against a stop that began at stop (zero: none),
// the old lane answering with context length oldCtx and the new one with
// newCtx, and the stage window [from, to).
func viewOf(samples []sample, stop time.Time, oldCtx, newCtx int, from, to time.Time) clientView {
	var v clientView
	var lastOld, firstNew time.Time
	for _, s := range samples {
		switch {
		case !s.OK:
			v.Failures = append(v.Failures, s)
			if stop.IsZero() || s.At.Before(stop) {
				v.BeforeStop = append(v.BeforeStop, s)
			}
		case s.CtxLen == oldCtx:
			lastOld = s.At
			if !s.At.Before(from) && s.At.Before(to) {
				v.During = append(v.During, s.Latency)
			}
		case s.CtxLen == newCtx && firstNew.IsZero():
			firstNew = s.At
		}
	}
	if !lastOld.IsZero() && !firstNew.IsZero() {
		v.Downtime = firstNew.Sub(lastOld)
	}
	return v
}

// latencies are the completion round trips of the successful samples in
// [from, to).
func latencies(samples []sample, from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, s := range samples {
		if s.OK && !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s.Latency)
		}
	}
	return out
}

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// stepSpan is the earliest start and the latest end of the cutover's
// steps named name (one per node, or one): ok is false when none ran.
func stepSpan(res contract.CutoverResult, name string) (from, to time.Time, ok bool) {
	for _, s := range res.Steps {
		if s.Name != name {
			continue
		}
		if !ok || s.Started.Before(from) {
			from = s.Started
		}
		if s.Ended.After(to) {
			to = s.Ended
		}
		ok = true
	}
	return from, to, ok
}

// engineStart is the new lane's own part of a switch window, from its
// cutover's steps: its cold ready time (the first rank's start to the
// ready wait's end) and its probe (smoke and decode probe).
func engineStart(t testing.TB, res contract.CutoverResult) (ready, probe time.Duration) {
	t.Helper()
	rankFrom, _, ok1 := stepSpan(res, "start rank 0")
	_, readyTo, ok2 := stepSpan(res, "wait ready")
	smokeFrom, smokeTo, ok3 := stepSpan(res, "smoke")
	decFrom, decTo, ok4 := stepSpan(res, "decode probe")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		t.Fatalf("the cutover's steps lack start rank 0, wait ready, smoke or decode probe: %+v", res.Steps)
	}
	return readyTo.Sub(rankFrom), smokeTo.Sub(smokeFrom) + decTo.Sub(decFrom)
}

// recipePort is the [defaults] port of recipe file path (the lane's API
// port, where its head answers).
func recipePort(t testing.TB, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^port = (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no [defaults] port", path)
	}
	p, _ := strconv.Atoi(string(m[1]))
	return p
}

// deriveRecipe writes lane name into dir from recipe file from (a demo
// lane's): its name, its blocks' dst under /srv/sparklane/NAME, no
// aliases, then each old → new of repl in turn.
func deriveRecipe(t testing.TB, dir, from, name string, repl ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, from+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	pairs := []string{
		fmt.Sprintf("name = %q", from), fmt.Sprintf("name = %q", name),
		`aliases = ["d4"]`, "", `aliases = ["d2"]`, "",
		fmt.Sprintf("SIM_LANE = %q", from), fmt.Sprintf("SIM_LANE = %q", name),
		`dst = "/srv/sparklane/hf"`, fmt.Sprintf(`dst = "/srv/sparklane/%s/hf"`, name),
		`dst = "/srv/sparklane/engram"`, fmt.Sprintf(`dst = "/srv/sparklane/%s/engram"`, name),
	}
	body := strings.NewReplacer(pairs...).Replace(string(b))
	for i := 0; i+1 < len(repl); i += 2 {
		if !strings.Contains(body, repl[i]) {
			t.Fatalf("recipe %s has no %q to replace", from, repl[i])
		}
		body = strings.ReplaceAll(body, repl[i], repl[i+1])
	}
	path := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// laneHold is the staging fault point (activities.Seams.StageHold) of
// the stage-ahead tests: armed for one lane at a byte count, it holds
// that lane's passes there until let go; other lanes' passes go on.
type laneHold struct {
	mu      sync.Mutex
	lane    string
	at      int64
	release chan struct{}
}

// arm holds lane's passes that reach at bytes from now on.
func (h *laneHold) arm(lane string, at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lane, h.at, h.release = lane, at, make(chan struct{})
}

// let releases the held passes and disarms.
func (h *laneHold) let() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.release != nil {
		close(h.release)
	}
	h.lane, h.release = "", nil
}

// hold is the seam.
func (h *laneHold) hold(_ context.Context, lane, _ string, p contract.StageProgress) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lane == "" || lane != h.lane || p.BytesDone < h.at {
		return nil
	}
	return h.release
}

// describeFailures says what failed, for a test's message.
func describeFailures(ss []sample) string {
	var b strings.Builder
	for i, s := range ss {
		if i == 5 {
			fmt.Fprintf(&b, "… and %d more", len(ss)-5)
			break
		}
		fmt.Fprintf(&b, "%s: %s; ", s.At.Format("15:04:05.000"), s.Err)
	}
	return b.String()
}
