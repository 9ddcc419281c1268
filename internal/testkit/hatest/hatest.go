package hatest

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Call is one request the double received.
type Call struct {
	Seq    int    `json:"seq"`
	Method string `json:"method"`
	Path   string `json:"path"`
	// Service is "turn_on"/"turn_off" for service calls, "" for state reads.
	Service string `json:"service,omitempty"`
	Entity  string `json:"entity,omitempty"`
	// Authorized says whether the bearer token matched.
	Authorized bool `json:"authorized"`
	Status     int  `json:"status"`
}

type entity struct {
	state   string
	pending string // state reported after lag reads
	lag     int
	fail    int // status for service calls, 0 = none
	device  *Device
}

// Server is a running double.
type Server struct {
	// URL is the base URL (http://127.0.0.1:PORT) to put in power.ha_url.
	URL string
	// Token is the only bearer token accepted.
	Token string
	// EchoAuthOnError makes error answers quote the request's Authorization
	// header, as a badly behaved proxy might; tests use it to prove the
	// client scrubs the token from quoted bodies.
	EchoAuthOnError bool

	mu       sync.Mutex
	entities map[string]*entity
	calls    []Call
	hook     func(Call)
}

// Start serves the double on 127.0.0.1 until the test ends.
func Start(t testing.TB, token string) *Server {
	t.Helper()
	s := &Server{Token: token, entities: map[string]*entity{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("hatest: listen on 127.0.0.1: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.handle))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// AddSwitch registers entity with an initial state ("on", "off",
// "unavailable").
func (s *Server) AddSwitch(entityID, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entities[entityID] = &entity{state: state}
}

// State returns the entity's real state (what the outlet is doing), which
// may differ from what a lagging state read reports.
func (s *Server) State(entityID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entities[entityID]; e != nil {
		if e.pending != "" {
			return e.pending
		}
		return e.state
	}
	return ""
}

// SetState switches an entity behind Home Assistant's back (someone
// pressed the outlet's button); an attached Device follows the power.
func (s *Server) SetState(entityID, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entities[entityID]
	if e == nil {
		e = &entity{}
		s.entities[entityID] = e
	}
	e.state, e.pending = state, ""
	if e.device != nil {
		e.device.powerChanged(state == "on")
	}
}

// SetLag makes a switch report its new state only after n further state
// reads, as a relay integration that confirms asynchronously does.
func (s *Server) SetLag(entityID string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entities[entityID]; e != nil {
		e.lag = n
	}
}

// FailService makes service calls on entityID answer status (e.g. 500, a
// broken integration) without switching; 0 restores normal behaviour.
func (s *Server) FailService(entityID string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entities[entityID]; e != nil {
		e.fail = status
	}
}

// OnCall registers fn to run (outside the lock) after each call, so tests
// can record the global order of events across doubles.
func (s *Server) OnCall(fn func(Call)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = fn
}

// Calls returns every request received, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// ServiceCalls returns the service calls (turn_on/turn_off) in order, as
// "turn_off switch.x" strings.
func (s *Server) ServiceCalls() []string {
	var out []string
	for _, c := range s.Calls() {
		if c.Service != "" {
			out = append(out, c.Service+" "+c.Entity)
		}
	}
	return out
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	c := Call{Method: r.Method, Path: r.URL.Path}
	status, body := s.route(r, &c)
	s.mu.Lock()
	c.Seq = len(s.calls) + 1
	c.Status = status
	s.calls = append(s.calls, c)
	hook := s.hook
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	if hook != nil {
		hook(c)
	}
}

func jsonBody(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func (s *Server) route(r *http.Request, c *Call) (int, []byte) {
	auth := r.Header.Get("Authorization")
	c.Authorized = auth == "Bearer "+s.Token && s.Token != ""
	errBody := func(msg string) []byte {
		if s.EchoAuthOnError {
			msg += " (request had Authorization: " + auth + ")"
		}
		return jsonBody(map[string]string{"message": msg})
	}
	if !c.Authorized {
		return http.StatusUnauthorized, []byte("401: Unauthorized")
	}
	path := r.URL.Path
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/api/states/"):
		c.Entity = strings.TrimPrefix(path, "/api/states/")
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.entities[c.Entity]
		if e == nil {
			return http.StatusNotFound, jsonBody(map[string]string{"message": "Entity not found."})
		}
		if e.pending != "" {
			if e.lag <= 0 {
				e.state, e.pending = e.pending, ""
			} else {
				e.lag--
			}
		}
		return http.StatusOK, jsonBody(map[string]any{
			"entity_id": c.Entity, "state": e.state, "attributes": map[string]any{},
			"last_changed": time.Now().UTC().Format(time.RFC3339Nano),
		})
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/api/services/"):
		parts := strings.Split(strings.TrimPrefix(path, "/api/services/"), "/")
		if len(parts) != 2 || (parts[1] != "turn_on" && parts[1] != "turn_off") {
			return http.StatusBadRequest, errBody("service not supported by the test double")
		}
		c.Service = parts[1]
		var req struct {
			EntityID string `json:"entity_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.EntityID == "" {
			return http.StatusBadRequest, errBody("Invalid JSON specified.")
		}
		c.Entity = req.EntityID
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.entities[c.Entity]
		if e == nil || !strings.HasPrefix(c.Entity, parts[0]+".") {
			return http.StatusBadRequest, errBody("Referenced entities " + c.Entity + " are missing or not currently available")
		}
		if e.fail != 0 {
			return e.fail, errBody("Error while executing service: relay integration failed")
		}
		want := "off"
		if c.Service == "turn_on" {
			want = "on"
		}
		if e.lag > 0 {
			e.pending = want
		} else {
			e.state, e.pending = want, ""
		}
		if e.device != nil {
			e.device.powerChanged(want == "on")
		}
		return http.StatusOK, jsonBody([]map[string]any{{"entity_id": c.Entity, "state": want}})
	}
	return http.StatusNotFound, errBody("no such endpoint in the test double")
}

// Device simulates a machine or switch behind a relay, so a test can play
// the lesson: shut down through its API alone, a powered device boots back
// (or never goes down); only the relay off keeps it off.
type Device struct {
	s *Server
	// IgnoresShutdown: Shutdown does nothing, the device keeps answering.
	IgnoresShutdown bool
	// BootsBackAfter: once shut down with its relay still on, the device
	// answers again after this many reachability checks (0 = stays down).
	BootsBackAfter int

	up         bool
	downChecks int
	shutdowns  int
}

// Device attaches a simulated device to the relay entityID; it is up when
// the relay is on.
func (s *Server) Device(entityID string) *Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entities[entityID]
	if e == nil {
		e = &entity{state: "on"}
		s.entities[entityID] = e
	}
	d := &Device{s: s, up: e.state == "on"}
	e.device = d
	return d
}

// Shutdown is the device's own (API or SSH) shutdown.
func (d *Device) Shutdown() {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	d.shutdowns++
	if d.IgnoresShutdown {
		return
	}
	d.up = false
	d.downChecks = 0
}

// Shutdowns counts graceful shutdown requests received.
func (d *Device) Shutdowns() int {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	return d.shutdowns
}

// Reachable is the device answering on the network. A device shut down
// while its relay stays on boots back after BootsBackAfter checks.
func (d *Device) Reachable() bool {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	if !d.up && d.BootsBackAfter > 0 && d.poweredLocked() {
		d.downChecks++
		if d.downChecks >= d.BootsBackAfter {
			d.up = true
		}
	}
	return d.up && d.poweredLocked()
}

func (d *Device) poweredLocked() bool {
	for _, e := range d.s.entities {
		if e.device == d {
			st := e.state
			if e.pending != "" {
				st = e.pending
			}
			return st == "on"
		}
	}
	return false
}

// powerChanged runs under the server lock when the relay switches.
func (d *Device) powerChanged(on bool) {
	d.up = on
	d.downChecks = 0
}
