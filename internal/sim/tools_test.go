package sim_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/sim"
)

type toolReply struct {
	Choices []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

var simTools = []map[string]any{
	{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Current weather for a city.",
		"parameters": map[string]any{"type": "object", "required": []string{"city", "unit"}, "properties": map[string]any{
			"city": map[string]any{"type": "string"}, "unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}}}}}},
	{"type": "function", "function": map[string]any{"name": "search_files", "description": "Search files by pattern.",
		"parameters": map[string]any{"type": "object", "required": []string{"pattern", "limit"}, "properties": map[string]any{
			"pattern": map[string]any{"type": "string"}, "limit": map[string]any{"type": "integer"}}}}},
}

func chatTools(t *testing.T, url string, msgs []map[string]any, choice any) (toolReply, int) {
	t.Helper()
	body := map[string]any{"messages": msgs, "tools": simTools, "max_tokens": 32}
	if choice != nil {
		body["tool_choice"] = choice
	}
	code, b := post(t, url+"/v1/chat/completions", body)
	var r toolReply
	if code != 200 {
		t.Logf("HTTP %d: %s", code, b)
	}
	if code == 200 {
		if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("reply %s: %v", b, err)
		}
	}
	return r, code
}

// TestToolCallsAreDeterministic: with tools, engine-sim calls one —
// the named one under a named tool_choice, the one the question names
// under auto and required — with every required argument filled from the
// schema, the same call every time; auto answers a tool result in text,
// required calls again; tool definitions count as prompt tokens.
func TestToolCallsAreDeterministic(t *testing.T) {
	e, _ := startOne(t, func(c *sim.Config) { c.PrefillTPS = 1e6; c.DecodeTPS = 1e4; c.ContextLength = 4096 })
	user := []map[string]any{{"role": "user", "content": "please search files for TODO"}}

	r, code := chatTools(t, e.URL, user, nil)
	if code != 200 || r.Choices[0].FinishReason != "tool_calls" || len(r.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("auto: code %d %+v", code, r) // see chatTools
	}
	c := r.Choices[0].Message.ToolCalls[0]
	if c.Type != "function" || c.Function.Name != "search_files" || c.Function.Arguments != `{"limit":1,"pattern":"sim"}` || !strings.HasPrefix(c.ID, "call_sim_") {
		t.Errorf("auto call %+v, want search_files with limit 1 and pattern sim", c)
	}
	again, _ := chatTools(t, e.URL, user, nil)
	if again.Choices[0].Message.ToolCalls[0] != c {
		t.Errorf("same request, another call: %+v then %+v", c, again.Choices[0].Message.ToolCalls[0])
	}

	named, _ := chatTools(t, e.URL, user, map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}})
	if nc := named.Choices[0].Message.ToolCalls; len(nc) != 1 || nc[0].Function.Name != "get_weather" || nc[0].Function.Arguments != `{"city":"sim","unit":"celsius"}` {
		t.Errorf("named tool_choice: %+v", named.Choices[0].Message)
	}
	if _, code := chatTools(t, e.URL, user, map[string]any{"type": "function", "function": map[string]any{"name": "rm_rf"}}); code != 400 {
		t.Errorf("unknown named tool: code %d, want 400", code)
	}
	if none, _ := chatTools(t, e.URL, user, "none"); len(none.Choices[0].Message.ToolCalls) != 0 || none.Choices[0].Message.Content == nil {
		t.Errorf("tool_choice none called a tool: %+v", none.Choices[0].Message)
	}

	// After the tool's result: auto answers in text, required calls again.
	loop := append(user, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{c}},
		map[string]any{"role": "tool", "tool_call_id": c.ID, "content": "src/main.go:12: TODO"})
	if a, _ := chatTools(t, e.URL, loop, "auto"); len(a.Choices[0].Message.ToolCalls) != 0 || a.Choices[0].FinishReason == "tool_calls" {
		t.Errorf("auto after a tool result: %+v", a.Choices[0])
	}
	if req, _ := chatTools(t, e.URL, loop, "required"); len(req.Choices[0].Message.ToolCalls) != 1 {
		t.Errorf("required after a tool result made no call: %+v", req.Choices[0])
	}

	// Tool definitions are prompt tokens.
	_, plain := post(t, e.URL+"/v1/chat/completions", map[string]any{"messages": user, "max_tokens": 4})
	var p completion
	json.Unmarshal(plain, &p)
	defs, _ := json.Marshal(simTools)
	if p.Usage == nil || r.Usage.PromptTokens < p.Usage.PromptTokens+sim.CountTokens(string(defs)) {
		t.Errorf("prompt_tokens with tools %d, without %v: the %d tokens of tool definitions are not counted", r.Usage.PromptTokens, p.Usage, sim.CountTokens(string(defs)))
	}

	// Streaming: the call arrives as a tool_calls delta, then finish_reason tool_calls.
	b, _ := json.Marshal(map[string]any{"messages": user, "tools": simTools, "stream": true, "tool_choice": "required"})
	resp, err := http.Post(e.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw := new(strings.Builder)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		raw.WriteString(sc.Text() + "\n")
	}
	if s := raw.String(); !strings.Contains(s, `"tool_calls":[{"function":{"name":"search_files","arguments":"{\"limit\":1,\"pattern\":\"sim\"}"}`) ||
		!strings.Contains(s, `"finish_reason":"tool_calls"`) || !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Errorf("stream with a tool call:\n%s", s)
	}
}

// TestFirstStreamChunkComesAfterPrefill: a client timing the first byte
// of a streamed answer sees the prefill time (prompt_tokens/PrefillTPS),
// so prefill measured that way is never faster than configured.
func TestFirstStreamChunkComesAfterPrefill(t *testing.T) {
	const prefill = 2000.0
	e, _ := startOne(t, func(c *sim.Config) { c.PrefillTPS = prefill; c.DecodeTPS = 1000; c.ContextLength = 8192 })
	prompt := strings.Repeat("word ", 1000) // 1000 tokens: 0.5 s of prefill
	for _, chat := range []bool{true, false} {
		body := map[string]any{"max_tokens": 2, "stream": true}
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
			body["messages"] = []map[string]any{{"role": "user", "content": prompt}}
		} else {
			body["prompt"] = prompt
		}
		b, _ := json.Marshal(body)
		start := time.Now()
		resp, err := http.Post(e.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadByte(); err != nil {
			t.Fatal(err)
		}
		ttfb := time.Since(start)
		resp.Body.Close()
		pt := float64(sim.CountTokens(prompt))
		if pp := pt / ttfb.Seconds(); pp > prefill*1.02 {
			t.Errorf("%s: first byte after %s: %.0f prompt tokens/s measured, %.0f configured", path, ttfb, pp, prefill)
		}
	}
}
