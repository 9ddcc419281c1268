package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/loopnet"
)

// TestTableSurvivesRestart: every change is on disk before the call
// returns; a new gateway from the same state file routes the same.
func TestTableSurvivesRestart(t *testing.T) {
	a := startSim(t, "org/model-a")
	dir := t.TempDir()
	g1 := startGateway(t, config.Gateway{}, dir)
	mustRoute(t, g1, lane("c1", "lane-a", a, "org/model-a", "chat"))
	if _, err := g1.Hold(contract.GatewayHoldInput{Cluster: "c2", ETA: contract.Duration(90 * time.Second), Why: "cutover"}); err != nil {
		t.Fatal(err)
	}
	mustRoute(t, g1, lane("c2", "lane-b", "http://127.0.0.1:1", "org/model-b"))
	if _, err := g1.Off(contract.GatewayOffInput{Cluster: "c3", Why: "schedule"}); err != nil {
		t.Fatal(err)
	}
	before := g1.Routes()
	g1.stop() // as a kill: nothing is written at stop
	g2 := startGateway(t, config.Gateway{}, dir)
	if after := g2.Routes(); !reflect.DeepEqual(before, after) {
		t.Fatalf("table after restart:\n%+v\nwant\n%+v", after, before)
	}
	if res, err := chat(context.Background(), g2.client(""), "chat", "hi"); err != nil || res.Model != "org/model-a" {
		t.Fatalf("routing after restart: %v %v", res, err)
	}
	if r, _ := g2.routeOf("c2"); r.State != contract.GatewayHeld || r.ETA != contract.Duration(90*time.Second) {
		t.Fatalf("held route after restart: %+v", r)
	}
	// Reconcile replaces the clusters it names and leaves the others.
	g2.Reconcile([]contract.GatewayRoute{lane("c2", "lane-b2", a, "org/model-a", "b2"), {Cluster: "", Lane: "bad"}})
	r2, _ := g2.routeOf("c2")
	if r2.Lane != "lane-b2" || r2.State != contract.GatewayServing {
		t.Fatalf("c2 after Reconcile: %+v", r2)
	}
	if r1, _ := g2.routeOf("c1"); r1.Lane != "lane-a" {
		t.Fatalf("c1 after Reconcile of c2: %+v", r1)
	}
	if r3, _ := g2.routeOf("c3"); r3.State != contract.GatewayOff {
		t.Fatalf("c3 after Reconcile of c2: %+v", r3)
	}
	g2.stop()
	if g3 := startGateway(t, config.Gateway{}, dir); !reflect.DeepEqual(g3.Routes(), g2.Routes()) {
		t.Fatalf("reconciled table not kept: %+v", g3.Routes())
	}
	os.WriteFile(filepath.Join(dir, "gateway.json"), []byte("{not json"), 0o600)
	if _, err := New(Options{Gateway: config.Gateway{}.WithDefaults(), StateFile: filepath.Join(dir, "gateway.json")}); err == nil || !strings.Contains(err.Error(), "gateway.json") {
		t.Fatalf("corrupt state file: %v", err)
	}
}

// TestRouteChecks: a route must name its lane, served name and a base
// URL; a cluster outside [gateway] clusters is refused; Release needs a
// lane.
func TestRouteChecks(t *testing.T) {
	g := startGateway(t, config.Gateway{Clusters: []string{"c1"}}, "")
	for _, r := range []contract.GatewayRoute{
		{Cluster: "c1", Served: "m", BaseURL: "http://127.0.0.1:1"},
		{Cluster: "c1", Lane: "l", BaseURL: "http://127.0.0.1:1"},
		{Cluster: "c1", Lane: "l", Served: "m", BaseURL: "127.0.0.1:1"},
		{Cluster: "c9", Lane: "l", Served: "m", BaseURL: "http://127.0.0.1:1"},
	} {
		if _, err := g.Route(r); err == nil {
			t.Errorf("Route %+v: no error", r)
		}
	}
	if _, err := g.Hold(contract.GatewayHoldInput{Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Release("c1"); err == nil || !strings.Contains(err.Error(), "Route it first") {
		t.Fatalf("Release without a lane: %v", err)
	}
	if _, err := g.Release("c7"); err == nil {
		t.Fatal("Release of an unknown cluster: no error")
	}
}

// TestUpstreamErrors: an engine's error answer reaches the client in
// OpenAI's shape with the lane named (its status kept); an engine that
// does not answer is 502 naming the lane, not its address.
func TestUpstreamErrors(t *testing.T) {
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "completions") && r.URL.Path != "/v1/completions" {
			http.Error(w, "engine exploded", 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		io.WriteString(w, `{"object":"error","message":"prompt too long","type":"BadRequestError","param":"prompt","code":400}`)
	}))
	defer d.Close()
	g := startGateway(t, config.Gateway{HoldTimeout: time.Second}, "")
	mustRoute(t, g, lane("c1", "lane-x", d.URL, "org/model-x"))
	dead := loopnet.ClosedAddr(t)
	mustRoute(t, g, lane("c2", "lane-dead", "http://"+dead, "org/model-dead"))
	c := g.client("")
	ctx := context.Background()
	_, err := chat(ctx, c, "org/model-x", "hi")
	if e := apiErr(t, err); e.StatusCode != 500 || e.Type != "server_error" || e.Message != "lane lane-x (cluster c1): engine exploded" {
		t.Fatalf("engine 500: %d %q %q", e.StatusCode, e.Type, e.Message)
	}
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: "org/model-x", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}})
	if e := apiErr(t, err); e.StatusCode != 400 || e.Type != "BadRequestError" || e.Param != "prompt" || e.Message != "lane lane-x (cluster c1): prompt too long" {
		t.Fatalf("engine 400: %d %q %q %q", e.StatusCode, e.Type, e.Param, e.Message)
	}
	// A head that refuses connections: the request waits as a held one
	// (hold_timeout, 1 s here), then 503 with Retry-After naming the lane,
	// never its address.
	_, err = chat(ctx, c, "org/model-dead", "hi")
	e := apiErr(t, err)
	if e.StatusCode != 503 || e.Code != "lane_unreachable" || e.Response.Header.Get("Retry-After") == "" || !strings.Contains(e.Message, "lane-dead") || strings.Contains(e.Message, dead) {
		t.Fatalf("engine down: %d %q %q", e.StatusCode, e.Code, e.Message)
	}
}

// TestRefusedRequestWaitsForTheLane: a request whose lane's head refuses
// the connection (its engine died before any workflow held the cluster)
// waits, counted as held, and is answered once the engine listens again
// on its address — or by the route the keeper sets meanwhile.
func TestRefusedRequestWaitsForTheLane(t *testing.T) {
	g := startGateway(t, config.Gateway{}, "")
	dead := loopnet.ClosedAddr(t)
	mustRoute(t, g, lane("c1", "lane-a", "http://"+dead, "org/model-a"))
	c := g.client("")
	ch := chatAsync(c, "org/model-a")
	waitHeld(t, g, "c1", 1)
	// The engine comes back on the same address by itself.
	ln, err := net.Listen("tcp", dead)
	if err != nil {
		t.Fatalf("listen again on %s: %v", dead, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"org/model-a","choices":[{"index":0,"message":{"role":"assistant","content":"back"},"finish_reason":"stop"}]}`)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	if got := <-ch; got.err != nil || got.res.Choices[0].Message.Content != "back" {
		t.Fatalf("the request a refused head held: %+v %v, want the engine's answer once it listens again", got.res, got.err)
	}

	// The keeper routes the cluster elsewhere while a request waits.
	dead2 := loopnet.ClosedAddr(t)
	mustRoute(t, g, lane("c2", "lane-b", "http://"+dead2, "org/model-b"))
	b := startSim(t, "org/model-b")
	ch = chatAsync(c, "org/model-b")
	waitHeld(t, g, "c2", 1)
	mustRoute(t, g, lane("c2", "lane-b2", b, "org/model-b"))
	if got := <-ch; got.err != nil || got.res.Model != "org/model-b" {
		t.Fatalf("the request a refused head held: %+v %v, want the new route's answer", got.res, got.err)
	}
	if v := sample(t, g.reg, "sparklane_gateway_held", map[string]string{"cluster": "c2"}); v != 0 {
		t.Errorf("held gauge %v after the answers, want 0", v)
	}
}

// TestMaxBody: a body past max_body is 413 (declared or chunked), one
// within it is forwarded.
func TestMaxBody(t *testing.T) {
	a := startSim(t, "org/model-a")
	g := startGateway(t, config.Gateway{MaxBody: 1024}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a"))
	big := `{"model":"org/model-a","messages":[{"role":"user","content":"` + strings.Repeat("a ", 600) + `"}]}`
	resp, body := rawDo(t, "POST", g.URL+"/v1/chat/completions", "", strings.NewReader(big))
	if resp.StatusCode != 413 || !strings.Contains(body, `"code":"request_too_large"`) {
		t.Fatalf("declared length past max_body: %d %s", resp.StatusCode, body)
	}
	resp, body = rawDo(t, "POST", g.URL+"/v1/chat/completions", "", io.MultiReader(strings.NewReader(big)))
	if resp.StatusCode != 413 {
		t.Fatalf("chunked past max_body: %d %s", resp.StatusCode, body)
	}
	_, err := chat(context.Background(), g.client(""), "org/model-a", strings.Repeat("a ", 300))
	if err != nil {
		t.Fatalf("a body within max_body: %v", err)
	}
	if v := sample(t, g.reg, "sparklane_gateway_rejected_total", map[string]string{"reason": "too_large"}); v != 2 {
		t.Errorf("rejected{too_large} %v, want 2", v)
	}
}

// TestMetricsFirstScrape: a gateway started on a kept table exports its
// series before any request, and counts what it answers.
func TestMetricsFirstScrape(t *testing.T) {
	a := startSim(t, "org/model-a")
	dir := t.TempDir()
	g1 := startGateway(t, config.Gateway{}, dir)
	mustRoute(t, g1, lane("c1", "lane-a", a, "org/model-a", "chat"))
	g1.stop()
	g := startGateway(t, config.Gateway{}, dir)
	for _, f := range []string{"sparklane_gateway_requests_total", "sparklane_gateway_request_seconds", "sparklane_gateway_ttft_seconds",
		"sparklane_gateway_held", "sparklane_gateway_hold_seconds", "sparklane_gateway_drained_total", "sparklane_gateway_rejected_total",
		"sparklane_gateway_route", "sparklane_gateway_in_flight"} {
		if family(t, g.reg, f) == nil {
			t.Errorf("%s missing from the first scrape", f)
		}
	}
	want := map[string]string{"name": "chat", "lane": "lane-a", "code": "200", "gateway": ""}
	if v := sample(t, g.reg, "sparklane_gateway_requests_total", want); v != 0 {
		t.Fatalf("requests before any: %v", v)
	}
	for i := 0; i < 3; i++ {
		if _, err := chat(context.Background(), g.client(""), "chat", "hi"); err != nil {
			t.Fatal(err)
		}
	}
	chat(context.Background(), g.client(""), "nope", "hi")
	if v := sample(t, g.reg, "sparklane_gateway_requests_total", want); v != 3 {
		t.Errorf("requests{chat,200} %v, want 3", v)
	}
	if v := sample(t, g.reg, "sparklane_gateway_request_seconds", map[string]string{"name": "chat"}); v != 3 {
		t.Errorf("latency observations %v, want 3", v)
	}
	if v := sample(t, g.reg, "sparklane_gateway_requests_total", map[string]string{"name": labelUnknown, "code": "404"}); v != 1 {
		t.Errorf("requests{unknown,404} %v, want 1", v)
	}
	if v := sample(t, g.reg, "sparklane_gateway_route", map[string]string{"cluster": "c1", "lane": "lane-a", "state": "serving"}); v != 1 {
		t.Errorf("route{c1,serving} %v, want 1", v)
	}
}

// TestTLS: with tls_cert and tls_key the gateway serves HTTPS.
func TestTLS(t *testing.T) {
	a := startSim(t, "org/model-a")
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	g := startGateway(t, config.Gateway{TLSCert: certFile, TLSKey: keyFile}, dir)
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a"))
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	c := openai.NewClient(option.WithBaseURL(g.URL+"/v1/"), option.WithAPIKey("x"), option.WithHTTPClient(hc), option.WithMaxRetries(0))
	if res, err := chat(context.Background(), c, "org/model-a", "hi"); err != nil || res.Model != "org/model-a" {
		t.Fatalf("chat over TLS: %v %v", res, err)
	}
	if _, err := New(Options{Gateway: config.Gateway{TLSCert: certFile}.WithDefaults()}); err == nil || !strings.Contains(err.Error(), "tls_key") {
		t.Fatalf("tls_cert without tls_key: %v", err)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key under dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(k)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
