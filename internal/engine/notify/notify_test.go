package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSendCommandGetsTheNoticeInItsEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "notice")
	t.Setenv("SPARKLANE_SECRET_FOR_TEST", "do-not-pass")
	cmd := `printf '%s|%s|%s|%s|%s' "$SPARKLANE_CLUSTER" "$SPARKLANE_LANE" "$SPARKLANE_STATE" "$SPARKLANE_REASON" "$SPARKLANE_SECRET_FOR_TEST" > ` + out
	n := Notice{Cluster: "c1", Lane: "l1", State: "stopped: node gone", Reason: "node n2 gone"}
	if err := Send(context.Background(), cmd, n); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != "c1|l1|stopped: node gone|node n2 gone|" {
		t.Errorf("the command saw %q", got)
	}
	if err := Send(context.Background(), "echo boom; exit 3", n); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("failing command: %v, want its output in the error", err)
	}
}

func TestSendWebhookPostsJSON(t *testing.T) {
	var got Notice
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&got) != nil {
			w.WriteHeader(http.StatusBadRequest)
		}
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	n := Notice{Cluster: "c1", Lane: "l1", State: "off by schedule", Reason: "r"}
	if err := Send(context.Background(), srv.URL+"/hook?token=abc", n); err != nil || got != n {
		t.Fatalf("webhook: %v, got %+v", err, got)
	}
	err := Send(context.Background(), srv.URL+"/hook?token=abc&fail=1", n)
	if err == nil || strings.Contains(err.Error(), "abc") {
		t.Errorf("failing webhook: %v; want an error without the query's token", err)
	}
	if d := Describe(srv.URL + "/hook?token=abc"); strings.Contains(d, "abc") || !strings.HasPrefix(d, "webhook http://") {
		t.Errorf("Describe %q", d)
	}
}
