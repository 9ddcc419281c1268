package power

import (
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

// HA is a minimal Home Assistant REST client for outlet relays: the three
// calls power needs (turn on, turn off, read state) and nothing else.
type HA struct {
	base  string
	token Secret
	http  *http.Client
}

// NewHA returns a client for the Home Assistant at baseURL
// (http://ha.local:8123) that authenticates with token. A nil httpClient
// means one with a 15 s timeout, so a hung Home Assistant cannot hang a step.
func NewHA(baseURL string, token Secret, httpClient *http.Client) *HA {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 15 * time.Second}
	}
	return &HA{base: strings.TrimRight(baseURL, "/"), token: token, http: httpClient}
}

// haState is the part of GET /api/states/ENTITY that power reads.
type haState struct {
	EntityID string `json:"entity_id"`
	State    string `json:"state"`
}

// TurnOn switches entity on (POST /api/services/DOMAIN/turn_on). It does
// not wait for the relay to report on; see SetRelay for that.
func (h *HA) TurnOn(ctx context.Context, entity string) error {
	return h.service(ctx, entity, "turn_on")
}

// TurnOff switches entity off (POST /api/services/DOMAIN/turn_off). It does
// not wait for the relay to report off; see SetRelay for that.
func (h *HA) TurnOff(ctx context.Context, entity string) error {
	return h.service(ctx, entity, "turn_off")
}

// State reads entity's state: "on", "off", "unavailable" or "unknown".
func (h *HA) State(ctx context.Context, entity string) (string, error) {
	if err := checkEntity(entity); err != nil {
		return "", err
	}
	body, err := h.do(ctx, http.MethodGet, "/api/states/"+entity, nil, entity)
	if err != nil {
		return "", err
	}
	var st haState
	if err := json.Unmarshal(body, &st); err != nil {
		return "", fmt.Errorf("Home Assistant at %s: state of %s is not JSON (%v): is ha_url the Home Assistant API?", h.base, entity, err)
	}
	if st.State == "" {
		return "", fmt.Errorf("Home Assistant at %s: state of %s has no \"state\" field: is ha_url the Home Assistant API?", h.base, entity)
	}
	return st.State, nil
}

func (h *HA) service(ctx context.Context, entity, action string) error {
	if err := checkEntity(entity); err != nil {
		return err
	}
	domain, _, _ := strings.Cut(entity, ".")
	payload, _ := json.Marshal(map[string]string{"entity_id": entity})
	_, err := h.do(ctx, http.MethodPost, "/api/services/"+domain+"/"+action, payload, entity)
	if err != nil {
		return fmt.Errorf("%s %s: %w", action, entity, err)
	}
	return nil
}

// checkEntity refuses entity ids that would change the URL path.
func checkEntity(entity string) error {
	domain, object, ok := strings.Cut(entity, ".")
	if !ok || domain == "" || object == "" || strings.ContainsAny(entity, "/?#% ") {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf(
			"power.relay %q is not a Home Assistant entity id: write it as domain.object, e.g. switch.dgx1_outlet", entity))
	}
	return nil
}

// do sends one request and returns the body of a 2xx answer. Errors name
// the URL, the entity and what to do; they never contain the token (the
// server's body is scrubbed before it is quoted).
func (h *HA) do(ctx context.Context, method, path string, payload []byte, entity string) ([]byte, error) {
	if h.token.Empty() {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf(
			"Home Assistant at %s: no token loaded from %s: set it before switching %s", h.base, h.token.Source(), entity))
	}
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("power.ha_url %q: %v", h.base, err))
	}
	req.Header.Set("Authorization", "Bearer "+h.token.reveal())
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.http.Do(req)
	if err != nil {
		// url.Error carries the method and URL, never request headers.
		return nil, fmt.Errorf("Home Assistant at %s unreachable: %w", h.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("Home Assistant at %s: reading answer to %s %s: %w", h.base, method, path, err)
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return body, nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fault.Permanent(fault.AuthFailed, fmt.Errorf(
			"Home Assistant at %s refused the token from %s (%d): check the token (a long-lived access token of a user allowed to control %s)",
			h.base, h.token.Source(), resp.StatusCode, entity))
	case resp.StatusCode == http.StatusNotFound:
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf(
			"Home Assistant at %s has no entity %s (404 on %s): check power.relay against Settings → Entities", h.base, entity, path))
	default:
		err := fmt.Errorf("Home Assistant at %s answered %s to %s %s: %s", h.base, resp.Status, method, path, h.token.scrub(snippet(body)))
		if resp.StatusCode == http.StatusBadRequest {
			return nil, fault.Permanent(fault.InvalidSpec, err)
		}
		return nil, err
	}
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}

// ErrRelayNotConfirmed is returned (wrapped) when a relay did not report the
// wanted state within the confirmation bound.
var ErrRelayNotConfirmed = errors.New("relay state not confirmed")

// SetRelayInput says which relay to switch and how long to wait for Home
// Assistant to report the new state.
type SetRelayInput struct {
	Entity string
	On     bool
	// Bound caps the confirmation polling (default 30 s); Interval is the
	// pause between state reads (default 1 s).
	Bound    time.Duration
	Interval time.Duration
}

// SetRelayResult is the confirmed state and how many state reads it took.
type SetRelayResult struct {
	State string `json:"state"`
	Polls int    `json:"polls"`
}

// SetRelay switches the relay and polls its state until Home Assistant
// reports it (bounded). A relay that says "off" but is really still on is
// exactly the failure that left a switch powered, so the switch call alone
// is never trusted.
func (h *HA) SetRelay(ctx context.Context, in SetRelayInput) (SetRelayResult, error) {
	want := "off"
	call := h.TurnOff
	if in.On {
		want, call = "on", h.TurnOn
	}
	if err := call(ctx, in.Entity); err != nil {
		return SetRelayResult{}, err
	}
	bound, interval := in.Bound, in.Interval
	if bound <= 0 {
		bound = 30 * time.Second
	}
	if interval <= 0 {
		interval = time.Second
	}
	deadline := time.Now().Add(bound)
	var res SetRelayResult
	for {
		st, err := h.State(ctx, in.Entity)
		res.Polls++
		if err != nil {
			if _, perm := fault.TypeOf(err); perm {
				return res, err
			}
		} else {
			res.State = st
			if st == want {
				return res, nil
			}
		}
		if !time.Now().Add(interval).Before(deadline) {
			last := res.State
			if err != nil {
				last = "unreadable (" + err.Error() + ")"
			}
			return res, fmt.Errorf("%w: Home Assistant at %s still reports %s as %s after %s (wanted %s): check the outlet and its integration",
				ErrRelayNotConfirmed, h.base, in.Entity, last, bound, want)
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("waiting for %s to report %s: %w", in.Entity, want, ctx.Err())
		case <-time.After(interval):
		}
	}
}
