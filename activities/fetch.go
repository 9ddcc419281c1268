package activities

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/hubfetch"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/metrics"
)

// FetchActivities download Hub repos into the NAS (internal/engine/hubfetch) on
// the worker the config's fetch_node names: a node's worker (queue
// node.NAME) or the control service's (queue sparklane). The token is read
// here, on that worker, from the plan's token file or the environment; it
// never travels in an input, a heartbeat, a result or a log line.
type FetchActivities struct {
	// Where is "control" or the node's name (results, logs, metrics).
	Where string
	// Local maps a path as the recipe wrote it to this worker's view (a
	// node's fs_root; nil: as written).
	Local func(string) string
	Log   *zap.Logger
	// Metrics records sparklane_fetch_bytes_total (nil: none).
	Metrics *metrics.Metrics
	// Seams are a test's fault points (nil in production).
	Seams *Seams
}

// FetchRepo downloads one repo at its revision into its cache dir,
// heartbeating files and bytes as they land. All its state is on disk
// (*.incomplete files and their range bookkeeping), so a retry after a
// crash or a kill -9 resumes there, whatever the last heartbeat said.
// The Hub's and the NAS's refusals (401/403/404, a gated repo, a full or
// read-only NAS, a hash mismatch) are non-retryable errors of their
// hubfetch type; dropped connections and 5xx are retried.
func (a *FetchActivities) FetchRepo(ctx context.Context, in contract.FetchRepoInput) (contract.FetchRepoResult, error) {
	out := contract.FetchRepoResult{Node: a.Where, Block: in.Repo.Block, Repo: in.Repo.Repo, Revision: in.Repo.Revision, DryRun: in.DryRun}
	req, err := a.request(in)
	if err != nil {
		return out, classify(err)
	}
	var prev contract.FetchProgress
	if resumeFrom(ctx, &prev) {
		a.Log.Info("resuming fetch: partial downloads on disk are kept", zap.String("repo", in.Repo.Repo), zap.Int64("bytes_done", prev.BytesDone))
	}
	var counted int64
	req.Progress = func(p hubfetch.Progress) {
		a.Metrics.Fetched(in.Lane, in.Repo.Repo, p.Downloaded-counted)
		counted = p.Downloaded
		heartbeat(ctx, contract.FetchProgress{Repo: in.Repo.Repo, FilesTotal: p.Files, FilesDone: p.FilesDone, BytesTotal: p.Bytes, BytesDone: p.BytesDone, Downloaded: p.Downloaded})
		a.Seams.fetchProgress(ctx, in.Repo.Repo, p.Downloaded)
	}
	start := time.Now()
	var r hubfetch.Result
	if in.DryRun {
		r, err = hubfetch.Plan(ctx, req)
	} else {
		heartbeat(ctx, contract.FetchProgress{Repo: in.Repo.Repo})
		a.Seams.fetchProgress(ctx, in.Repo.Repo, 0)
		r, err = hubfetch.Fetch(ctx, req)
	}
	out.Seconds = time.Since(start).Seconds()
	out.Commit, out.SnapshotDir = r.Commit, r.SnapshotDir
	out.Files, out.Bytes, out.SkippedFiles, out.SkippedBytes = r.Files, r.Bytes, r.SkippedFiles, r.SkippedBytes
	out.MissingFiles, out.MissingBytes = r.MissingFiles, r.MissingBytes
	out.DownloadedFiles, out.DownloadedBytes, out.ResumedBytes, out.ReusedFiles = r.DownloadedFiles, r.DownloadedBytes, r.ResumedBytes, r.ReusedFiles
	if err != nil {
		return out, classify(fmt.Errorf("fetch %s at %s into %s on %s: %w", in.Repo.Repo, in.Repo.Revision, req.CacheDir, a.Where, err))
	}
	a.Log.Info("fetched", zap.String("repo", in.Repo.Repo), zap.String("commit", r.Commit), zap.Int64("downloaded", r.DownloadedBytes),
		zap.Int64("resumed", r.ResumedBytes), zap.Int("reused_files", r.ReusedFiles), zap.Bool("dry_run", in.DryRun))
	return out, nil
}

// request is the engine's request for in: the endpoint (the plan's, else
// this worker's HF_ENDPOINT, else the public Hub) and the token (the
// plan's token file on this host, else this worker's environment).
func (a *FetchActivities) request(in contract.FetchRepoInput) (hubfetch.Request, error) {
	req := hubfetch.Request{Endpoint: in.Endpoint, CacheDir: in.Repo.CacheDir, Repo: in.Repo.Repo, Revision: in.Repo.Revision, Skip: in.Repo.Skip}
	if a.Local != nil {
		req.CacheDir = a.Local(req.CacheDir)
	}
	if req.Endpoint == "" {
		req.Endpoint = hubfetch.EndpointFromEnv()
	}
	if in.TokenFile != "" {
		b, err := os.ReadFile(in.TokenFile)
		if err != nil {
			return req, fault.Permanent(fault.InvalidSpec, fmt.Errorf("hf_token_file %s on %s: %w: put the Hub token there (readable by the worker's user) or remove hf_token_file to use HF_TOKEN", in.TokenFile, a.Where, err))
		}
		req.Token, req.TokenSource = hubfetch.Secret(strings.TrimSpace(string(b))), in.TokenFile
		return req, nil
	}
	tok, src, err := hubfetch.TokenFromEnv()
	if err != nil {
		return req, fault.Permanent(fault.InvalidSpec, fmt.Errorf("on %s: %w: make it readable by the worker's user, or set hf_token_file", a.Where, err))
	}
	req.Token, req.TokenSource = tok, src
	return req, nil
}
