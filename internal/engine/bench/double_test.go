package bench

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// engineDouble is a TEST DOUBLE of an OpenAI-compatible engine: it counts
// prompt tokens like engine-sim (each whitespace word is ceil(len/4)
// tokens, plus a fixed template overhead), paces the first token at
// prompt_tokens/prefill and then one token every 1/decode seconds, and
// streams a usage block last. Knobs let tests drop usage or hang.
type engineDouble struct {
	prefill, decode float64
	contextLen      int
	noUsage         bool
	// hangAbove makes generation requests (max_tokens > 1) whose prompt
	// exceeds this many tokens never answer (0 = never hang).
	hangAbove int
}

const doubleOverhead = 5

func countTokens(s string) int {
	n := doubleOverhead
	for _, w := range strings.Fields(s) {
		n += (len([]rune(w)) + 3) / 4
	}
	return n
}

func (d *engineDouble) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/models":
		entry := map[string]any{"id": "double", "object": "model"}
		if d.contextLen > 0 {
			entry["max_model_len"] = d.contextLen
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{entry}})
	case r.URL.Path == "/v1/chat/completions" && r.Method == http.MethodPost:
		d.chat(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (d *engineDouble) chat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens     int  `json:"max_tokens"`
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.Stream {
		http.Error(w, "want a streaming chat request", http.StatusBadRequest)
		return
	}
	var text strings.Builder
	for _, m := range req.Messages {
		text.WriteString(m.Content)
		text.WriteByte(' ')
	}
	pt := countTokens(text.String())
	if d.hangAbove > 0 && req.MaxTokens > 1 && pt > d.hangAbove {
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	first := start.Add(time.Duration(float64(pt) / d.prefill * float64(time.Second)))
	n := max(req.MaxTokens, 1)
	for i := 0; i < n; i++ {
		at := first.Add(time.Duration(float64(i) / d.decode * float64(time.Second)))
		select {
		case <-r.Context().Done():
			return
		case <-time.After(time.Until(at)):
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"}}]}\n\n")
		fl.Flush()
	}
	if req.StreamOptions.IncludeUsage && !d.noUsage {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\n", pt, n)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// serveDouble starts the double on 127.0.0.1 and returns its base URL.
func serveDouble(t *testing.T, d *engineDouble) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on 127.0.0.1: %v", err)
	}
	srv := &http.Server{Handler: d}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// serveDoublePipe serves the double on an in-memory network, for tests in
// a synctest bubble (where the double's pacing runs on the fake clock):
// it returns the base URL and the client that reaches it.
func serveDoublePipe(t *testing.T, d *engineDouble) (string, *http.Client) {
	t.Helper()
	pipe := simtest.NewPipeNet()
	srv := &http.Server{Handler: d}
	go srv.Serve(pipe)
	c := pipe.Client()
	t.Cleanup(func() {
		c.CloseIdleConnections()
		srv.Close()
	})
	return "http://" + pipe.Addr().String(), c
}
