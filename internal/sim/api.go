package sim

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// metrics are the counters /metrics exposes.
type metrics struct {
	mu         sync.Mutex
	requests   map[string]int64 // "path code" → count
	promptToks atomic.Int64
	genToks    atomic.Int64
	running    atomic.Int64
}

func (m *metrics) count(path string, code int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.requests == nil {
		m.requests = map[string]int64{}
	}
	m.requests[path+" "+strconv.Itoa(code)]++
}

// serve opens the API on rank 0 and answers until ctx is done.
func (e *engine) serve(ctx context.Context, cancel context.CancelCauseFunc) error {
	ln := e.cfg.Listener
	if ln == nil {
		addr := net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.cfg.Port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("rank 0: listen on --host %s --port %d: %v: is another engine using the port?", e.cfg.Host, e.cfg.Port, err)
		}
		ln = l
	}
	mux := http.NewServeMux()
	var served atomic.Bool
	wrap := func(path string, h func(w http.ResponseWriter, r *http.Request) int) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			var code int
			if !e.authorized(r) && path != "/health" {
				code = writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "Unauthorized"})
			} else {
				code = h(w, r)
			}
			e.metrics.count(path, code)
			if e.cfg.FailAt == FailServe && served.CompareAndSwap(false, true) {
				// Die after answering once, like an engine that crashes
				// under its first real load.
				go cancel(fmt.Errorf("rank 0: simulated failure while serving (--fail-at serve)"))
			}
		})
	}
	wrap("/health", func(w http.ResponseWriter, r *http.Request) int {
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	wrap("/v1/models", e.handleModels)
	wrap("/v1/completions", func(w http.ResponseWriter, r *http.Request) int { return e.handleGenerate(w, r, false) })
	wrap("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) int { return e.handleGenerate(w, r, true) })
	wrap("/v1/embeddings", e.handleEmbeddings)
	wrap("/v1/rerank", e.handleRerank)
	wrap("/rerank", e.handleRerank)
	mux.HandleFunc("/metrics", e.handleMetrics)

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	e.logf("rank 0 serving %s on http://%s (decode %.0f tok/s, prefill %.0f tok/s, context %d)", e.cfg.ServedModelName, ln.Addr(), e.cfg.DecodeTPS, e.cfg.PrefillTPS, e.cfg.ContextLength)
	if e.cfg.OnServing != nil {
		e.cfg.OnServing(ln.Addr())
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("rank 0: API server on %s: %v", ln.Addr(), err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	srv.Close()
	return causeOrNil(ctx)
}

func (e *engine) handleModels(w http.ResponseWriter, r *http.Request) int {
	return writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id":            e.cfg.ServedModelName,
			"object":        "model",
			"created":       time.Now().Unix(),
			"owned_by":      "engine-sim",
			"root":          e.cfg.ModelPath,
			"max_model_len": e.cfg.ContextLength,
		}},
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
	return code
}

func apiError(w http.ResponseWriter, code int, msg, param string) int {
	return writeJSON(w, code, map[string]any{
		"object": "error",
		"error": map[string]any{
			"message": msg,
			"type":    "BadRequestError",
			"param":   param,
			"code":    code,
		},
	})
}

// jittered returns the prefill and decode rates for one request: the
// configured rates, each scaled by a factor in 1 ± JitterPct/100 drawn from
// a hash of the seed and the prompt (Config.JitterPct).
func (e *engine) jittered(prompt string) (prefillTPS, decodeTPS float64) {
	if e.cfg.JitterPct == 0 {
		return e.cfg.PrefillTPS, e.cfg.DecodeTPS
	}
	h := fnv.New64a()
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(e.cfg.Seed))
	h.Write(seed[:])
	h.Write([]byte(prompt))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(e.cfg.Seed)))
	factor := func() float64 { return 1 + e.cfg.JitterPct/100*(2*rng.Float64()-1) }
	return e.cfg.PrefillTPS * factor(), e.cfg.DecodeTPS * factor()
}

// genRequest is the subset of the OpenAI request engine-sim reads.
type genRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Messages      []chatMessage   `json:"messages"`
	MaxTokens     *int            `json:"max_tokens"`
	MaxCompTokens *int            `json:"max_completion_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// Tools and ToolChoice are the chat API's function calling: with
	// tools, engine-sim answers with a deterministic tool call (see
	// pickToolCall), and their definitions count as prompt tokens.
	Tools      []toolDef       `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text returns a message's content, a string or an array of text parts.
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			if p.Text != "" {
				if b.Len() > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return ""
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (e *engine) handleGenerate(w http.ResponseWriter, r *http.Request, chat bool) int {
	if r.Method != http.MethodPost {
		return apiError(w, http.StatusMethodNotAllowed, "use POST", "")
	}
	var req genRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20))
	if err := dec.Decode(&req); err != nil {
		return apiError(w, http.StatusBadRequest, "request body is not valid JSON: "+err.Error(), "")
	}
	if req.Model != "" && req.Model != e.cfg.ServedModelName {
		return writeJSON(w, http.StatusNotFound, map[string]any{"object": "error", "error": map[string]any{
			"message": fmt.Sprintf("The model `%s` does not exist; this server serves `%s`.", req.Model, e.cfg.ServedModelName),
			"type":    "NotFoundError", "param": "model", "code": 404}})
	}
	g := &generation{e: e, req: req, chat: chat}
	if bad := g.readPrompt(); bad != nil {
		return apiError(w, http.StatusBadRequest, bad.msg, bad.param)
	}
	if bad := g.plan(); bad != nil {
		return apiError(w, http.StatusBadRequest, bad.msg, bad.param)
	}
	e.metrics.promptToks.Add(int64(g.pt))
	e.metrics.running.Add(1)
	defer e.metrics.running.Add(-1)
	g.schedule(r.Context())
	if !req.Stream {
		return g.answer(w)
	}
	return g.stream(w)
}

// badRequest is a request refused with 400: the message and the
// parameter it names.
type badRequest struct{ msg, param string }

// generation is one completion request being answered: what it asks,
// the tokens it gets and when each is due.
type generation struct {
	e    *engine
	req  genRequest
	chat bool

	prompt, question string
	call             *toolCall
	pt, ctoks        int // prompt and completion tokens
	toks             []string
	finish           string
	u                usage

	ctx       context.Context
	id        string
	created   int64
	first     time.Time // when the first token is due (prefill done)
	step      time.Duration
	decodeTPS float64

	w  http.ResponseWriter
	fl http.Flusher
}

// readPrompt reads the prompt (all messages of a chat) and the question
// the answer is about (a chat's last user message).
func (g *generation) readPrompt() *badRequest {
	req := g.req
	if g.chat {
		if len(req.Messages) == 0 {
			return &badRequest{"messages must not be empty", "messages"}
		}
		var all []string
		for _, m := range req.Messages {
			t := m.text()
			all = append(all, t)
			if m.Role == "user" || m.Role == "" {
				g.question = t
			}
		}
		g.prompt = strings.Join(all, "\n")
		if g.question == "" {
			g.question = g.prompt
		}
		return nil
	}
	var s string
	var ss []string
	switch {
	case len(req.Prompt) == 0:
		return &badRequest{"prompt is required", "prompt"}
	case json.Unmarshal(req.Prompt, &s) == nil:
		g.prompt = s
	case json.Unmarshal(req.Prompt, &ss) == nil && len(ss) > 0:
		g.prompt = ss[0]
	default:
		return &badRequest{"prompt must be a string or a list of strings", "prompt"}
	}
	g.question = g.prompt
	return nil
}

// plan picks the tool call or the tokens of the answer, within the
// context length and max_tokens, and counts them.
func (g *generation) plan() *badRequest {
	req, cfg := g.req, g.e.cfg
	if g.chat && len(req.Tools) > 0 {
		// The server renders the tool definitions into the prompt, so they
		// are prompt tokens (and prefill time), as on a real engine.
		defs, _ := json.Marshal(req.Tools)
		g.prompt += "\n" + string(defs)
		var err error
		if g.call, err = pickToolCall(req.Tools, req.ToolChoice, req.Messages, g.question); err != nil {
			return &badRequest{err.Error(), "tool_choice"}
		}
	}
	g.pt = CountTokens(g.prompt)
	if g.pt > cfg.ContextLength {
		return &badRequest{fmt.Sprintf("This model's maximum context length is %d tokens, prompt has %d tokens. Please reduce the length of the prompt.", cfg.ContextLength, g.pt), "prompt"}
	}
	maxTok := 16
	if req.MaxCompTokens != nil {
		maxTok = *req.MaxCompTokens
	}
	if req.MaxTokens != nil {
		maxTok = *req.MaxTokens
	}
	if maxTok < 0 {
		return &badRequest{fmt.Sprintf("max_tokens must be at least 0, got %d", maxTok), "max_tokens"}
	}
	maxTok = min(maxTok, cfg.ContextLength-g.pt)
	toks, stopped := generate(g.question, maxTok)
	g.toks, g.finish, g.ctoks = toks, "length", len(toks)
	if stopped {
		g.finish = "stop"
	}
	if g.call != nil {
		// A tool call is one piece of output: its tokens are those of its
		// name and arguments, never cut by max_tokens.
		g.toks = []string{g.call.Function.Name + g.call.Function.Arguments}
		g.finish = "tool_calls"
		g.ctoks = CountTokens(g.call.Function.Name + " " + g.call.Function.Arguments)
	}
	g.u = usage{PromptTokens: g.pt, CompletionTokens: g.ctoks, TotalTokens: g.pt + g.ctoks}
	return nil
}

// schedule names the answer and sets when its first token is due and the
// decode pace, jittered per prompt.
func (g *generation) schedule(ctx context.Context) {
	g.ctx = ctx
	g.id = fmt.Sprintf("cmpl-sim-%d", time.Now().UnixNano())
	g.created = time.Now().Unix()
	start := time.Now()
	prefillTPS, decodeTPS := g.e.jittered(g.prompt)
	g.first = start.Add(time.Duration(float64(g.pt) / prefillTPS * float64(time.Second)))
	g.step = time.Duration(float64(time.Second) / decodeTPS)
	g.decodeTPS = decodeTPS
}

// sleepUntil waits for t; false when the client went away first.
func (g *generation) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return g.ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-g.ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// answer writes the whole answer as one JSON body once its last token
// is due.
func (g *generation) answer(w http.ResponseWriter) int {
	toks := g.toks
	if len(toks) > 0 && !g.sleepUntil(g.first.Add(time.Duration(len(toks)-1)*g.step)) {
		return 499
	} else if len(toks) == 0 && !g.sleepUntil(g.first) {
		return 499
	}
	g.e.metrics.genToks.Add(int64(g.ctoks))
	text := strings.Join(toks, "")
	var choice map[string]any
	switch {
	case g.call != nil:
		choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{g.call}}, "finish_reason": g.finish}
	case g.chat:
		choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": g.finish}
	default:
		choice = map[string]any{"index": 0, "text": text, "finish_reason": g.finish}
	}
	object := "text_completion"
	if g.chat {
		object = "chat.completion"
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"id": g.id, "object": object, "created": g.created, "model": g.e.cfg.ServedModelName,
		"choices": []any{choice}, "usage": g.u,
	})
}

// stream writes the answer as server-sent events, a token a chunk at
// the decode pace.
func (g *generation) stream(w http.ResponseWriter) int {
	// Nothing is sent before prefill is done: a client that times the
	// first byte (or the role chunk) must see prompt_tokens/PrefillTPS, as
	// on a real engine, not an instant chunk that inflates prefill t/s.
	if !g.sleepUntil(g.first) {
		return 499
	}
	g.w = w
	g.fl, _ = w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if g.chat {
		// The role chunk, with the first token's schedule.
		c := g.chunk("", nil)
		c["choices"].([]any)[0].(map[string]any)["delta"] = map[string]any{"role": "assistant", "content": ""}
		if !g.send(c) {
			return 499
		}
	}
	toks := g.toks
	if g.call != nil {
		// The whole call in one chunk, then its finish reason.
		c := g.chunk("", nil)
		c["choices"].([]any)[0].(map[string]any)["delta"] = map[string]any{"tool_calls": []any{map[string]any{
			"index": 0, "id": g.call.ID, "type": g.call.Type, "function": g.call.Function}}}
		if !g.send(c) || !g.send(g.chunk("", g.finish)) {
			return 499
		}
		g.e.metrics.genToks.Add(int64(g.ctoks))
		toks = nil
	}
	if !g.decode(toks) {
		return 499
	}
	if len(toks) == 0 && g.call == nil {
		g.send(g.chunk("", g.finish))
	}
	if g.req.StreamOptions != nil && g.req.StreamOptions.IncludeUsage {
		g.send(map[string]any{"id": g.id, "object": g.chunkObject(), "created": g.created, "model": g.e.cfg.ServedModelName, "choices": []any{}, "usage": g.u})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if g.fl != nil {
		g.fl.Flush()
	}
	return http.StatusOK
}

// decode sends toks a chunk each; false when the client went away.
func (g *generation) decode(toks []string) bool {
	// Decode is paced by a token bucket of one (golang.org/x/time/rate)
	// from when the first token actually went out: a stall (a loaded
	// machine) delays the answer but never lets the following tokens burst
	// out faster than the configured rate.
	pace := rate.NewLimiter(rate.Limit(g.decodeTPS), 1)
	for i, tok := range toks {
		if pace.Wait(g.ctx) != nil {
			return false
		}
		var fin any
		if i == len(toks)-1 {
			fin = g.finish
		}
		if !g.send(g.chunk(tok, fin)) {
			return false
		}
		g.e.metrics.genToks.Add(1)
	}
	return true
}

func (g *generation) chunkObject() string {
	if g.chat {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

// send writes one event and flushes it; false when the write failed.
func (g *generation) send(v any) bool {
	b, _ := json.Marshal(v)
	if _, err := fmt.Fprintf(g.w, "data: %s\n\n", b); err != nil {
		return false
	}
	if g.fl != nil {
		g.fl.Flush()
	}
	return true
}

// chunk is one streamed chunk carrying tok, with finish reason fin (nil
// until the last).
func (g *generation) chunk(tok string, fin any) map[string]any {
	var choice map[string]any
	if g.chat {
		delta := map[string]any{}
		if tok != "" {
			delta["content"] = tok
		}
		choice = map[string]any{"index": 0, "delta": delta, "finish_reason": fin}
	} else {
		choice = map[string]any{"index": 0, "text": tok, "finish_reason": fin}
	}
	return map[string]any{"id": g.id, "object": g.chunkObject(), "created": g.created, "model": g.e.cfg.ServedModelName, "choices": []any{choice}}
}

func (e *engine) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	var b strings.Builder
	b.WriteString("# HELP enginesim_requests_total HTTP requests answered, by path and status code.\n# TYPE enginesim_requests_total counter\n")
	e.metrics.mu.Lock()
	keys := make([]string, 0, len(e.metrics.requests))
	for k := range e.metrics.requests {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		path, code, _ := strings.Cut(k, " ")
		fmt.Fprintf(&b, "enginesim_requests_total{path=%q,code=%q} %d\n", path, code, e.metrics.requests[k])
	}
	e.metrics.mu.Unlock()
	fmt.Fprintf(&b, "# HELP enginesim_prompt_tokens_total Prompt tokens processed.\n# TYPE enginesim_prompt_tokens_total counter\nenginesim_prompt_tokens_total %d\n", e.metrics.promptToks.Load())
	fmt.Fprintf(&b, "# HELP enginesim_generation_tokens_total Tokens generated.\n# TYPE enginesim_generation_tokens_total counter\nenginesim_generation_tokens_total %d\n", e.metrics.genToks.Load())
	fmt.Fprintf(&b, "# HELP enginesim_requests_running Requests in flight.\n# TYPE enginesim_requests_running gauge\nenginesim_requests_running %d\n", e.metrics.running.Load())
	fmt.Fprintf(&b, "# HELP enginesim_load_seconds Time the weight load took.\n# TYPE enginesim_load_seconds gauge\nenginesim_load_seconds %g\n", e.loadSeconds)
	fmt.Fprintf(&b, "# HELP enginesim_load_bytes Weight bytes read at load.\n# TYPE enginesim_load_bytes gauge\nenginesim_load_bytes %d\n", e.loadBytes)
	fmt.Fprintf(&b, "# HELP enginesim_ranks World size (ranks joined before serving).\n# TYPE enginesim_ranks gauge\nenginesim_ranks %d\n", e.cfg.NNodes)
	w.Write([]byte(b.String()))
}
