package itest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	historypb "go.temporal.io/api/history/v1"
)

// The gateway suite's clients (gateway_test.go, gateway_bench_test.go):
// each is the official OpenAI Go SDK (no retries: a failed request must
// reach the test) asking the gateway for a chat answer of "19+23" by a
// name, every pause or so, streaming or not, and recording what it got —
// the response's model field (the lane's served name), its
// Sparklane-Lane header, and when it was sent and answered.

// gwCall is one request of a gateway client and what it got.
type gwCall struct {
	Client int
	Stream bool
	// Start is when it was sent; Head when its answer began (a stream's
	// first event, else the whole answer); End when it was over.
	Start, Head, End time.Time
	// Model is the answer's model field, Lane its Sparklane-Lane header.
	Model, Lane string
	// Status is the HTTP status (0: none came); Err what failed ("" none).
	Status int
	Err    string
	// RetryAfter is a refusal's Retry-After header.
	RetryAfter string
}

// ok says whether the call was answered, 42 included.
func (c gwCall) ok() bool { return c.Err == "" }

// gwSDK is the OpenAI SDK pointed at a gateway with key ("" none), over
// a transport that keeps a connection per client.
func gwSDK(base, key string) openai.Client {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}}
	if key == "" {
		key = "none"
	}
	return openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(key), option.WithHTTPClient(hc), option.WithMaxRetries(0))
}

// sum is the prompt the clients ask (engine-sim answers "19+23 = 42");
// long is one it answers with max_tokens of filler.
const (
	sumPrompt  = "19+23"
	longPrompt = "tell me about the lanes"
)

// gwAsk sends one chat request for model (prompt, maxTokens of answer; a
// stream when stream) and records it; a request is bounded by ctx. The
// sum must be answered 42.
func gwAsk(ctx context.Context, c openai.Client, model, prompt string, stream bool, maxTokens int64) gwCall {
	call := gwCall{Stream: stream, Start: time.Now()}
	p := openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(maxTokens),
	}
	var raw *http.Response
	var text strings.Builder
	var err error
	if stream {
		s := c.Chat.Completions.NewStreaming(ctx, p, option.WithResponseInto(&raw))
		for s.Next() {
			ch := s.Current()
			if call.Head.IsZero() {
				call.Head, call.Model = time.Now(), ch.Model
			}
			for _, ch := range ch.Choices {
				text.WriteString(ch.Delta.Content)
			}
		}
		err = s.Err()
		s.Close()
	} else {
		var res *openai.ChatCompletion
		res, err = c.Chat.Completions.New(ctx, p, option.WithResponseInto(&raw))
		call.Head = time.Now()
		if err == nil {
			call.Model = res.Model
			for _, ch := range res.Choices {
				text.WriteString(ch.Message.Content)
			}
		}
	}
	call.End = time.Now()
	if raw != nil {
		call.Status, call.Lane, call.RetryAfter = raw.StatusCode, raw.Header.Get("Sparklane-Lane"), raw.Header.Get("Retry-After")
	}
	var ae *openai.Error
	switch {
	case errors.As(err, &ae):
		call.Status, call.Err = ae.StatusCode, fmt.Sprintf("HTTP %d %s: %s", ae.StatusCode, ae.Code, ae.Message)
		if ae.Response != nil {
			call.RetryAfter = ae.Response.Header.Get("Retry-After")
		}
	case err != nil:
		call.Err = err.Error()
	case prompt == sumPrompt && !strings.Contains(text.String(), "42"):
		call.Err = fmt.Sprintf("19+23 answered %q", text.String())
	}
	return call
}

// gwLoad is clients asking a gateway in a loop, each at most rounds
// times (the loops end by themselves then), until stop.
type gwLoad struct {
	quit chan struct{}
	once sync.Once
	wg   sync.WaitGroup
	mu   sync.Mutex
	got  []gwCall
}

// startGWLoad starts n clients of base asking for model with key, half
// of them streaming (odd ones), each pausing 0.5–1.5 × pause between
// its requests and asking at most rounds times.
func startGWLoad(base, key, model string, n, rounds int, pause time.Duration) *gwLoad {
	l := &gwLoad{quit: make(chan struct{})}
	c := gwSDK(base, key)
	for i := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.client(c, i, model, rounds, pause)
		}()
	}
	return l
}

func (l *gwLoad) client(c openai.Client, i int, model string, rounds int, pause time.Duration) {
	for range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		call := gwAsk(ctx, c, model, sumPrompt, i%2 == 1, 8)
		cancel()
		call.Client = i
		l.mu.Lock()
		l.got = append(l.got, call)
		l.mu.Unlock()
		select {
		case <-l.quit:
			return
		case <-time.After(time.Duration(float64(pause) * (0.5 + rand.Float64()))):
		}
	}
}

// calls is what the clients got so far.
func (l *gwLoad) calls() []gwCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]gwCall(nil), l.got...)
}

// stop ends every client after its request under way and returns every
// call.
func (l *gwLoad) stop() []gwCall {
	l.once.Do(func() { close(l.quit) })
	l.wg.Wait()
	return l.calls()
}

// waitCalls waits until the clients made n more calls than from, or
// fails the test at ctx's end.
func (l *gwLoad) waitCalls(ctx context.Context, t *testing.T, from, n int) {
	t.Helper()
	for len(l.calls()) < from+n {
		select {
		case <-ctx.Done():
			t.Fatalf("the gateway's clients made %d calls, want %d more than %d", len(l.calls()), n, from)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// gwFailures are the calls that failed.
func gwFailures(calls []gwCall) []gwCall {
	var out []gwCall
	for _, c := range calls {
		if !c.ok() {
			out = append(out, c)
		}
	}
	return out
}

// describeCalls says what calls got, for a test's message.
func describeCalls(calls []gwCall) string {
	var b strings.Builder
	for i, c := range calls {
		if i == 5 {
			fmt.Fprintf(&b, "… and %d more", len(calls)-5)
			break
		}
		fmt.Fprintf(&b, "[client %d stream %v sent %s: HTTP %d model %q lane %q: %s] ", c.Client, c.Stream, c.Start.Format("15:04:05.000"), c.Status, c.Model, c.Lane, c.Err)
	}
	return b.String()
}

// actSpan is one activity of a history: when it was scheduled, started
// and closed, and on which task queue.
type actSpan struct {
	Queue                     string
	Scheduled, Started, Ended time.Time
	OK                        bool
}

// activitySpans are the activities named name of a history, in the
// order they were scheduled, on queue ("" any).
func activitySpans(events []*historypb.HistoryEvent, name, queue string) []actSpan {
	idx := map[int64]int{}
	var out []actSpan
	for _, e := range events {
		at := e.GetEventTime().AsTime()
		switch {
		case e.GetActivityTaskScheduledEventAttributes() != nil:
			a := e.GetActivityTaskScheduledEventAttributes()
			if a.GetActivityType().GetName() == name && (queue == "" || a.GetTaskQueue().GetName() == queue) {
				idx[e.GetEventId()] = len(out)
				out = append(out, actSpan{Queue: a.GetTaskQueue().GetName(), Scheduled: at})
			}
		case e.GetActivityTaskStartedEventAttributes() != nil:
			if i, ok := idx[e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()]; ok {
				out[i].Started = at
			}
		case e.GetActivityTaskCompletedEventAttributes() != nil:
			if i, ok := idx[e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]; ok {
				out[i].Ended, out[i].OK = at, true
			}
		case e.GetActivityTaskFailedEventAttributes() != nil:
			if i, ok := idx[e.GetActivityTaskFailedEventAttributes().GetScheduledEventId()]; ok {
				out[i].Ended = at
			}
		}
	}
	return out
}

// oneSpan is the only completed activity name on queue of a history, or
// fails the test.
func oneSpan(t *testing.T, events []*historypb.HistoryEvent, name, queue string) actSpan {
	t.Helper()
	var ok []actSpan
	for _, s := range activitySpans(events, name, queue) {
		if s.OK {
			ok = append(ok, s)
		}
	}
	if len(ok) != 1 {
		t.Fatalf("the history has %d completed %s on queue %q, want 1: %+v", len(ok), name, queue, ok)
	}
	return ok[0]
}

// scrape is the value of the Prometheus series name at addr whose
// labels include labels (the first that does), -1 when none.
func scrape(t *testing.T, addr, name string, labels map[string]string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		set, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && strings.Contains(","+set+",", fmt.Sprintf(",%s=%q,", k, v))
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("%s at %s: %q", name, addr, line)
		}
		return f
	}
	return -1
}

// waitScrape polls scrape until ok says so, or fails the test at ctx's
// end.
func waitScrape(ctx context.Context, t *testing.T, addr, name string, labels map[string]string, what string, ok func(float64) bool) {
	t.Helper()
	for {
		v := scrape(t, addr, name, labels)
		if ok(v) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s%v at %s is %v", what, name, labels, addr, v)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitLatencies are the wait of each call (Start to Head), sorted.
func waitLatencies(calls []gwCall) []time.Duration {
	out := make([]time.Duration, 0, len(calls))
	for _, c := range calls {
		out = append(out, c.Head.Sub(c.Start))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
