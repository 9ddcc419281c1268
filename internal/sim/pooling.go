package sim

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"strings"
)

// EmbeddingDim is the length of engine-sim's embedding vectors.
const EmbeddingDim = 16

// authorized says whether r carries the API key (always, without one).
func (e *engine) authorized(r *http.Request) bool {
	if e.cfg.APIKey == "" {
		return true
	}
	got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	return subtle.ConstantTimeCompare([]byte(got), []byte(e.cfg.APIKey)) == 1
}

// embed is a deterministic unit vector of text: the same text always
// gives the same vector, different texts different ones.
func embed(text string) []float64 {
	v := make([]float64, EmbeddingDim)
	var norm float64
	for i := range v {
		h := sha256.Sum256([]byte{byte(i)})
		h = sha256.Sum256(append(h[:], text...))
		x := float64(int32(binary.LittleEndian.Uint32(h[:4]))) / math.MaxInt32
		v[i] = x
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] /= norm
	}
	return v
}

// inputs reads an OpenAI "input": a string or a list of strings.
func inputs(raw json.RawMessage) ([]string, bool) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, true
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil && len(many) > 0 {
		return many, true
	}
	return nil, false
}

// handleEmbeddings answers /v1/embeddings as vLLM's pooling runner does.
func (e *engine) handleEmbeddings(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodPost {
		return apiError(w, http.StatusMethodNotAllowed, "POST only", "")
	}
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20)).Decode(&req); err != nil {
		return apiError(w, http.StatusBadRequest, "body is not JSON: "+err.Error(), "")
	}
	texts, ok := inputs(req.Input)
	if !ok {
		return apiError(w, http.StatusBadRequest, "input must be a string or a list of strings", "input")
	}
	var data []map[string]any
	tokens := 0
	for i, t := range texts {
		data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": embed(t)})
		tokens += len(strings.Fields(t))
	}
	e.metrics.promptToks.Add(int64(tokens))
	return writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "model": e.cfg.ServedModelName, "data": data,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// handleRerank answers /v1/rerank and /rerank (vLLM's and SGLang's
// routes): documents scored against the query by shared words, best
// first.
func (e *engine) handleRerank(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodPost {
		return apiError(w, http.StatusMethodNotAllowed, "POST only", "")
	}
	var req struct {
		Model     string   `json:"model"`
		Query     string   `json:"query"`
		Documents []string `json:"documents"`
		TopN      int      `json:"top_n"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20)).Decode(&req); err != nil {
		return apiError(w, http.StatusBadRequest, "body is not JSON: "+err.Error(), "")
	}
	if req.Query == "" || len(req.Documents) == 0 {
		return apiError(w, http.StatusBadRequest, "query and documents are required", "documents")
	}
	q := map[string]bool{}
	for _, w := range strings.Fields(strings.ToLower(req.Query)) {
		q[w] = true
	}
	type result struct {
		Index    int            `json:"index"`
		Score    float64        `json:"relevance_score"`
		Document map[string]any `json:"document"`
	}
	var res []result
	tokens := len(strings.Fields(req.Query))
	for i, d := range req.Documents {
		words := strings.Fields(strings.ToLower(d))
		tokens += len(words)
		hit := 0
		for _, w := range words {
			if q[w] {
				hit++
			}
		}
		score := 0.0
		if len(words) > 0 {
			score = float64(hit) / float64(len(words))
		}
		res = append(res, result{Index: i, Score: score, Document: map[string]any{"text": d}})
	}
	sort.SliceStable(res, func(i, j int) bool { return res[i].Score > res[j].Score })
	if req.TopN > 0 && req.TopN < len(res) {
		res = res[:req.TopN]
	}
	e.metrics.promptToks.Add(int64(tokens))
	return writeJSON(w, http.StatusOK, map[string]any{
		"id": "rerank-sim", "model": e.cfg.ServedModelName, "results": res,
		"usage": map[string]int{"total_tokens": tokens},
	})
}
