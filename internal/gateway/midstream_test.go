package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/testkit/loopnet"
)

// dyingEngine is a test double of an engine killed mid-answer (a raw TCP
// server: net/http would finish the response): it reads a request,
// answers 200 with an event stream, writes one event and resets the
// connection, as a killed process's socket is.
func dyingEngine(t *testing.T, model string) string {
	t.Helper()
	l := loopnet.Listen(t)
	go loopnet.Serve(l, func(c net.Conn) {
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		ev := chunk(model, "first")
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev)
		c.(*net.TCPConn).SetLinger(0) // close with a reset
	})
	return "http://" + l.Addr().String()
}

// TestEngineDiesMidStream: a stream whose engine goes away after its
// first event ends, for the client, with an error event in OpenAI's
// shape naming the lane (what the SDK reports as a stream error), not a
// cut connection; the lane's address is never named.
func TestEngineDiesMidStream(t *testing.T) {
	base := dyingEngine(t, "org/model-d")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-d", base, "org/model-d"))
	s := g.stream(context.Background(), streamParams("org/model-d", 8))
	defer s.Close()
	if !s.Next() {
		t.Fatalf("first event: %v", s.Err())
	}
	for s.Next() {
	}
	var se *ssestream.StreamError
	if !errors.As(s.Err(), &se) {
		t.Fatalf("stream after the engine died: %v (%T), want the SDK's StreamError from an error event", s.Err(), s.Err())
	}
	contains(t, "error event", string(se.Event.Data), `"code":"lane_unreachable"`, `"type":"server_error"`, "lane lane-d (cluster c1)")
	if strings.Contains(string(se.Event.Data), strings.TrimPrefix(base, "http://")) {
		t.Errorf("the error event names the engine's address: %s", se.Event.Data)
	}
	if v := sample(t, g.reg, "sparklane_gateway_rejected_total", map[string]string{"cluster": "c1", "reason": "upstream_error"}); v != 1 {
		t.Errorf("rejected{c1,upstream_error} %v, want 1", v)
	}

	// curl sees the same: the event, then the error event, and a
	// response that ends cleanly (exit 0), not a cut transfer.
	out, err := curlStream(g.URL, "org/model-d")
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	contains(t, "curl's stream", out, "data: {\"id\":\"x\"", `data: {"error":{"message":"lane lane-d (cluster c1) stopped mid-answer`)
}

// curlStream asks url's gateway for a streamed chat answer of model with
// curl and returns what it printed.
func curlStream(url, model string) (string, error) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		return "", errors.New("curl is needed by this test: apt-get install curl")
	}
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, model)
	out, err := exec.Command(curl, "-sSN", "-H", "Content-Type: application/json", "-d", body, url+"/v1/chat/completions").CombinedOutput()
	return string(out), err
}
