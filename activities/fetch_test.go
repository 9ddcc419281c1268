package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
