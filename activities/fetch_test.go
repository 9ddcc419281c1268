package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/hubfetch"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

// FetchRepo against the Hub double: the token is read from the plan's
// token file on the worker; without it the gated repo's 401 is a
// non-retryable HubUnauthorized naming the repo; a dry run writes nothing.
func TestFetchRepoTokenFileAndErrors(t *testing.T) {
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	s.AddRepo(hubtest.Repo{ID: "org/private", Token: "hf_secret", Files: []hubtest.File{{Path: "config.json", Data: []byte(`{"a": 1}`)}, {Path: "w.bin", Size: 3 << 20, Seed: 7, LFS: true}}})
	cache := t.TempDir()
	a := &FetchActivities{Where: "control", Log: zap.NewNop()}
	in := contract.FetchRepoInput{Lane: "l", Repo: contract.FetchRepo{Block: "w", Repo: "org/private", Revision: "main", CacheDir: cache}, Endpoint: s.URL}

	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(t.TempDir(), "none"))
	_, err := a.FetchRepo(context.Background(), in)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != hubfetch.HubUnauthorized || !app.NonRetryable() || !strings.Contains(err.Error(), "org/private") {
		t.Fatalf("no token: %v", err)
	}

	tok := filepath.Join(t.TempDir(), "hf-token")
	if err := os.WriteFile(tok, []byte("hf_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in.TokenFile = tok
	in.DryRun = true
	r, err := a.FetchRepo(context.Background(), in)
	if err != nil || r.MissingFiles != 2 || r.MissingBytes < 3<<20 || r.DownloadedBytes != 0 {
		t.Fatalf("dry run: %+v, %v", r, err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Fatalf("the dry run wrote %v", ents)
	}
	in.DryRun = false
	r, err = a.FetchRepo(context.Background(), in)
	if err != nil || r.Files != 2 || r.DownloadedBytes != r.Bytes || len(r.Commit) != 40 {
		t.Fatalf("fetch with the token file: %+v, %v", r, err)
	}
	if strings.Contains(strings.Join([]string{r.SnapshotDir, r.Commit}, " "), "hf_secret") {
		t.Fatal("the token leaked into the result")
	}

	in.TokenFile = filepath.Join(t.TempDir(), "missing")
	if _, err := a.FetchRepo(context.Background(), in); !errors.As(err, &app) || !app.NonRetryable() || !strings.Contains(err.Error(), "hf_token_file "+in.TokenFile+" on control") {
		t.Fatalf("a missing token file: %v", err)
	}
}

// fetchRepoInput fetches repo of the double s into cache.
func fetchRepoInput(s *hubtest.Server, repo, cache string) contract.FetchRepoInput {
	return contract.FetchRepoInput{Lane: "l", Repo: contract.FetchRepo{Block: "w", Repo: repo, Revision: "main", CacheDir: cache}, Endpoint: s.URL}
}

// While FetchRepo retries a request, its heartbeat says why (what the
// starter's progress line shows): here a listing answered with a proxy's
// HTML page, until the endpoint answers as a Hub again.
func TestFetchRepoHeartbeatsWhyItRetries(t *testing.T) {
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	s.AddRepo(hubtest.Repo{ID: "org/m", Files: []hubtest.File{{Path: "config.json", Data: []byte(`{"a": 1}`)}}})
	s.SetListing(hubtest.ListingHTML)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(t.TempDir(), "none"))
	var why []string
	a := &FetchActivities{Where: "control", Log: zap.NewNop(), testBeat: func(p contract.FetchProgress) {
		if p.Retry != "" {
			why = append(why, p.Retry)
			s.SetListing(hubtest.ListingHub) // the proxy lets it through now
		}
	}}
	r, err := a.FetchRepo(context.Background(), fetchRepoInput(s, "org/m", t.TempDir()))
	if err != nil {
		t.Fatalf("fetch after the endpoint recovered: %v", err)
	}
	if r.Files != 1 || r.Endpoint != s.URL {
		t.Fatalf("result %+v", r)
	}
	if len(why) != 1 || !strings.Contains(why[0], "not the Hub's JSON") || !strings.Contains(why[0], "text/html") || !strings.Contains(why[0], "try 1 of") {
		t.Fatalf("heartbeats said %q while the listing was retried, want the reason", why)
	}
}

// A FetchRepo attempt whose engine reports nothing for its stall bound
// (here a body held open, with the read-idle abort set beyond the bound)
// ends itself with a retryable FetchStalled error — its request closed,
// before its heartbeat would lapse — and the next attempt resumes the
// bytes on disk: the totals add up to the repo's size, counted once.
func TestFetchRepoEndsAStalledAttempt(t *testing.T) {
	const size = 3 << 20
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	s.AddRepo(hubtest.Repo{ID: "org/m", Files: []hubtest.File{{Path: "config.json", Data: []byte(`{"a": 1}`)}, {Path: "w.bin", Size: size, Seed: 9, LFS: true}}})
	held := s.Hold("org/m", "w.bin", size/3)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(t.TempDir(), "none"))
	a := &FetchActivities{Where: "control", Log: zap.NewNop(),
		testTimers: func() (time.Duration, time.Duration) { return time.Hour, 300 * time.Millisecond }}
	in := fetchRepoInput(s, "org/m", t.TempDir())
	_, err := a.FetchRepo(context.Background(), in)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != "FetchStalled" || app.NonRetryable() || !strings.Contains(err.Error(), "no progress for 300ms") {
		t.Fatalf("a stalled attempt: %v, want a retryable FetchStalled naming the bound", err)
	}
	<-held.Reached()
	// The attempt closed its request: the double sees the client gone.
	deadline := time.Now().Add(30 * time.Second)
	for s.Holding() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled attempt returned with its request still open")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r, err := a.FetchRepo(context.Background(), in)
	if err != nil {
		t.Fatalf("the next attempt: %v", err)
	}
	if r.ResumedBytes != size/3 || r.DownloadedBytes+r.ResumedBytes != size || r.ReusedFiles != 1 {
		t.Fatalf("next attempt: downloaded %d, resumed %d, reused %d of %d bytes: want the held bytes resumed and the rest downloaded", r.DownloadedBytes, r.ResumedBytes, r.ReusedFiles, r.Bytes)
	}
}

// The bounds an attempt keeps under its heartbeat timeout: the read-idle
// abort first, then the stall abort, both before the heartbeat lapses.
func TestFetchTimersStayUnderTheHeartbeat(t *testing.T) {
	if idle, stall := fetchTimers(0); idle != hubfetch.DefaultReadIdle || stall != 0 {
		t.Fatalf("no heartbeat timeout: %s, %s", idle, stall)
	}
	for _, hb := range []time.Duration{3 * time.Second, time.Minute, 5 * time.Minute, time.Hour} {
		idle, stall := fetchTimers(hb)
		if idle <= 0 || idle >= stall || stall >= hb || idle > hubfetch.DefaultReadIdle {
			t.Errorf("heartbeat %s: read-idle %s, stall %s", hb, idle, stall)
		}
	}
	if idle, _ := fetchTimers(5 * time.Minute); idle != hubfetch.DefaultReadIdle {
		t.Errorf("the default heartbeat shortens the read-idle abort to %s", idle)
	}
}
