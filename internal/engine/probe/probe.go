package probe

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
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// Defaults for ReadyInput.
const (
	DefaultReadyPath   = "/v1/models"
	DefaultReadyBudget = 30 * time.Minute
	DefaultInterval    = time.Second
	// LogTail is how many log lines of an exited rank an error quotes.
	LogTail = 50
)

// ReadyInput says what to poll and for how long.
type ReadyInput struct {
	// BaseURL is the head's API root, e.g. http://10.0.0.1:8000.
	BaseURL string
	// Path answers 200 once the lane serves (default /v1/models).
	Path string
	// Budget bounds the whole wait (default 30m, the recipe's probe.ready).
	Budget time.Duration
	// Interval is the time between polls (default 1s).
	Interval time.Duration
	// LogSignatures must all appear in the head's log (FindInLog) before
	// the lane is ready: the lines an engine prints when its gated
	// features come on. Still missing SignatureGrace after the head first
	// answers 200, the wait fails naming them.
	LogSignatures []string
	// FindInLog returns the signatures not (yet) in the head's log, and
	// the log's name (container and node) for the error.
	FindInLog func(ctx context.Context, signatures []string) (missing []string, where string, err error)
	// SignatureGrace is how long lines may lag the API (default 15s).
	SignatureGrace time.Duration
}

// DefaultSignatureGrace is how long after the head answers its log lines
// may still be missing before the wait fails.
const DefaultSignatureGrace = 15 * time.Second

// RankState is one rank container as the caller sees it (from Docker).
type RankState struct {
	Node      string `json:"node"`
	Rank      int    `json:"rank"`
	Container string `json:"container,omitempty"`
	// State is Docker's container state (created, running, exited, dead),
	// or "missing" when the container is gone.
	State    string `json:"state"`
	ExitCode int    `json:"exit_code"`
	// Logs are the container's last log lines (WaitReady quotes LogTail).
	Logs []string `json:"logs,omitempty"`
}

// Exited says the rank's process is gone for good.
func (r RankState) Exited() bool {
	switch r.State {
	case "exited", "dead", "missing", "removing":
		return true
	}
	return false
}

// Readiness states reported in ReadyProgress.State.
const (
	StateLoading  = "loading"  // connection refused: the engine is loading weights
	StateStarting = "starting" // the head answers but not yet 200
	StateWaiting  = "waiting"  // no answer for another reason (timeout, reset)
	StateReady    = "ready"
)

// ReadyProgress is sent after every poll (for heartbeats and progress bars).
type ReadyProgress struct {
	Elapsed time.Duration `json:"elapsed"`
	Polls   int           `json:"polls"`
	State   string        `json:"state"`
	// Detail is the last poll's answer or error, in words.
	Detail string `json:"detail"`
	// Answered says the head has answered HTTP at least once.
	Answered bool `json:"answered"`
	// Ranks are the rank states of the last poll, without logs.
	Ranks []RankState `json:"ranks,omitempty"`
}

// ReadyResult says how the wait ended.
type ReadyResult struct {
	Elapsed time.Duration `json:"elapsed"`
	Polls   int           `json:"polls"`
	// Model is the first model id when Path is /v1/models.
	Model string `json:"model,omitempty"`
}

// RanksFunc reports the lane's rank containers; nil means no rank check.
type RanksFunc func(ctx context.Context) ([]RankState, error)

var httpClient = &http.Client{}

// WaitReady polls the head until Path answers 200. Connection refused means
// "still loading" until the head has answered once; afterwards a refusal is
// a failure. Every poll also asks ranks: a rank that exited fails the wait
// at once with fault.RankExited, naming node, rank, exit code and its last
// LogTail log lines. A closed port alone never ends a load early; the
// budget does (fault.ProbeFailed naming the budget and the last state).
func WaitReady(ctx context.Context, in ReadyInput, ranks RanksFunc, onProgress func(ReadyProgress)) (ReadyResult, error) {
	if in.Path == "" {
		in.Path = DefaultReadyPath
	}
	if in.Budget <= 0 {
		in.Budget = DefaultReadyBudget
	}
	if in.Interval <= 0 {
		in.Interval = DefaultInterval
	}
	url := strings.TrimRight(in.BaseURL, "/") + in.Path
	start := time.Now()
	deadline := start.Add(in.Budget)
	if in.SignatureGrace <= 0 {
		in.SignatureGrace = DefaultSignatureGrace
	}
	var res ReadyResult
	var firstOK time.Time
	p := ReadyProgress{State: StateLoading, Detail: "not polled yet"}
	for {
		res.Polls++
		p.Polls = res.Polls
		if ranks != nil {
			rs, err := ranks(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				p.Detail = "rank states unavailable: " + err.Error()
			}
			if err == nil {
				p.Ranks = p.Ranks[:0]
				var dead []RankState
				for _, r := range rs {
					if r.Exited() {
						dead = append(dead, r)
					}
					r.Logs = nil
					p.Ranks = append(p.Ranks, r)
				}
				if len(dead) > 0 {
					res.Elapsed = time.Since(start)
					return res, fault.Permanent(fault.RankExited, rankExitError(dead, p, res.Elapsed))
				}
			}
		}

		reqTimeout := min(max(in.Interval*5, 5*time.Second), 30*time.Second, max(time.Until(deadline), time.Second))
		code, body, err := get(ctx, url, reqTimeout)
		switch {
		case ctx.Err() != nil:
			return res, ctx.Err()
		case err == nil && code == http.StatusOK && len(in.LogSignatures) > 0:
			if firstOK.IsZero() {
				firstOK = time.Now()
			}
			if in.FindInLog == nil {
				return res, fault.Permanent(fault.InvalidSpec, fmt.Errorf("lane at %s: [probe] log_signatures given but no rank log to read", in.BaseURL))
			}
			missing, where, ferr := in.FindInLog(ctx, in.LogSignatures)
			p.State, p.Answered = StateStarting, true
			switch {
			case ferr != nil:
				p.Detail = "HTTP 200, reading the head's log: " + ferr.Error()
			case len(missing) == 0:
				in.LogSignatures = nil // all seen: ready on this answer
				continue
			default:
				p.Detail = fmt.Sprintf("HTTP 200, waiting for %d of %d log signatures in %s", len(missing), len(in.LogSignatures), where)
				if time.Since(firstOK) >= in.SignatureGrace {
					res.Elapsed = time.Since(start)
					q := make([]string, len(missing))
					for i, m := range missing {
						q[i] = fmt.Sprintf("%q", m)
					}
					return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("lane at %s answers, but %s never printed the log signature(s) %s ([probe] log_signatures) within %s of answering: the feature each marks is off; check the recipe's env and flags, or the signature text", in.BaseURL, where, strings.Join(q, ", "), in.SignatureGrace))
				}
			}
		case err == nil && (code == http.StatusUnauthorized || code == http.StatusForbidden):
			res.Elapsed = time.Since(start)
			return res, unauthorized(ctx, url, code)
		case err == nil && code == http.StatusOK:
			res.Elapsed = time.Since(start)
			p.State, p.Detail, p.Answered, p.Elapsed = StateReady, "HTTP 200 from "+url, true, res.Elapsed
			if in.Path == DefaultReadyPath {
				res.Model = firstModel(body)
			}
			if onProgress != nil {
				onProgress(p)
			}
			return res, nil
		case err == nil:
			p.State, p.Answered = StateStarting, true
			p.Detail = fmt.Sprintf("HTTP %d from %s: %s", code, url, trim(string(body), 200))
		case errors.Is(err, syscall.ECONNREFUSED):
			if p.Answered {
				res.Elapsed = time.Since(start)
				return res, fmt.Errorf("head %s answered before (%s) and now refuses connections after %s: the engine exited or restarted; check the rank logs", in.BaseURL, p.Detail, res.Elapsed.Round(time.Second))
			}
			p.State, p.Detail = StateLoading, "connection refused at "+url+" (engine loading)"
		default:
			p.State, p.Detail = StateWaiting, err.Error()
		}
		p.Elapsed = time.Since(start)
		if onProgress != nil {
			onProgress(p)
		}
		if time.Now().Add(in.Interval).After(deadline) {
			res.Elapsed = time.Since(start)
			return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("lane at %s not ready within the readiness budget %s (probe.ready): last state %s: %s", in.BaseURL, in.Budget, p.State, p.Detail))
		}
		t := time.NewTimer(in.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, ctx.Err()
		case <-t.C:
		}
	}
}

func rankExitError(dead []RankState, p ReadyProgress, elapsed time.Duration) error {
	var b strings.Builder
	for i, r := range dead {
		if i > 0 {
			b.WriteString("\n")
		}
		name := r.Container
		if name == "" {
			name = "its container"
		}
		fmt.Fprintf(&b, "node %s rank %d (%s) %s with exit code %d after %s while the lane was %s", r.Node, r.Rank, name, r.State, r.ExitCode, elapsed.Round(100*time.Millisecond), p.State)
		logs := r.Logs
		if len(logs) > LogTail {
			logs = logs[len(logs)-LogTail:]
		}
		if len(logs) == 0 {
			b.WriteString("; no log lines")
			continue
		}
		fmt.Fprintf(&b, "; last %d log lines:\n", len(logs))
		for _, l := range logs {
			b.WriteString("  | ")
			b.WriteString(strings.TrimRight(l, "\r\n"))
			b.WriteString("\n")
		}
	}
	return errors.New(strings.TrimRight(b.String(), "\n"))
}

func get(ctx context.Context, url string, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	authorize(req)
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, b, fmt.Errorf("GET %s: read body: %w", url, err)
	}
	return resp.StatusCode, b, nil
}

func firstModel(body []byte) string {
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &m) == nil && len(m.Data) > 0 {
		return m.Data[0].ID
	}
	return ""
}

func trim(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// ModelName returns the first model id the server lists at /v1/models, the
// name completions must be sent with.
func ModelName(ctx context.Context, baseURL string) (string, error) {
	url := strings.TrimRight(baseURL, "/") + "/v1/models"
	code, body, err := get(ctx, url, 30*time.Second)
	if err != nil {
		return "", fmt.Errorf("list models at %s: %w", url, err)
	}
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		return "", unauthorized(ctx, "list models at "+url, code)
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("list models at %s: HTTP %d: %s", url, code, trim(string(body), 200))
	}
	m := firstModel(body)
	if m == "" {
		return "", fault.Permanent(fault.ProbeFailed, fmt.Errorf("list models at %s: no model in %s", url, trim(string(body), 200)))
	}
	return m, nil
}

// SmokeResult is one smoke prompt's outcome.
type SmokeResult struct {
	Prompt  string  `json:"prompt"`
	Expect  string  `json:"expect"`
	Answer  string  `json:"answer"`
	OK      bool    `json:"ok"`
	Seconds float64 `json:"seconds"`
}

// smokeMaxTokens bounds each smoke answer.
const smokeMaxTokens = 128

// Smoke sends each prompt as a chat completion at temperature 0 and checks
// the answer contains its expected substring. All prompts run; any miss is
// fault.ProbeFailed naming the prompt, the expectation and the answer.
// model "" asks the server for its model name first.
func Smoke(ctx context.Context, baseURL, model string, prompts []contract.Smoke) ([]SmokeResult, error) {
	if model == "" {
		m, err := ModelName(ctx, baseURL)
		if err != nil {
			return nil, err
		}
		model = m
	}
	url := strings.TrimRight(baseURL, "/") + "/v1/chat/completions"
	var out []SmokeResult
	var misses []error
	for _, sp := range prompts {
		start := time.Now()
		body := map[string]any{
			"model":       model,
			"messages":    []map[string]string{{"role": "user", "content": sp.Prompt}},
			"temperature": 0,
			"max_tokens":  smokeMaxTokens,
		}
		var resp struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := postJSON(ctx, url, body, &resp); err != nil {
			return out, fmt.Errorf("smoke prompt %q: %w", sp.Prompt, err)
		}
		r := SmokeResult{Prompt: sp.Prompt, Expect: sp.Expect, Seconds: time.Since(start).Seconds()}
		if len(resp.Choices) > 0 {
			r.Answer = resp.Choices[0].Message.Content
		}
		r.OK = strings.Contains(r.Answer, sp.Expect)
		if !r.OK {
			misses = append(misses, fmt.Errorf("smoke prompt %q: answer %q does not contain %q", sp.Prompt, trim(r.Answer, 300), sp.Expect))
		}
		out = append(out, r)
	}
	if len(misses) > 0 {
		return out, fault.Permanent(fault.ProbeFailed, fmt.Errorf("lane at %s failed %d of %d smoke prompts: %w", baseURL, len(misses), len(prompts), errors.Join(misses...)))
	}
	return out, nil
}

// postJSON posts body and decodes a 200 answer into out. HTTP 4xx is
// permanent (fault.ProbeFailed: the request itself is wrong for this
// lane); 5xx and transport errors are transient.
func postJSON(ctx context.Context, url string, body, out any) error {
	resp, err := post(ctx, url, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("POST %s: read answer: %w", url, err)
	}
	if err := httpError(url, resp.StatusCode, b); err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("POST %s: answer is not JSON: %v: %s", url, err, trim(string(b), 200))
	}
	return nil
}

func post(ctx context.Context, url string, body any) (*http.Response, error) {
	js, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(js))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	authorize(req)
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	return resp, nil
}

func httpError(url string, code int, body []byte) error {
	if code == http.StatusOK {
		return nil
	}
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		return fault.Permanent(fault.ProbeFailed, fmt.Errorf("POST %s: HTTP %d: the engine wants an API key (or refused the one sent): set [probe] api_key_env in the recipe and export that variable to the control worker", url, code))
	}
	err := fmt.Errorf("POST %s: HTTP %d: %s", url, code, trim(string(body), 300))
	if code >= 400 && code < 500 {
		return fault.Permanent(fault.ProbeFailed, err)
	}
	return err
}

// DecodeInput shapes the decode probe.
type DecodeInput struct {
	BaseURL string `json:"base_url"`
	// Model "" asks the server (ModelName).
	Model string `json:"model"`
	// PromptTokens is the prompt length to send (default 512); the engine's
	// own count (usage) is what the result reports.
	PromptTokens int `json:"prompt_tokens"`
	// MaxTokens is the number of tokens to generate (default 128).
	MaxTokens int `json:"max_tokens"`
}

// DecodeResult is what one streamed completion measured. Token counts come
// from the server's usage, never from guesses.
type DecodeResult struct {
	DecodeTPS        float64 `json:"decode_tps"`
	PrefillTPS       float64 `json:"prefill_tps"`
	TTFTSeconds      float64 `json:"ttft_seconds"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
}

// promptWords are short words, each one token for most tokenizers.
var promptWords = strings.Fields("the lane runs on each node and its rank read all the data from disk")

// Prompt builds a prompt of about n tokens (one short word per token).
func Prompt(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(promptWords[i%len(promptWords)])
	}
	return b.String()
}

// DecodeProbe streams one completion (temperature 0, ignore_eos) and
// measures TTFT (request to first token), prefill tok/s (prompt tokens /
// TTFT) and decode tok/s (tokens after the first / time from first to last
// token).
func DecodeProbe(ctx context.Context, in DecodeInput) (DecodeResult, error) {
	var res DecodeResult
	if in.PromptTokens <= 0 {
		in.PromptTokens = contract.DefaultDecodePromptTokens
	}
	if in.MaxTokens <= 0 {
		in.MaxTokens = contract.DefaultDecodeMaxTokens
	}
	if in.MaxTokens < 2 {
		return res, fault.Permanent(fault.InvalidSpec, fmt.Errorf("decode probe max_tokens %d: need at least 2 tokens to measure a decode rate", in.MaxTokens))
	}
	if in.Model == "" {
		m, err := ModelName(ctx, in.BaseURL)
		if err != nil {
			return res, err
		}
		in.Model = m
	}
	url := strings.TrimRight(in.BaseURL, "/") + "/v1/completions"
	body := map[string]any{
		"model":          in.Model,
		"prompt":         Prompt(in.PromptTokens),
		"max_tokens":     in.MaxTokens,
		"temperature":    0,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
		"ignore_eos":     true,
	}
	start := time.Now()
	resp, err := post(ctx, url, body)
	if err != nil {
		return res, fmt.Errorf("decode probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return res, fmt.Errorf("decode probe: %w", httpError(url, resp.StatusCode, b))
	}
	var first, last time.Time
	var usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if data == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return res, fmt.Errorf("decode probe: %s sent a chunk that is not JSON: %v: %s", url, err, trim(data, 200))
		}
		now := time.Now()
		for _, c := range ch.Choices {
			if c.Text != "" || c.Delta.Content != "" {
				if first.IsZero() {
					first = now
				}
				last = now
			}
		}
		if ch.Usage != nil {
			usage = ch.Usage
		}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("decode probe: read stream from %s: %w", url, err)
	}
	if !done {
		return res, fmt.Errorf("decode probe: stream from %s ended without [DONE]", url)
	}
	if usage == nil {
		return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("decode probe: %s sent no usage chunk (stream_options.include_usage): token counts come from usage only", url))
	}
	if first.IsZero() {
		return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("decode probe: %s streamed no tokens", url))
	}
	res.PromptTokens, res.CompletionTokens = usage.PromptTokens, usage.CompletionTokens
	res.TTFTSeconds = first.Sub(start).Seconds()
	if res.TTFTSeconds > 0 {
		res.PrefillTPS = float64(res.PromptTokens) / res.TTFTSeconds
	}
	if span := last.Sub(first).Seconds(); span > 0 && res.CompletionTokens > 1 {
		res.DecodeTPS = float64(res.CompletionTokens-1) / span
	} else {
		return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("decode probe: %s sent %d tokens in one burst: no decode rate to measure (raise decode_max_tokens)", url, res.CompletionTokens))
	}
	return res, nil
}
