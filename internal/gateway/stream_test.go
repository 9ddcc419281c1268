package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// streamParams asks model for a streamed chat answer of n tokens.
func streamParams(model string, n int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me something")},
		MaxTokens: openai.Int(n),
	}
}

// chunk is one SSE event of a chat stream, as a double writes it.
func chunk(model, content string) string {
	return fmt.Sprintf("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", model, content)
}

// stallingDouble is a test double of an engine (httptest) that streams
// one event, then waits until release is closed (then finishes the
// stream) or its request's context ends (closing ended).
type stallingDouble struct {
	*httptest.Server
	release chan struct{}
	ended   chan struct{}
}

func newStallingDouble(t *testing.T, model string) *stallingDouble {
	d := &stallingDouble{release: make(chan struct{}), ended: make(chan struct{})}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, chunk(model, "first"))
		w.(http.Flusher).Flush()
		select {
		case <-d.release:
			fmt.Fprint(w, chunk(model, " second"))
			fmt.Fprint(w, "data: [DONE]\n\n")
		case <-r.Context().Done():
			close(d.ended)
		}
	}))
	t.Cleanup(d.Server.Close)
	return d
}

// TestStreamPassesUnbuffered: an event reaches the client while the
// engine still holds the rest of its stream (no buffering in the
// gateway), and the stream's time to first token is recorded.
func TestStreamPassesUnbuffered(t *testing.T) {
	d := newStallingDouble(t, "org/model-d")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-d", d.URL, "org/model-d", "chat"))
	s := g.stream(context.Background(), streamParams("chat", 8))
	defer s.Close()
	if !s.Next() || s.Current().Choices[0].Delta.Content != "first" {
		t.Fatalf("first event: %v %+v", s.Err(), s.Current())
	}
	if v := sample(t, g.reg, "sparklane_gateway_ttft_seconds", map[string]string{"name": "chat", "lane": "lane-d"}); v != 1 {
		t.Errorf("ttft observations %v, want 1", v)
	}
	close(d.release)
	if !s.Next() || s.Current().Choices[0].Delta.Content != " second" {
		t.Fatalf("second event: %v", s.Err())
	}
	if s.Next() || s.Err() != nil {
		t.Fatalf("end of stream: %v", s.Err())
	}
}

// TestSSEFramingWithCurl: the engine's event stream reaches curl framed as
// the engine wrote it (data: lines, blank-line separated, [DONE] last).
func TestSSEFramingWithCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed by this test: apt-get install curl")
	}
	a := startSim(t, "org/model-a")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat"))
	body := `{"model":"chat","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`
	out, err := exec.Command(curl, "-sSN", "-D", "/dev/stderr", "-H", "Content-Type: application/json", "-d", body, g.URL+"/v1/chat/completions").Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	framing := regexp.MustCompile(`^(data: \{[^\n]*\}\n\n)+data: \[DONE\]\n\n$`)
	if !framing.Match(out) {
		t.Fatalf("stream through the gateway is not SSE as the engine writes it:\n%s", out)
	}
	if n := strings.Count(string(out), `"model":"org/model-a"`); n < 6 {
		t.Fatalf("%d events name the served model, want the role chunk, 5 tokens and usage:\n%s", n, out)
	}
}

// TestDrainWaitsForStream: a drain holds new requests, waits for the
// lane's stream in flight to finish, reports the counts and leaves the
// route held.
func TestDrainWaitsForStream(t *testing.T) {
	a := startSim(t, "org/model-a", "--decode-tps", "50")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat"))
	c := g.client("")
	s := c.Chat.Completions.NewStreaming(context.Background(), streamParams("chat", 10))
	defer s.Close()
	if !s.Next() {
		t.Fatalf("first event: %v", s.Err())
	}
	type drained struct {
		res contract.GatewayDrainResult
		err error
	}
	done := make(chan drained, 1)
	go func() {
		res, err := g.Drain(context.Background(), contract.GatewayDrainInput{Cluster: "c1", Lane: "lane-a", Timeout: contract.Duration(time.Minute)})
		done <- drained{res, err}
	}()
	waitFor(t, "the route to drain", func() bool { r, _ := g.routeOf("c1"); return r.State != contract.GatewayServing })
	held := chatAsync(c, "chat")
	waitHeld(t, g, "c1", 1)
	n := 1
	for s.Next() {
		n++
	}
	if s.Err() != nil || n < 10 {
		t.Fatalf("stream during the drain: %d events, %v", n, s.Err())
	}
	d := <-done
	if d.err != nil || d.res.InFlight != 1 || d.res.Finished != 1 || d.res.CutOff != 0 || d.res.Lane != "lane-a" || d.res.Seconds <= 0 {
		t.Fatalf("drain: %+v %v, want 1 in flight, 1 finished", d.res, d.err)
	}
	if r, _ := g.routeOf("c1"); r.State != contract.GatewayHeld || r.Held != 1 {
		t.Fatalf("after the drain: %+v, want held with 1 waiting", r)
	}
	if _, err := g.Release("c1"); err != nil {
		t.Fatal(err)
	}
	if got := <-held; got.err != nil {
		t.Fatalf("request held by the drain: %v", got.err)
	}
	if v := sample(t, g.reg, "sparklane_gateway_drained_total", map[string]string{"lane": "lane-a", "outcome": "finished"}); v != 1 {
		t.Errorf("drained{finished} %v, want 1", v)
	}
}

// TestDrainCutsOffPastTimeout: a stream still running when the drain
// times out is cut off: its upstream request is cancelled (the double
// sees its context end) and the client's stream ends with an error event
// naming the lane.
func TestDrainCutsOffPastTimeout(t *testing.T) {
	d := newStallingDouble(t, "org/model-d")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-d", d.URL, "org/model-d"))
	s := g.stream(context.Background(), streamParams("org/model-d", 8))
	defer s.Close()
	if !s.Next() {
		t.Fatalf("first event: %v", s.Err())
	}
	res, err := g.Drain(context.Background(), contract.GatewayDrainInput{Cluster: "c1", Lane: "lane-d", Timeout: contract.Duration(100 * time.Millisecond)})
	if err != nil || res.InFlight != 1 || res.CutOff != 1 || res.Finished != 0 {
		t.Fatalf("drain past its timeout: %+v %v, want 1 cut off", res, err)
	}
	select {
	case <-d.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the engine's request was not cancelled by the cut-off")
	}
	for s.Next() {
	}
	var se *ssestream.StreamError
	if !errors.As(s.Err(), &se) || !strings.Contains(string(se.Event.Data), `"code":"lane_stopped"`) || !strings.Contains(string(se.Event.Data), "lane lane-d (cluster c1)") {
		t.Fatalf("a stream cut off ended with %v, want an error event naming the lane (lane_stopped)", s.Err())
	}
	if v := sample(t, g.reg, "sparklane_gateway_drained_total", map[string]string{"lane": "lane-d", "outcome": "cut_off"}); v != 1 {
		t.Errorf("drained{cut_off} %v, want 1", v)
	}
}

// TestClientDisconnectCancelsUpstream: a client that goes away mid-stream
// cancels the engine's request.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	d := newStallingDouble(t, "org/model-d")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-d", d.URL, "org/model-d"))
	ctx, cancel := context.WithCancel(context.Background())
	s := g.stream(ctx, streamParams("org/model-d", 8))
	if !s.Next() {
		t.Fatalf("first event: %v", s.Err())
	}
	cancel()
	s.Close()
	select {
	case <-d.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the engine's request was not cancelled when the client went away")
	}
	waitFor(t, "the request to be counted", func() bool {
		return sample(t, g.reg, "sparklane_gateway_requests_total", map[string]string{"lane": "lane-d", "code": "200"}) == 1
	})
	if v := sample(t, g.reg, "sparklane_gateway_in_flight", map[string]string{"lane": "lane-d"}); v != 0 {
		t.Errorf("in_flight %v after the request ended, want 0", v)
	}
}
