package probe

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

type apiKeyCtx struct{}

// WithAPIKey makes every request of this package under ctx carry key as a
// bearer token (engines started with --api-key refuse others). The key is
// read by the caller from the worker's environment ([probe] api_key_env)
// and never returned in a result or an error.
func WithAPIKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, apiKeyCtx{}, key)
}

func authorize(req *http.Request) {
	if k, _ := req.Context().Value(apiKeyCtx{}).(string); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
}

// unauthorized is the permanent error of an engine that wants a key.
func unauthorized(ctx context.Context, url string, code int) error {
	if k, _ := ctx.Value(apiKeyCtx{}).(string); k != "" {
		return fault.Permanent(fault.ProbeFailed, fmt.Errorf("%s: HTTP %d: the engine refused the API key from [probe] api_key_env: check the variable's value on the control worker", url, code))
	}
	return fault.Permanent(fault.ProbeFailed, fmt.Errorf("%s: HTTP %d: the engine wants an API key: set [probe] api_key_env = \"VAR\" in the recipe and export VAR to the control worker", url, code))
}

// PoolResult is what a probe of an embedding or reranker lane found.
type PoolResult struct {
	// Endpoint is the route probed (/v1/embeddings, /v1/rerank, /rerank).
	Endpoint string `json:"endpoint"`
	// Seconds is the request's round trip.
	Seconds float64 `json:"seconds"`
	// Dim is the embedding length; Results the number of scored documents.
	Dim     int `json:"dim,omitempty"`
	Results int `json:"results,omitempty"`
}

// probeDocs are the reranker probe's documents: the first answers the
// query, so it must score highest.
var probeDocs = []string{"the capital of france is paris", "bananas are yellow and grow in bunches"}

const probeQuery = "what is the capital of france"

// PoolProbe proves an embedding or reranker lane answers on its own
// endpoint (it has no completions route): two texts embedded into finite,
// different, same-length vectors; or two documents scored with the one
// that answers the query first. A reranker is tried on /v1/rerank, then
// /rerank (SGLang's route) when the first is 404.
func PoolProbe(ctx context.Context, baseURL, model, modelType string) (PoolResult, error) {
	base := strings.TrimRight(baseURL, "/")
	if model == "" {
		m, err := ModelName(ctx, baseURL)
		if err != nil {
			return PoolResult{}, err
		}
		model = m
	}
	start := time.Now()
	switch modelType {
	case contract.ModelEmbedding:
		url := base + "/v1/embeddings"
		var out struct {
			Data []struct {
				Embedding []float64 `json:"embedding"`
			} `json:"data"`
		}
		if err := postJSON(ctx, url, map[string]any{"model": model, "input": []string{probeQuery, probeDocs[1]}}, &out); err != nil {
			return PoolResult{}, fmt.Errorf("embedding probe: %w", err)
		}
		res := PoolResult{Endpoint: "/v1/embeddings", Seconds: time.Since(start).Seconds()}
		if len(out.Data) != 2 || len(out.Data[0].Embedding) == 0 || len(out.Data[0].Embedding) != len(out.Data[1].Embedding) {
			return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("embedding probe: %s answered %d vectors for 2 inputs (or empty, or of different lengths)", url, len(out.Data)))
		}
		same := true
		for i, x := range out.Data[0].Embedding {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("embedding probe: %s answered a vector with %v at %d", url, x, i))
			}
			same = same && x == out.Data[1].Embedding[i]
		}
		if same {
			return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("embedding probe: %s gave two different texts the same vector", url))
		}
		res.Dim = len(out.Data[0].Embedding)
		return res, nil
	case contract.ModelReranker:
		var out struct {
			Results []struct {
				Index int     `json:"index"`
				Score float64 `json:"relevance_score"`
			} `json:"results"`
		}
		body := map[string]any{"model": model, "query": probeQuery, "documents": probeDocs}
		ep := "/v1/rerank"
		err := postJSON(ctx, base+ep, body, &out)
		if err != nil && strings.Contains(err.Error(), "HTTP 404") {
			ep = "/rerank"
			err = postJSON(ctx, base+ep, body, &out)
		}
		res := PoolResult{Endpoint: ep, Seconds: time.Since(start).Seconds()}
		if err != nil {
			return res, fmt.Errorf("rerank probe: %w", err)
		}
		if len(out.Results) != 2 {
			return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("rerank probe: %s scored %d of 2 documents", base+ep, len(out.Results)))
		}
		best := out.Results[0]
		for _, r := range out.Results {
			if r.Score > best.Score {
				best = r
			}
		}
		if best.Index != 0 {
			return res, fault.Permanent(fault.ProbeFailed, fmt.Errorf("rerank probe: %s ranked %q above %q for %q", base+ep, probeDocs[best.Index], probeDocs[0], probeQuery))
		}
		res.Results = len(out.Results)
		return res, nil
	}
	return PoolResult{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("pool probe: model type %q is not embedding or reranker", modelType))
}
