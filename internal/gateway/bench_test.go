package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// BenchmarkProxy is one request at a time through the gateway to a
// trivial engine double (httptest), against the same double direct: the
// gateway's own cost per request (go test -bench Proxy -benchmem).
func BenchmarkProxy(b *testing.B) {
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[]}`)
	}))
	defer d.Close()
	g, err := New(Options{Gateway: config.Gateway{}.WithDefaults()})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := g.Route(lane("c1", "l1", d.URL, "m", "alias")); err != nil {
		b.Fatal(err)
	}
	gs := httptest.NewServer(g.Handler())
	defer gs.Close()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for _, tc := range []struct{ name, url, model string }{{"direct", d.URL, "m"}, {"gateway", gs.URL, "alias"}} {
		body := `{"model":"` + tc.model + `","messages":[{"role":"user","content":"hi"}]}`
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := c.Post(tc.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}
