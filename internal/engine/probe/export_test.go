package probe

import (
	"net/http"
	"testing"
)

// UseHTTPClient makes the probes send through c for the rest of t (a
// client on an in-memory network, for tests on a synctest fake clock).
// Tests that call it must not run in parallel with other probe tests.
func UseHTTPClient(t testing.TB, c *http.Client) {
	old := httpClient
	httpClient = c
	t.Cleanup(func() { httpClient = old })
}
