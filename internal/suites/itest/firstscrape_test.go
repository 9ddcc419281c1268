package itest

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// An idle fleet's first scrape already has what a dashboard draws: the
// build, every node's up state (n1's worker runs, n2's does not), each
// lane's probe and bench series at zero and its staging series on the
// nodes of its cluster at zero — nothing has run yet.
func TestIdleWorkersFirstScrape(t *testing.T) {
	nas := filepath.Join(t.TempDir(), "nas")
	f := newFleet(t, fleetOptions{nodes: 2, metrics: true, shared: nas,
		clusters: map[string][]string{"solo": {"n1"}, "duo": {"n1", "n2"}},
		extra:    fmt.Sprintf("hf_cache_dir = %q\n", filepath.Join(nas, "hub")),
		recipes: map[string]string{
			"idle-one": diskRecipe("idle-one", "sparklane/engine-sim:latest", filepath.Join(nas, "hub"), 23000),
			"idle-duo": strings.Replace(diskRecipe("idle-duo", "sparklane/engine-sim:latest", filepath.Join(nas, "hub"), 23100), `cluster = "solo"`, `cluster = "duo"`, 1),
		}})
	f.startControl()
	f.startNode("n1")

	// The node's worker long-polls once it started: wait for the server to
	// have seen it (the scrape asks the server), bounded.
	deadline := time.Now().Add(time.Minute)
	var body string
	for {
		resp, err := http.Get("http://" + f.metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		if strings.Contains(body, `sparklane_node_up{node="n1"} 1`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // a poll's pace, not a wait for an outcome
	}
	for _, want := range []string{
		`sparklane_build_info{commit="`,
		`go_version="` + runtime.Version() + `",version="`,
		`sparklane_node_up{node="n1"} 1`,
		`sparklane_node_up{node="n2"} 0`,
		`sparklane_node_outage_seconds{node="n2"} 0`,
		`sparklane_probe_decode_tokens_per_second{lane="idle-one"} 0`,
		`sparklane_probe_decode_tokens_per_second{lane="idle-duo"} 0`,
		`sparklane_readiness_seconds{lane="idle-duo"} 0`,
		`sparklane_bench_decode_tokens_per_second{lane="idle-one"} 0`,
		`sparklane_staging_bytes_total{block="weights",lane="idle-one",node="n1"} 0`,
		`sparklane_staging_bytes_total{block="weights",lane="idle-duo",node="n1"} 0`,
		`sparklane_files_verified_total{block="weights",lane="idle-duo",node="n1"} 0`,
		`sparklane_image_bytes_total{lane="idle-duo",node="n1",source="n2"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("first scrape lacks %s", want)
		}
	}
	// n2's worker does not run: nothing seeds its staging series.
	if strings.Contains(body, `node="n2"} 0`) && strings.Contains(body, `lane="idle-duo",node="n2"`) {
		t.Errorf("staging series for n2, whose worker does not run:\n%s", body)
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", grepLines(body, "sparklane_"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
