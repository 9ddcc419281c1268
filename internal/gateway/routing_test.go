package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// TestRoutesByNameAndAlias: two clusters, each a real engine-sim, behind
// one URL; a request by served name or by alias reaches its lane, and by
// alias with `model` rewritten (the engine answers 404 to a name it does
// not serve, so an answer proves the rewrite).
func TestRoutesByNameAndAlias(t *testing.T) {
	a := startSim(t, "org/model-a")
	b := startSim(t, "org/model-b")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat", "a"))
	mustRoute(t, g, lane("c2", "lane-b", b, "org/model-b", "embed"))
	c := g.client("")
	ctx := context.Background()
	for _, tc := range []struct{ ask, want string }{
		{"org/model-a", "org/model-a"}, {"chat", "org/model-a"}, {"a", "org/model-a"},
		{"org/model-b", "org/model-b"}, {"embed", "org/model-b"},
	} {
		res, err := chat(ctx, c, tc.ask, "127*89")
		if err != nil {
			t.Fatalf("chat %s: %v", tc.ask, err)
		}
		if res.Model != tc.want || !strings.Contains(res.Choices[0].Message.Content, "11303") {
			t.Errorf("chat %s: answered by %s %q, want %s", tc.ask, res.Model, res.Choices[0].Message.Content, tc.want)
		}
	}
	comp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "chat", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello there")}, MaxTokens: openai.Int(3)})
	if err != nil || comp.Model != "org/model-a" || comp.Usage.CompletionTokens != 3 {
		t.Fatalf("completion by alias: %+v %v", comp, err)
	}
	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
	if err != nil || len(emb.Data) != 1 || len(emb.Data[0].Embedding) != 16 {
		t.Fatalf("embedding by alias: %+v %v", emb, err)
	}
	// Another /v1 path passes through to the lane of its model.
	resp, body := rawDo(t, "POST", g.URL+"/v1/rerank", "", strings.NewReader(`{"model":"embed","query":"a b","documents":["a","c"]}`))
	if resp.StatusCode != 200 || resp.Header.Get("Sparklane-Lane") != "lane-b" || !strings.Contains(body, "results") {
		t.Fatalf("rerank pass-through: %d %s %q", resp.StatusCode, resp.Header.Get("Sparklane-Lane"), body)
	}
}

// TestModelsAndUnknownName: /v1/models lists every name with its lane
// and state (the gateway answers it); a name no lane serves gets 404 in
// OpenAI's shape listing the names served.
func TestModelsAndUnknownName(t *testing.T) {
	a := startSim(t, "org/model-a")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat"))
	if _, err := g.Hold(contract.GatewayHoldInput{Cluster: "c2"}); err != nil {
		t.Fatal(err)
	}
	mustRoute(t, g, lane("c2", "lane-b", "http://127.0.0.1:1", "org/model-b"))
	c := g.client("")
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]modelRoute{}
	for _, m := range page.Data {
		var r modelRoute
		if err := json.Unmarshal([]byte(m.JSON.ExtraFields["sparklane"].Raw()), &r); err != nil {
			t.Fatalf("model %s: sparklane object: %v", m.ID, err)
		}
		got[m.ID] = r
	}
	want := map[string]modelRoute{
		"chat":        {Lane: "lane-a", Cluster: "c1", State: "serving", Served: "org/model-a"},
		"org/model-a": {Lane: "lane-a", Cluster: "c1", State: "serving", Served: "org/model-a"},
		"org/model-b": {Lane: "lane-b", Cluster: "c2", State: "held", Served: "org/model-b"},
	}
	if len(got) != len(want) {
		t.Fatalf("models %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("model %s: %+v, want %+v", k, got[k], v)
		}
	}
	m, err := c.Models.Get(context.Background(), "chat")
	if err != nil || m.ID != "chat" {
		t.Fatalf("models/chat: %+v %v", m, err)
	}
	_, err = chat(context.Background(), c, "gpt-9", "hi")
	e := apiErr(t, err)
	if e.StatusCode != 404 || e.Code != "model_not_found" || e.Param != "model" || e.Type != "invalid_request_error" {
		t.Fatalf("unknown model: %d %q %q %q", e.StatusCode, e.Code, e.Param, e.Type)
	}
	contains(t, "404 message", e.Message, "gpt-9", "chat, org/model-a, org/model-b")
}

// TestLastRouteWinsAName: a name two clusters claim goes to the route
// set last; unrouting it gives the name back to the other.
func TestLastRouteWinsAName(t *testing.T) {
	a := startSim(t, "org/model-a")
	b := startSim(t, "org/model-b")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat"))
	mustRoute(t, g, lane("c2", "lane-b", b, "org/model-b", "chat"))
	c := g.client("")
	res, err := chat(context.Background(), c, "chat", "hi")
	if err != nil || res.Model != "org/model-b" {
		t.Fatalf("chat after c2 routed last: %v %v", res, err)
	}
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a", "chat"))
	if res, err = chat(context.Background(), c, "chat", "hi"); err != nil || res.Model != "org/model-a" {
		t.Fatalf("chat after c1 routed again: %v %v", res, err)
	}
	if err := g.Unroute("c1"); err != nil {
		t.Fatal(err)
	}
	if res, err = chat(context.Background(), c, "chat", "hi"); err != nil || res.Model != "org/model-b" {
		t.Fatalf("chat after c1 unrouted: %v %v", res, err)
	}
}

// TestNoModel: a request that names no model goes to the one routed
// cluster; with two, 400 asking for a model.
func TestNoModel(t *testing.T) {
	a := startSim(t, "org/model-a")
	b := startSim(t, "org/model-b")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a"))
	resp, body := rawDo(t, "GET", g.URL+"/v1/nothing-here", "", nil)
	if resp.Header.Get("Sparklane-Lane") != "lane-a" {
		t.Fatalf("GET without model, one cluster: %d %q, not forwarded to lane-a", resp.StatusCode, body)
	}
	mustRoute(t, g, lane("c2", "lane-b", b, "org/model-b"))
	resp, body = rawDo(t, "GET", g.URL+"/v1/nothing-here", "", nil)
	if resp.StatusCode != 400 {
		t.Fatalf("GET without model, two clusters: %d %q", resp.StatusCode, body)
	}
	var eb errorBody
	if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Error.Code == nil || *eb.Error.Code != "model_required" {
		t.Fatalf("400 body %q: %v", body, err)
	}
	contains(t, "400 message", eb.Error.Message, "org/model-a, org/model-b")
	if resp, body := rawDo(t, "GET", g.URL+"/metrics", "", nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "unknown_path") {
		t.Fatalf("a path outside /v1: %d %q", resp.StatusCode, body)
	}
}
