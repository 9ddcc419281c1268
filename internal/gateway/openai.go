package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

// OpenAI error types the gateway answers with.
const (
	typeInvalid = "invalid_request_error"
	typeServer  = "server_error"
)

// apiError is a request the gateway answers itself, in OpenAI's error
// shape: {"error":{"message","type","param","code"}}.
type apiError struct {
	status     int
	msg        string
	typ        string
	param      string // "" is null
	code       string
	retryAfter int // seconds; 0: no Retry-After
	// reason and cluster label sparklane_gateway_rejected_total ("": not
	// counted there).
	reason, cluster string
}

// errorBody is OpenAI's error JSON.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() []byte {
	d := errorDetail{Message: e.msg, Type: e.typ}
	if e.param != "" {
		d.Param = &e.param
	}
	if e.code != "" {
		d.Code = &e.code
	}
	b, _ := json.Marshal(errorBody{Error: d})
	return append(b, '\n')
}

// write answers the request with e.
func (e *apiError) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	w.WriteHeader(e.status)
	w.Write(e.body())
}

// retryAfter is a route's ETA in whole seconds, rounded up, at least 1.
func retryAfter(eta contract.Duration) int {
	return max(1, int(math.Ceil(eta.D().Seconds())))
}

func errNoModel(names []string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalid, param: "model", code: "model_required",
		msg: fmt.Sprintf("this gateway serves several models: name one in `model` (served: %s)", listNames(names)), reason: "no_model"}
}

func errUnknownModel(name string, names []string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: typeInvalid, param: "model", code: "model_not_found",
		msg: fmt.Sprintf("The model `%s` does not exist or you do not have access to it. Served: %s.", name, listNames(names)), reason: "unknown_model"}
}

func errNothingRouted() *apiError {
	return &apiError{status: http.StatusNotFound, typ: typeInvalid, param: "model", code: "model_not_found",
		msg: "no lane is routed through this gateway yet", reason: "unknown_model"}
}

func listNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func errHeldTooMany(rt *route, max int) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "too_many_held", retryAfter: retryAfter(rt.ETA),
		msg:    fmt.Sprintf("cluster %s is switching lanes (%s) and already holds %d requests (max_held): retry later", rt.Cluster, whyOr(rt.Why, rt.State), max),
		reason: "max_held", cluster: rt.Cluster}
}

func errHoldTimeout(rt *route, waited time.Duration) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "hold_timeout", retryAfter: retryAfter(rt.ETA),
		msg:    fmt.Sprintf("cluster %s is still switching lanes (%s) after %s (hold_timeout): retry later", rt.Cluster, whyOr(rt.Why, rt.State), waited.Round(time.Millisecond)),
		reason: "hold_timeout", cluster: rt.Cluster}
}

func errOff(rt *route) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "cluster_off", retryAfter: retryAfter(rt.ETA),
		msg:    fmt.Sprintf("cluster %s is off (%s)", rt.Cluster, whyOr(rt.Why, "by schedule")),
		reason: "off", cluster: rt.Cluster}
}

func errDown(rt *route) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "lane_down", retryAfter: retryAfter(rt.ETA),
		msg:    fmt.Sprintf("lane %s on cluster %s is down (%s): retry later", nonEmpty(rt.Lane, "(none)"), rt.Cluster, whyOr(rt.Why, "nothing serves it")),
		reason: "down", cluster: rt.Cluster}
}

func errWake(rt *route) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "wake_failed", retryAfter: retryAfter(rt.ETA),
		msg:    fmt.Sprintf("cluster %s is off and its power-on could not be started: retry later", rt.Cluster),
		reason: "wake_failed", cluster: rt.Cluster}
}

func errStopping(cluster string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "gateway_stopping", retryAfter: 1,
		msg: "the gateway is shutting down: retry", reason: "stopping", cluster: cluster}
}

func whyOr(why, dflt string) string {
	if why != "" {
		return why
	}
	return dflt
}

// modelEntry is one name in /v1/models: OpenAI's model object and where
// the gateway routes it.
type modelEntry struct {
	ID        string     `json:"id"`
	Object    string     `json:"object"`
	Created   int64      `json:"created"`
	OwnedBy   string     `json:"owned_by"`
	Sparklane modelRoute `json:"sparklane"`
}

type modelRoute struct {
	Lane    string `json:"lane"`
	Cluster string `json:"cluster"`
	State   string `json:"state"`
	Served  string `json:"served"`
}

// models are the names k may see, sorted, each with its route.
func (g *Gateway) models(k *key) []modelEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.modelsLocked(k)
}

// modelsLocked is models with g.mu held.
func (g *Gateway) modelsLocked(k *key) []modelEntry {
	out := make([]modelEntry, 0, len(g.names))
	for n, rt := range g.names {
		if !k.allows(n) {
			continue
		}
		out = append(out, modelEntry{ID: n, Object: "model", OwnedBy: "sparklane",
			Sparklane: modelRoute{Lane: rt.Lane, Cluster: rt.Cluster, State: rt.State, Served: rt.Served}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// namesOf are the names of ms.
func namesOf(ms []modelEntry) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// serveModels answers GET /v1/models and /v1/models/{id} itself.
func (g *Gateway) serveModels(w http.ResponseWriter, r *http.Request, k *key) int {
	if r.Method != http.MethodGet {
		e := &apiError{status: http.StatusMethodNotAllowed, typ: typeInvalid, msg: "use GET on " + r.URL.Path, code: "method_not_allowed"}
		e.write(w)
		return e.status
	}
	ms := g.models(k)
	id := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/v1/models"), "/")
	var v any = map[string]any{"object": "list", "data": ms}
	if id != "" {
		v = nil
		for _, m := range ms {
			if m.ID == id {
				v = m
			}
		}
		if v == nil {
			e := errUnknownModel(id, namesOf(ms))
			e.write(w)
			return e.status
		}
	}
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(b, '\n'))
	return http.StatusOK
}

// mapUpstreamError rewrites an engine's error answer into OpenAI's error
// shape with the lane named, keeping its status and, when the engine gave
// them, its message, type, param and code (OpenAI's {"error":{...}},
// vLLM's {"object":"error","message",...}, {"error":"..."}, FastAPI's
// {"detail":...}, or plain text).
func mapUpstreamError(resp *http.Response, rt *route) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	d := upstreamDetail(raw)
	if d.Message == "" {
		d.Message = http.StatusText(resp.StatusCode)
	}
	d.Message = fmt.Sprintf("lane %s (cluster %s): %s", rt.Lane, rt.Cluster, d.Message)
	if d.Type == "" {
		d.Type = typeInvalid
		if resp.StatusCode >= 500 {
			d.Type = typeServer
		}
	}
	b, _ := json.Marshal(errorBody{Error: d})
	b = append(b, '\n')
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Del("Content-Encoding")
	resp.TransferEncoding = nil
	return nil
}

// upstreamDetail reads what an engine's error body says.
func upstreamDetail(raw []byte) errorDetail {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
		Type    json.RawMessage `json:"type"`
		Param   json.RawMessage `json:"param"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return errorDetail{Message: clip(strings.TrimSpace(string(raw)))}
	}
	if len(v.Error) > 0 && v.Error[0] == '{' {
		var inner struct {
			Message, Type, Param, Code json.RawMessage
		}
		json.Unmarshal(v.Error, &inner)
		return errorDetail{Message: clip(str(inner.Message)), Type: str(inner.Type), Param: strPtr(inner.Param), Code: strPtr(inner.Code)}
	}
	msg := str(v.Message)
	for _, m := range []json.RawMessage{v.Error, v.Detail} {
		if msg == "" && len(m) > 0 {
			msg = str(m)
			if msg == "" {
				msg = string(m) // FastAPI's detail may be a list
			}
		}
	}
	return errorDetail{Message: clip(msg), Type: str(v.Type), Param: strPtr(v.Param), Code: strPtr(v.Code)}
}

// str is m as a JSON string ("" when it is not one).
func str(m json.RawMessage) string {
	var s string
	if json.Unmarshal(m, &s) != nil {
		return ""
	}
	return s
}

// strPtr is m as a JSON string, nil when it is not one (a number code).
func strPtr(m json.RawMessage) *string {
	if s := str(m); s != "" {
		return &s
	}
	return nil
}

// clip bounds an engine's message quoted to a client.
func clip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}
