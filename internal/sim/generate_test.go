package sim_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestGenerateRequests pins how the completion endpoints answer requests
// they refuse, and the two shapes of answer the main tests do not reach:
// a prompt given as a list, and a stream with no tokens to decode.
func TestGenerateRequests(t *testing.T) {
	e, _ := startOne(t, nil)
	cases := []struct {
		name, method, path, body string
		code                     int
		want                     []string // in the answer, in this order
	}{
		{"not POST", http.MethodGet, "/v1/completions", "", 405, []string{`"message":"use POST"`}},
		{"not JSON", http.MethodPost, "/v1/completions", "{", 400, []string{`request body is not valid JSON: unexpected EOF`}},
		{"no messages", http.MethodPost, "/v1/chat/completions", `{"messages":[]}`, 400, []string{`messages must not be empty`, `"param":"messages"`}},
		{"no prompt", http.MethodPost, "/v1/completions", `{}`, 400, []string{`prompt is required`, `"param":"prompt"`}},
		{"prompt of numbers", http.MethodPost, "/v1/completions", `{"prompt":[1,2]}`, 400, []string{`prompt must be a string or a list of strings`}},
		{"empty prompt list", http.MethodPost, "/v1/completions", `{"prompt":[]}`, 400, []string{`prompt must be a string or a list of strings`}},
		{"negative max_tokens", http.MethodPost, "/v1/completions", `{"prompt":"x","max_tokens":-1}`, 400, []string{`max_tokens must be at least 0, got -1`, `"param":"max_tokens"`}},
		{"max_completion_tokens loses to max_tokens", http.MethodPost, "/v1/completions", `{"prompt":"x","max_completion_tokens":-1,"max_tokens":2}`, 200, []string{`"completion_tokens":2`}},
		{"prompt list", http.MethodPost, "/v1/completions", `{"prompt":["19+23","ignored"],"max_tokens":0}`, 200, []string{`"text":""`, `"object":"text_completion"`, `"prompt_tokens":2,"completion_tokens":0`}},
		{"empty stream, completion", http.MethodPost, "/v1/completions", `{"prompt":"x","max_tokens":0,"stream":true}`, 200,
			[]string{`"choices":[{"finish_reason":"length","index":0,"text":""}]`, `"object":"text_completion"`, "data: [DONE]"}},
		{"empty stream, chat", http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":0,"stream":true}`, 200,
			[]string{`"delta":{"content":"","role":"assistant"}`, `"choices":[{"delta":{},"finish_reason":"length","index":0}]`, "data: [DONE]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, e.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("%s %s %s: %d %s, want %d", tc.method, tc.path, tc.body, resp.StatusCode, b, tc.code)
			}
			rest := string(b)
			for _, w := range tc.want {
				k := strings.Index(rest, w)
				if k < 0 {
					t.Fatalf("%s %s %s: answer lacks %q (in order):\n%s", tc.method, tc.path, tc.body, w, b)
				}
				rest = rest[k+len(w):]
			}
		})
	}
}
