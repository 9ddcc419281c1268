package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
)

// client speaks the OpenAI-compatible streaming chat API.
type client struct {
	base    string // ends in /v1
	model   string
	key     string
	http    *http.Client
	timeout time.Duration
}

// apiRoot normalizes a base URL to its /v1 root.
func apiRoot(base string) string {
	base = strings.TrimRight(base, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	return base
}

func (c *client) httpClient() *http.Client {
	if c.http != nil {
		return c.http
	}
	return http.DefaultClient
}

type chatChunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// stream sends one streaming chat completion and times it. Tokens come
// from the usage block the server sends last (stream_options.include_usage);
// a stream without one is a NoUsage fault. ignore_eos asks SGLang/vLLM to
// generate all maxTokens so every request decodes the same length.
func (c *client) stream(ctx context.Context, prompt string, maxTokens int) (Sample, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{
		"model":          c.model,
		"messages":       []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens":     maxTokens,
		"temperature":    0,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
		"ignore_eos":     true,
	})
	url := c.base + "/chat/completions"
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Sample{}, fmt.Errorf("POST %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	timedOut := func(err error) error {
		if ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("POST %s: timed out after %s (raise the bench request timeout if the lane is just slow): %w", url, c.timeout, context.DeadlineExceeded)
		}
		return fmt.Errorf("POST %s: %w", url, err)
	}
	start := time.Now()
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return Sample{}, timedOut(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Sample{}, fmt.Errorf("POST %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var s Sample
	var sawUsage, sawDone bool
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			sawDone = true
			break
		}
		var ch chatChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return Sample{}, fmt.Errorf("POST %s: bad SSE chunk %.120q: %w", url, data, err)
		}
		now := time.Now()
		for _, choice := range ch.Choices {
			if choice.Delta.Content != "" || choice.Delta.ReasoningContent != "" || choice.Text != "" {
				if s.first.IsZero() {
					s.first = now
				}
				s.last = now
			}
		}
		if ch.Usage != nil {
			sawUsage = true
			s.PromptTokens = ch.Usage.PromptTokens
			s.CompletionTokens = ch.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return Sample{}, timedOut(err)
	}
	end := time.Now()
	if !sawDone && !sawUsage {
		// The connection closed mid-stream (the engine restarted or died):
		// a failed request, not a server that never reports usage.
		return Sample{}, fmt.Errorf("POST %s: the stream ended before [DONE]: the engine closed the connection", url)
	}
	if !sawUsage {
		return Sample{}, fault.Permanent(NoUsage, fmt.Errorf("POST %s: the server did not report usage (no usage block in the stream despite stream_options.include_usage); sparklane counts tokens only from usage, so enable usage reporting in the engine", url))
	}
	if s.first.IsZero() {
		return Sample{}, fmt.Errorf("POST %s: stream ended without a single token (usage says %d completion tokens)", url, s.CompletionTokens)
	}
	s.TTFTMs = ms(s.first.Sub(start))
	s.GenMs = ms(s.last.Sub(s.first))
	s.TotalMs = ms(end.Sub(start))
	if s.CompletionTokens > 1 && s.GenMs > 0 {
		// The first token marks the start of the interval, so n tokens span
		// n-1 decode steps; counting n would overstate the rate by n/(n-1).
		s.TokPerSec = round1(float64(s.CompletionTokens-1) / (s.GenMs / 1000))
	}
	return s, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// contextWindow reads the served model's context length from /v1/models
// (vLLM max_model_len; other engines' context_length/max_context_length);
// 0 when the server does not say.
func (c *client) contextWindow(ctx context.Context) int {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, c.base+"/models", nil)
	if err != nil {
		return 0
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var m struct {
		Data []map[string]any `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m) != nil {
		return 0
	}
	pick := func(e map[string]any) int {
		for _, k := range []string{"max_model_len", "context_length", "max_context_length"} {
			if v, ok := e[k].(float64); ok && v > 0 {
				return int(v)
			}
		}
		return 0
	}
	for _, e := range m.Data {
		if id, _ := e["id"].(string); id == c.model {
			return pick(e)
		}
	}
	if len(m.Data) == 1 {
		return pick(m.Data[0])
	}
	return 0
}

// calibrate measures the chat template overhead and characters per token
// with two requests, reading usage.prompt_tokens.
func (c *client) calibrate(ctx context.Context, seed int64, ctxTokens int) (Calibration, error) {
	one, err := c.stream(ctx, "hi", 1)
	if err != nil {
		return Calibration{}, err
	}
	// 8000 characters, or half the context in characters when that is
	// smaller: it fits even at one character per token.
	chars := 8000
	if ctxTokens > 0 {
		chars = min(chars, max(ctxTokens/2, 64))
	}
	text := filler(seed, chars)
	s, err := c.stream(ctx, text, 1)
	if err != nil {
		return Calibration{}, err
	}
	tokens := s.PromptTokens - one.PromptTokens
	if tokens <= 0 {
		return Calibration{}, fmt.Errorf("usage.prompt_tokens did not grow with the prompt (%d for 2 chars, %d for %d chars); the server's usage is not usable for sizing prompts", one.PromptTokens, s.PromptTokens, len(text))
	}
	// "hi" is itself about one token; keep it out of the overhead.
	over := max(one.PromptTokens-1, 0)
	return Calibration{
		OverheadTokens: over,
		SampleChars:    len(text),
		SampleTokens:   tokens,
		CharsPerTok:    float64(len(text)) / float64(tokens),
	}, nil
}
