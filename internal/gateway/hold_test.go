package gateway

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// answer is one SDK call's outcome.
type answer struct {
	res *openai.ChatCompletion
	err error
}

// chatAsync asks model in the background.
func chatAsync(c openai.Client, model string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		res, err := chat(context.Background(), c, model, "127*89")
		ch <- answer{res, err}
	}()
	return ch
}

// TestHoldThenRelease: requests for a held cluster wait through a switch
// (and a rollback) and are answered after Release by the route in place
// then.
func TestHoldThenRelease(t *testing.T) {
	a := startSim(t, "org/model-a")
	b := startSim(t, "org/model-b")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat"))
	c := g.client("")
	held, err := g.Hold(contract.GatewayHoldInput{Cluster: "c1", ETA: contract.Duration(5 * time.Second), Why: "cutover to lane-b"})
	if err != nil || held.State != contract.GatewayHeld || held.Lane != "lane-a" {
		t.Fatalf("Hold: %+v %v", held, err)
	}
	var waiting []<-chan answer
	for i := 0; i < 3; i++ {
		waiting = append(waiting, chatAsync(c, "chat"))
	}
	waitHeld(t, g, "c1", 3)
	r := mustRoute(t, g, lane("c1", "lane-b", b, "org/model-b", "chat"))
	if r.State != contract.GatewayHeld || r.Held != 3 || r.ETA != contract.Duration(5*time.Second) {
		t.Fatalf("Route of a held cluster: %+v, want held (3 waiting, ETA kept)", r)
	}
	if _, err := g.Release("c1"); err != nil {
		t.Fatal(err)
	}
	for _, ch := range waiting {
		a := <-ch
		if a.err != nil || a.res.Model != "org/model-b" || !strings.Contains(a.res.Choices[0].Message.Content, "11303") {
			t.Fatalf("held request after release: %+v %v, want lane-b's answer", a.res, a.err)
		}
	}
	// A rollback: held for lane-b's successor, back to lane-a, released.
	if _, err := g.Hold(contract.GatewayHoldInput{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	ch := chatAsync(c, "chat")
	waitHeld(t, g, "c1", 1)
	mustRoute(t, g, lane("c1", "lane-c", "http://127.0.0.1:1", "org/model-c", "chat"))
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat"))
	if _, err := g.Release("c1"); err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.err != nil || got.res.Model != "org/model-a" {
		t.Fatalf("held request after rollback: %+v %v, want lane-a's answer", got.res, got.err)
	}
	if v := sample(t, g.reg, "sparklane_gateway_hold_seconds", map[string]string{"cluster": "c1"}); v != 4 {
		t.Errorf("hold_seconds count %v, want 4", v)
	}
	if v := sample(t, g.reg, "sparklane_gateway_held", map[string]string{"cluster": "c1"}); v != 0 {
		t.Errorf("held gauge %v after release, want 0", v)
	}
}

// TestMaxHeld: past max_held a request gets 503 at once, with Retry-After
// the route's ETA rounded up, in OpenAI's error JSON.
func TestMaxHeld(t *testing.T) {
	a := startSim(t, "org/model-a")
	g := startGateway(t, config.Gateway{MaxHeld: 2}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat"))
	if _, err := g.Hold(contract.GatewayHoldInput{Cluster: "c1", ETA: contract.Duration(2500 * time.Millisecond), Why: "heal"}); err != nil {
		t.Fatal(err)
	}
	c := g.client("")
	w1, w2 := chatAsync(c, "chat"), chatAsync(c, "org/model-a")
	waitHeld(t, g, "c1", 2)
	_, err := chat(context.Background(), c, "chat", "hi")
	e := apiErr(t, err)
	if e.StatusCode != 503 || e.Code != "too_many_held" || e.Type != "server_error" || e.Response.Header.Get("Retry-After") != "3" {
		t.Fatalf("third held request: %d %q %q Retry-After %q", e.StatusCode, e.Code, e.Type, e.Response.Header.Get("Retry-After"))
	}
	contains(t, "max_held message", e.Message, "c1", "heal")
	if _, err := g.Release("c1"); err != nil {
		t.Fatal(err)
	}
	for _, w := range []<-chan answer{w1, w2} {
		if got := <-w; got.err != nil {
			t.Fatalf("held request: %v", got.err)
		}
	}
	if v := sample(t, g.reg, "sparklane_gateway_rejected_total", map[string]string{"cluster": "c1", "reason": "max_held"}); v != 1 {
		t.Errorf("rejected{max_held} = %v, want 1", v)
	}
}

// TestHoldTimeout: a request held past hold_timeout gets 503 with
// Retry-After (at least 1 s without an ETA).
func TestHoldTimeout(t *testing.T) {
	a := startSim(t, "org/model-a")
	g := startGateway(t, config.Gateway{HoldTimeout: 300 * time.Millisecond}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a"))
	if _, err := g.Hold(contract.GatewayHoldInput{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := chat(context.Background(), g.client(""), "org/model-a", "hi")
	took := time.Since(start)
	e := apiErr(t, err)
	if e.StatusCode != 503 || e.Code != "hold_timeout" || e.Response.Header.Get("Retry-After") != "1" {
		t.Fatalf("held past hold_timeout: %d %q Retry-After %q", e.StatusCode, e.Code, e.Response.Header.Get("Retry-After"))
	}
	if took < 300*time.Millisecond {
		t.Fatalf("answered after %s, before hold_timeout", took)
	}
	if r, _ := g.routeOf("c1"); r.Held != 0 {
		t.Fatalf("held %d after the timeout, want 0", r.Held)
	}
}

// TestOffAndWake: an off cluster answers 503 with Retry-After; with
// [gateway] wake its power-on starts and the request is held until
// released; a failed wake answers 503 and leaves it off.
func TestOffAndWake(t *testing.T) {
	a := startSim(t, "org/model-a")
	g := startGateway(t, config.Gateway{}, "")
	r := lane("c1", "lane-a", a, "org/model-a")
	r.ETA = contract.Duration(7 * time.Second)
	mustRoute(t, g, r)
	if _, err := g.Off(contract.GatewayOffInput{Cluster: "c1", Why: "night schedule"}); err != nil {
		t.Fatal(err)
	}
	_, err := chat(context.Background(), g.client(""), "org/model-a", "hi")
	e := apiErr(t, err)
	if e.StatusCode != 503 || e.Code != "cluster_off" || e.Response.Header.Get("Retry-After") != "7" {
		t.Fatalf("off cluster: %d %q Retry-After %q", e.StatusCode, e.Code, e.Response.Header.Get("Retry-After"))
	}
	contains(t, "off message", e.Message, "night schedule")

	woken := make(chan []string, 4)
	var wakeFails atomic.Bool
	gw := startGateway(t, config.Gateway{Wake: true}, "", func(o *Options) {
		o.Wake = func(cluster string, nodes []string) error {
			woken <- append([]string{cluster}, nodes...)
			if wakeFails.Load() {
				return errors.New("temporal unreachable")
			}
			return nil
		}
	})
	mustRoute(t, gw, r)
	if _, err := gw.Off(contract.GatewayOffInput{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	ch := chatAsync(gw.client(""), "org/model-a")
	waitHeld(t, gw, "c1", 1)
	if got := <-woken; strings.Join(got, " ") != "c1 c1-n1" {
		t.Fatalf("wake called with %v", got)
	}
	if _, err := gw.Release("c1"); err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.err != nil || got.res.Model != "org/model-a" {
		t.Fatalf("woken request: %+v %v", got.res, got.err)
	}
	wakeFails.Store(true)
	if _, err := gw.Off(contract.GatewayOffInput{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	_, err = chat(context.Background(), gw.client(""), "org/model-a", "hi")
	if e := apiErr(t, err); e.StatusCode != 503 || e.Code != "wake_failed" || strings.Contains(e.Message, "temporal") {
		t.Fatalf("failed wake: %d %q %q", e.StatusCode, e.Code, e.Message)
	}
	<-woken
	if r, _ := gw.routeOf("c1"); r.State != contract.GatewayOff {
		t.Fatalf("after a failed wake the route is %s, want off", r.State)
	}
}

// TestShutdownAnswersHeld: when the gateway stops, the requests it holds
// get 503 at once rather than waiting out hold_timeout.
func TestShutdownAnswersHeld(t *testing.T) {
	a := startSim(t, "org/model-a")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a"))
	if _, err := g.Hold(contract.GatewayHoldInput{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	ch := chatAsync(g.client(""), "org/model-a")
	waitHeld(t, g, "c1", 1)
	g.stop()
	got := <-ch
	if e := apiErr(t, got.err); e.StatusCode != 503 || e.Code != "gateway_stopping" {
		t.Fatalf("held request at shutdown: %d %q", e.StatusCode, e.Code)
	}
}
