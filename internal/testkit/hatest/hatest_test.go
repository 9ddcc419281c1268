package hatest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func do(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestDoubleAuthSwitchAndState(t *testing.T) {
	s := Start(t, "tok-123")
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") {
		t.Fatalf("double must bind 127.0.0.1, got %s", s.URL)
	}
	s.AddSwitch("switch.a", "on")
	if code, _ := do(t, "GET", s.URL+"/api/states/switch.a", "wrong", ""); code != 401 {
		t.Fatalf("wrong token: got %d, want 401", code)
	}
	if code, _ := do(t, "GET", s.URL+"/api/states/switch.nope", "tok-123", ""); code != 404 {
		t.Fatalf("unknown entity: got %d, want 404", code)
	}
	if code, _ := do(t, "POST", s.URL+"/api/services/switch/turn_off", "tok-123", `{"entity_id":"switch.a"}`); code != 200 {
		t.Fatalf("turn_off: got %d", code)
	}
	code, body := do(t, "GET", s.URL+"/api/states/switch.a", "tok-123", "")
	if code != 200 || !strings.Contains(body, `"state":"off"`) {
		t.Fatalf("state after turn_off: %d %s", code, body)
	}
	if got := s.ServiceCalls(); len(got) != 1 || got[0] != "turn_off switch.a" {
		t.Fatalf("recorded service calls %v", got)
	}
	if calls := s.Calls(); len(calls) != 4 || calls[0].Authorized || !calls[3].Authorized {
		t.Fatalf("recorded calls %+v", calls)
	}
}

func TestDoubleLagAndDeviceBootsBack(t *testing.T) {
	s := Start(t, "tok")
	s.AddSwitch("switch.sw", "on")
	d := s.Device("switch.sw")
	d.BootsBackAfter = 2
	if !d.Reachable() {
		t.Fatal("device behind a relay that is on must be up")
	}
	d.Shutdown()
	if d.Reachable() {
		t.Fatal("first check after shutdown: still up")
	}
	if !d.Reachable() {
		t.Fatal("relay on: the device must boot back after 2 checks (the lesson)")
	}
	s.SetLag("switch.sw", 1)
	do(t, "POST", s.URL+"/api/services/switch/turn_off", "tok", `{"entity_id":"switch.sw"}`)
	if d.Reachable() {
		t.Fatal("relay off: device must be down")
	}
	_, b1 := do(t, "GET", s.URL+"/api/states/switch.sw", "tok", "")
	_, b2 := do(t, "GET", s.URL+"/api/states/switch.sw", "tok", "")
	if !strings.Contains(b1, `"state":"on"`) || !strings.Contains(b2, `"state":"off"`) {
		t.Fatalf("lag 1: want on then off, got %s / %s", b1, b2)
	}
	for range 5 {
		if d.Reachable() {
			t.Fatal("relay off: device must never boot back")
		}
	}
}
