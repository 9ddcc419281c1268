package itest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
	"github.com/sparklane/sparklane/workflows"
)

// hostileFetchFleet is a one-node fleet fetching on the control worker,
// with lane "l" fetching repos of the Hub double into its NAS hub root;
// extra are more root keys of the config.
func hostileFetchFleet(t *testing.T, extra string, repos ...string) (*fleet, string) {
	t.Helper()
	dir := t.TempDir()
	hub := filepath.Join(dir, "nas", "hub")
	recipe := fetchRecipe("l", hub, repos[0], "")
	if len(repos) > 1 {
		recipe = strings.Replace(recipe, fmt.Sprintf("repos = [%q]", repos[0]), fmt.Sprintf("repos = [%s]", quoteAll(repos)), 1)
	}
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"one": {"n1"}}, shared: filepath.Join(dir, "nas"), extra: extra,
		recipes: map[string]string{"l": recipe}})
	f.startControl()
	f.startNode("n1")
	return f, hub
}

// asyncStarter runs the starter in the background; its output can be
// read while it runs, and done delivers its exit code.
func asyncStarter(ctx context.Context, f *fleet, args ...string) (out, errOut *syncbuf.Buffer, done <-chan int) {
	out, errOut = &syncbuf.Buffer{}, &syncbuf.Buffer{}
	ch := make(chan int, 1)
	go func() {
		ch <- cli.Execute(ctx, append([]string{"--config", f.cfgFile}, args...), strings.NewReader(""), out, errOut, nil)
	}()
	return out, errOut, ch
}

// waitOutput polls a running starter's output until it holds want, or
// fails the test when the starter ends or ctx does first.
func waitOutput(ctx context.Context, t *testing.T, out, errOut *syncbuf.Buffer, done <-chan int, want string) {
	t.Helper()
	for !strings.Contains(out.String(), want) {
		select {
		case code := <-done:
			t.Fatalf("the starter ended (exit %d) without saying %q:\n%s%s", code, want, out, errOut)
		case <-ctx.Done():
			t.Fatalf("the starter never said %q:\n%s%s", want, out, errOut)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A mirror that refuses ?blobs=true (its listing names the files only)
// and redirects LFS files to another host, reached through the starter's
// own HF_ENDPOINT (no hf_endpoint in the config): the starter says which
// endpoint it uses before the run starts, the endpoint travels in the
// run's input (the token does not), every file's size and etag come from
// a HEAD, and the tree is the Hub's layout with verified bytes.
func TestFetchFromAMirrorByHeadWithTheStartersEndpoint(t *testing.T) {
	s := hubtest.New(hubtest.Options{SeparateCDN: true})
	t.Cleanup(s.Close)
	files := hubFiles(t)
	sha := s.AddRepo(hubtest.Repo{ID: "org/mirrored", LFSThreshold: 64 << 10, Files: hubtestFiles(files)})
	s.SetListing(hubtest.ListingRefuseBlobs)
	f, hub := hostileFetchFleet(t, "", "org/mirrored")
	t.Setenv("HF_ENDPOINT", s.URL+"/")
	t.Setenv("HF_TOKEN", "hf_itest_never_in_history")
	ctx := withTimeout(t, 5*time.Minute)

	code, out, errOut := f.starter(ctx, "fetch", "--lane", "l")
	if code != 0 {
		t.Fatalf("fetch from a mirror without ?blobs=true: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("starter fetch:\n%s", out)
	said := "fetch endpoint: " + s.URL + " (this shell's HF_ENDPOINT"
	if i := strings.Index(out, said); i < 0 || i > strings.Index(out, "fetch org/mirrored") {
		t.Errorf("the endpoint was not printed before the run's steps (want %q)", said)
	}
	if !strings.Contains(out, fmt.Sprintf("the size and etag of %d files were read by a HEAD each", len(files))) {
		t.Errorf("the result does not say the files were read by HEAD")
	}
	checkHubTree(t, s, hub, "org/mirrored", sha, "main", "", files)
	h := historyText(t, f, contract.FetchID("l"))
	if !strings.Contains(h, s.URL) || strings.Contains(h, "hf_itest_never_in_history") {
		t.Errorf("the run's input does not carry the starter's endpoint, or it carries the token")
	}
	heads := 0
	for _, r := range s.Requests() {
		if r.Method == "HEAD" {
			heads++
		}
	}
	if heads != len(files) {
		t.Errorf("%d HEADs for %d files", heads, len(files))
	}
}

// A body that stalls (the connection open, nothing sent) under a short
// heartbeat timeout: the attempt aborts the stalled request itself and
// resumes it, so the heartbeat never lapses and no second attempt starts
// beside it (the double sees no listing while the body is held), and the
// result's totals are the truth: every byte downloaded once, by one
// attempt.
func TestFetchStalledBodyOneAttemptAtATime(t *testing.T) {
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	files := hubFiles(t)
	const stalled = "model-00001-of-00002.safetensors"
	sha := s.AddRepo(hubtest.Repo{ID: "org/stall", LFSThreshold: 64 << 10, Files: hubtestFiles(files)})
	held := s.Hold("org/stall", stalled, 1<<20)
	f, hub := hostileFetchFleet(t, fmt.Sprintf("hf_endpoint = %q\n", s.URL), "org/stall")
	ctx := withTimeout(t, 5*time.Minute)

	r, _ := f.lanePlan("l")
	fp, err := lane.FetchPlan(f.cfg, r, lane.FetchOptions{})
	if err != nil || fp == nil {
		t.Fatalf("fetch plan %+v, %v", fp, err)
	}
	const heartbeat = 6 * time.Second
	run, err := f.env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.FetchID("l"), TaskQueue: contract.ControlQueue},
		workflows.Fetch, contract.FetchInput{Plan: *fp, Heartbeat: contract.Duration(heartbeat)})
	if err != nil {
		t.Fatal(err)
	}
	var res contract.FetchResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("fetch with a stalled body: %v", err)
	}
	select {
	case <-held.Reached():
	default:
		t.Fatal("the body never stalled")
	}
	checkHubTree(t, s, hub, "org/stall", sha, "main", "", files)
	if n := s.HeldOverlaps(); n != 0 {
		t.Errorf("%d fetch attempts began while the stalled one's body was still open", n)
	}
	if n := activityAttemptsOf(t, f, contract.FetchID("l"), "FetchRepo"); n != 1 {
		t.Errorf("FetchRepo ran %d attempts: the stall outlived the heartbeat", n)
	}
	var total int64
	for _, b := range files {
		total += int64(len(b))
	}
	if got := res.Repos[0]; got.DownloadedBytes != total || got.ResumedBytes != 0 || got.ReusedFiles != 0 {
		t.Errorf("result: downloaded %d, resumed %d, reused %d; want all %d bytes downloaded by the one attempt", got.DownloadedBytes, got.ResumedBytes, got.ReusedFiles, total)
	}
	if served := s.Served("org/stall", stalled); served != int64(len(files[stalled])) {
		t.Errorf("the stalled file was served %d bytes for its %d", served, len(files[stalled]))
	}
}

// An endpoint answering the listing with a proxy's HTML page: while the
// fetch retries, the starter's progress says why (the heartbeat's retry
// reason, or the last attempt's failure) — not just "still running" —
// and once the endpoint answers as a Hub the fetch completes.
func TestFetchProgressSaysWhyItRetries(t *testing.T) {
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	files := hubFiles(t)
	sha := s.AddRepo(hubtest.Repo{ID: "org/proxied", LFSThreshold: 64 << 10, Files: hubtestFiles(files)})
	s.SetListing(hubtest.ListingHTML)
	f, hub := hostileFetchFleet(t, fmt.Sprintf("hf_endpoint = %q\n", s.URL), "org/proxied")
	ctx := withTimeout(t, 5*time.Minute)

	out, errOut, done := asyncStarter(ctx, f, "fetch", "--lane", "l")
	waitOutput(ctx, t, out, errOut, done, "retrying: ")
	waitOutput(ctx, t, out, errOut, done, "not the Hub's JSON")
	s.SetListing(hubtest.ListingHub)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("fetch after the endpoint recovered: exit %d\n%s%s", code, out, errOut)
		}
	case <-ctx.Done():
		t.Fatalf("the fetch never ended:\n%s%s", out, errOut)
	}
	t.Logf("starter fetch:\n%s", out)
	checkHubTree(t, s, hub, "org/proxied", sha, "main", "", files)
}

// `starter fetch` repeated while its run goes on (what people do after the
// control service died mid-fetch): with the same input it follows the
// running run, saying so in one line, and ends with it; with another input
// (one repo of the two) it is refused, naming what differs. The repo is
// downloaded once.
func TestRepeatedStarterFetchFollowsTheRunningRun(t *testing.T) {
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	a, b := hubFiles(t), hubFiles(t)
	shaA := s.AddRepo(hubtest.Repo{ID: "org/a", LFSThreshold: 64 << 10, Files: hubtestFiles(a)})
	shaB := s.AddRepo(hubtest.Repo{ID: "org/b", LFSThreshold: 64 << 10, Files: hubtestFiles(b)})
	const big = "model-00001-of-00002.safetensors"
	held := s.Hold("org/a", big, 1<<20)
	f, hub := hostileFetchFleet(t, fmt.Sprintf("hf_endpoint = %q\n", s.URL), "org/a", "org/b")
	ctx := withTimeout(t, 5*time.Minute)

	out1, err1, done1 := asyncStarter(ctx, f, "fetch", "--lane", "l")
	select {
	case <-held.Reached():
	case code := <-done1:
		t.Fatalf("the first fetch ended (exit %d) before its body stalled:\n%s%s", code, out1, err1)
	case <-ctx.Done():
		t.Fatal("the first fetch never reached the held body")
	}
	out2, err2, done2 := asyncStarter(ctx, f, "fetch", "--lane", "l")
	waitOutput(ctx, t, out2, err2, done2, "fetch/l is already running with the same input (run ")

	code, out3, errOut3 := f.starter(ctx, "fetch", "--lane", "l", "--repo", "org/b")
	if code != 3 || !strings.Contains(errOut3, "fetch/l is already running") || !strings.Contains(errOut3, "another input") || !strings.Contains(errOut3, "plan.repos") {
		t.Errorf("a fetch of another input while fetch/l runs: exit %d, want 3 naming the difference\n%s%s", code, out3, errOut3)
	}
	held.Release()
	for i, c := range []struct {
		out, err *syncbuf.Buffer
		done     <-chan int
	}{{out1, err1, done1}, {out2, err2, done2}} {
		select {
		case code := <-c.done:
			if code != 0 || !strings.Contains(c.out.String(), "org/a") || !strings.Contains(c.out.String(), "org/b") {
				t.Errorf("starter %d: exit %d\n%s%s", i+1, code, c.out, c.err)
			}
		case <-ctx.Done():
			t.Fatalf("starter %d never ended:\n%s%s", i+1, c.out, c.err)
		}
	}
	t.Logf("the repeated starter fetch:\n%s", out2)
	checkHubTree(t, s, hub, "org/a", shaA, "main", "", a)
	checkHubTree(t, s, hub, "org/b", shaB, "main", "", b)
	if served := s.Served("org/a", big); served != int64(len(a[big])) {
		t.Errorf("%s was served %d bytes for its %d: downloaded by two runs?", big, served, len(a[big]))
	}
	if _, err := os.Stat(filepath.Join(hub, "models--org--b")); err != nil {
		t.Errorf("org/b: %v", err)
	}
}
