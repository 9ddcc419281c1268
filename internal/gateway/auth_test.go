package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/sparklane/sparklane/internal/config"
)

// keyLine is a keys file line for key, optionally limited to names.
func keyLine(key, names string) string {
	sum := sha256.Sum256([]byte(key))
	return strings.TrimSpace("sha256:" + hex.EncodeToString(sum[:]) + " " + names)
}

// TestAPIKeys: a missing or unknown key is 401, a key not given a model
// 403, all in OpenAI's error shape; /v1/models lists what a key may see;
// the client's key never reaches the engine, and no key nor its hash is
// in the log or the metrics.
func TestAPIKeys(t *testing.T) {
	const full, limited = "sk-full-5ecret-aaaa", "sk-limited-5ecret-bbbb"
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	os.WriteFile(keys, []byte("# gateway keys\n"+keyLine(full, "")+"\n\n"+keyLine(limited, "chat,org/model-a")+"\n"), 0o600)
	a := startSim(t, "org/model-a")
	var mu sync.Mutex
	var seenAuth []string
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenAuth = append(seenAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"org/model-b","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	}))
	defer d.Close()
	g := startGateway(t, config.Gateway{APIKeysFile: keys}, dir)
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat"))
	mustRoute(t, g, lane("c2", "lane-b", d.URL, "org/model-b"))
	ctx := context.Background()

	resp, body := rawDo(t, "GET", g.URL+"/v1/models", "", nil)
	if resp.StatusCode != 401 || !strings.Contains(body, `"code":"missing_api_key"`) {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	_, err := chat(ctx, g.client("sk-wrong"), "chat", "hi")
	if e := apiErr(t, err); e.StatusCode != 401 || e.Code != "invalid_api_key" {
		t.Fatalf("unknown key: %d %q", e.StatusCode, e.Code)
	}
	_, err = chat(ctx, g.client(limited), "org/model-b", "hi")
	if e := apiErr(t, err); e.StatusCode != 403 || e.Code != "model_not_allowed" || e.Param != "model" {
		t.Fatalf("limited key, other model: %d %q", e.StatusCode, e.Code)
	}
	if res, err := chat(ctx, g.client(limited), "chat", "hi"); err != nil || res.Model != "org/model-a" {
		t.Fatalf("limited key, its model: %v %v", res, err)
	}
	if res, err := chat(ctx, g.client(full), "org/model-b", "hi"); err != nil || res.Model != "org/model-b" {
		t.Fatalf("full key: %v %v", res, err)
	}
	lc := g.client(limited)
	page, err := lc.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "chat,org/model-a" {
		t.Fatalf("models a limited key sees: %v", ids)
	}
	_, err = chat(ctx, lc, "gpt-9", "hi")
	if e := apiErr(t, err); e.StatusCode != 404 || strings.Contains(e.Message, "model-b") {
		t.Fatalf("limited key, unknown model: %d %q (must list only its names)", e.StatusCode, e.Message)
	}
	mu.Lock()
	if len(seenAuth) != 1 || seenAuth[0] != "" {
		t.Fatalf("the engine saw Authorization %q, want none", seenAuth)
	}
	mu.Unlock()

	var metrics strings.Builder
	fams, _ := g.reg.Gather()
	for _, f := range fams {
		expfmt.MetricFamilyToText(&metrics, f)
	}
	for _, k := range []string{full, limited} {
		sum := sha256.Sum256([]byte(k))
		for what, text := range map[string]string{"log": g.logs.String(), "metrics": metrics.String(), "state file": readFile(t, g.state)} {
			if strings.Contains(text, k) || strings.Contains(text, hex.EncodeToString(sum[:])[:8]) {
				t.Errorf("the %s holds a key or its hash", what)
			}
		}
	}
	if v := sample(t, g.reg, "sparklane_gateway_rejected_total", map[string]string{"reason": "unauthorized"}); v != 2 {
		t.Errorf("rejected{unauthorized} %v, want 2", v)
	}
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExposure: a listen beyond loopback without api_keys_file is refused
// unless allow_anonymous; a bad keys file is refused naming its line.
func TestExposure(t *testing.T) {
	dir := t.TempDir()
	_, err := New(Options{Gateway: config.Gateway{Listen: "0.0.0.0:8080"}.WithDefaults(), StateFile: filepath.Join(dir, "s.json")})
	if err == nil || !strings.Contains(err.Error(), "api_keys_file") || !strings.Contains(err.Error(), "allow_anonymous") {
		t.Fatalf("non-loopback without keys: %v", err)
	}
	for _, c := range []config.Gateway{
		{Listen: "0.0.0.0:8080", AllowAnonymous: true},
		{Listen: "[::1]:8080"},
		{Listen: "localhost:8080"},
	} {
		if _, err := New(Options{Gateway: c.WithDefaults(), StateFile: filepath.Join(dir, "s.json")}); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	keys := filepath.Join(dir, "keys")
	os.WriteFile(keys, []byte(keyLine("k1", "")+"\n# fine\n"+"sha256:abc123 chat\n"), 0o600)
	_, err = New(Options{Gateway: config.Gateway{Listen: "0.0.0.0:8080", APIKeysFile: keys}.WithDefaults()})
	if err == nil || !strings.Contains(err.Error(), keys+" line 3") || strings.Contains(err.Error(), "abc123") {
		t.Fatalf("bad keys line: %v", err)
	}
	os.WriteFile(keys, []byte(keyLine("k1", "")+"\n"+keyLine("k1", "chat")+"\n"), 0o600)
	if _, err = New(Options{Gateway: config.Gateway{APIKeysFile: keys}.WithDefaults()}); err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("duplicate key: %v", err)
	}
	os.WriteFile(keys, []byte(keyLine("k1", "a,,b")+"\n"), 0o600)
	if _, err = New(Options{Gateway: config.Gateway{APIKeysFile: keys}.WithDefaults()}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("empty name: %v", err)
	}
	if _, err = New(Options{Gateway: config.Gateway{APIKeysFile: filepath.Join(dir, "missing")}.WithDefaults()}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing keys file: %v", err)
	}
}
