package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
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

	// testTimers, set by this package's tests, replaces the read-idle and
	// stall bounds FetchRepo derives from its heartbeat timeout;
	// testBeat sees every heartbeat's details (the SDK throttles what a
	// test environment's listener gets to one per 30 s).
	testTimers func() (readIdle, stall time.Duration)
	testBeat   func(contract.FetchProgress)
	// Seams are a test's fault points (nil in production).
	Seams *Seams
}

// FetchRepo downloads one repo at its revision into its cache dir,
// heartbeating files and bytes as they land (and, while it retries a
// request, why). All its state is on disk (*.incomplete files and their
// range bookkeeping), so a retry after a crash or a kill -9 resumes there,
// whatever the last heartbeat said. The Hub's and the NAS's refusals
// (401/403/404, a gated repo, a full or read-only NAS, a hash mismatch)
// are non-retryable errors of their hubfetch type; dropped connections
// and 5xx are retried.
//
// An attempt never outlives its heartbeat: requests that deliver nothing
// for 2/5 of the heartbeat timeout (at most hubfetch.DefaultReadIdle) are
// aborted and resumed within the attempt, and an engine silent for 4/5 of
// it has its context ended, so the attempt reports its failure before the
// timeout lapses and Temporal never starts the next attempt beside a live
// one (the result's byte totals are then those of one attempt's work).
func (a *FetchActivities) FetchRepo(ctx context.Context, in contract.FetchRepoInput) (contract.FetchRepoResult, error) {
	out := contract.FetchRepoResult{Node: a.Where, Block: in.Repo.Block, Repo: in.Repo.Repo, Revision: in.Repo.Revision, DryRun: in.DryRun}
	req, err := a.request(in)
	if err != nil {
		return out, classify(err)
	}
	out.Endpoint = req.Endpoint
	var prev contract.FetchProgress
	if resumeFrom(ctx, &prev) {
		a.Log.Info("resuming fetch: partial downloads on disk are kept", zap.String("repo", in.Repo.Repo), zap.Int64("bytes_done", prev.BytesDone))
	}
	idle, stall := a.timers(ctx)
	req.ReadIdle = idle
	fctx, watch := watchStall(ctx, stall)
	defer watch.stop()
	var counted int64
	req.Progress = func(p hubfetch.Progress) {
		watch.poke(p.Retry)
		a.Metrics.Fetched(in.Lane, in.Repo.Repo, p.Downloaded-counted)
		counted = p.Downloaded
		d := contract.FetchProgress{Repo: in.Repo.Repo, FilesTotal: p.Files, FilesDone: p.FilesDone, BytesTotal: p.Bytes, BytesDone: p.BytesDone, Downloaded: p.Downloaded,
			Retry: p.Retry, HeadDone: p.HeadDone, HeadFiles: p.HeadFiles}
		heartbeat(ctx, d)
		if a.testBeat != nil {
			a.testBeat(d)
		}
		a.Seams.fetchProgress(ctx, in.Repo.Repo, p.Downloaded)
	}
	a.Log.Info("fetching", zap.String("repo", in.Repo.Repo), zap.String("revision", in.Repo.Revision), zap.String("endpoint", req.Endpoint), zap.Duration("read_idle", idle), zap.Duration("stall_abort", stall))
	start := time.Now()
	var r hubfetch.Result
	if in.DryRun {
		r, err = hubfetch.Plan(fctx, req)
	} else {
		heartbeat(ctx, contract.FetchProgress{Repo: in.Repo.Repo})
		a.Seams.fetchProgress(ctx, in.Repo.Repo, 0)
		r, err = hubfetch.Fetch(fctx, req)
	}
	out.Seconds = time.Since(start).Seconds()
	fillFetchResult(&out, r)
	if err != nil {
		err = fmt.Errorf("fetch %s at %s into %s on %s from %s: %w", in.Repo.Repo, in.Repo.Revision, req.CacheDir, a.Where, req.Endpoint, err)
		if serr := watch.stalled(); serr != nil && ctx.Err() == nil {
			return out, temporal.NewApplicationError(fmt.Sprintf("%v; the engine then said: %v", serr, err), "FetchStalled")
		}
		return out, classify(err)
	}
	a.Log.Info("fetched", zap.String("repo", in.Repo.Repo), zap.String("commit", r.Commit), zap.Int64("downloaded", r.DownloadedBytes),
		zap.Int64("resumed", r.ResumedBytes), zap.Int("reused_files", r.ReusedFiles), zap.Int("head_files", r.HeadFiles), zap.Bool("dry_run", in.DryRun))
	return out, nil
}

// fillFetchResult copies what the engine found and did into out.
func fillFetchResult(out *contract.FetchRepoResult, r hubfetch.Result) {
	out.Commit, out.SnapshotDir = r.Commit, r.SnapshotDir
	out.Files, out.Bytes, out.SkippedFiles, out.SkippedBytes = r.Files, r.Bytes, r.SkippedFiles, r.SkippedBytes
	out.MissingFiles, out.MissingBytes = r.MissingFiles, r.MissingBytes
	out.DownloadedFiles, out.DownloadedBytes, out.ResumedBytes, out.ReusedFiles = r.DownloadedFiles, r.DownloadedBytes, r.ResumedBytes, r.ReusedFiles
	out.HeadFiles = r.HeadFiles
	if r.Endpoint != "" {
		out.Endpoint = r.Endpoint
	}
}

// timers are an attempt's read-idle and stall bounds (fetchTimers of its
// heartbeat timeout; the test's when set).
func (a *FetchActivities) timers(ctx context.Context) (readIdle, stall time.Duration) {
	if a.testTimers != nil {
		return a.testTimers()
	}
	var hb time.Duration
	if activity.IsActivity(ctx) {
		hb = activity.GetInfo(ctx).HeartbeatTimeout
	}
	return fetchTimers(hb)
}

// fetchTimers are the bounds a FetchRepo attempt keeps under its
// heartbeat timeout hb: a request that delivers nothing for readIdle (2/5
// of hb, at most hubfetch.DefaultReadIdle) is aborted and retried by the
// engine within the attempt; an engine silent for stall (4/5 of hb: no
// progress and no retry, stuck off the network) has its attempt ended,
// leaving a fifth of hb for the failure to reach the server before the
// heartbeat lapses. Without a heartbeat timeout: the engine's default and
// no stall bound.
func fetchTimers(hb time.Duration) (readIdle, stall time.Duration) {
	if hb <= 0 {
		return hubfetch.DefaultReadIdle, 0
	}
	return min(hubfetch.DefaultReadIdle, hb*2/5), hb * 4 / 5
}

// stallWatch ends a fetch's context when it reports nothing (no progress,
// no retry) for its bound, recording why.
type stallWatch struct {
	d      time.Duration
	t      *time.Timer
	cancel context.CancelCauseFunc
	ctx    context.Context

	mu        sync.Mutex
	lastRetry string
}

// watchStall derives the fetch's context from parent; with d <= 0 it
// never ends it.
func watchStall(parent context.Context, d time.Duration) (context.Context, *stallWatch) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &stallWatch{d: d, cancel: cancel, ctx: ctx}
	if d > 0 {
		w.t = time.AfterFunc(d, func() {
			w.mu.Lock()
			why := w.lastRetry
			w.mu.Unlock()
			msg := fmt.Sprintf("no progress for %s (4/5 of the heartbeat timeout): this attempt ended itself so that the next one starts alone, resuming from the bytes on disk", d)
			if why != "" {
				msg += "; the last retry: " + why
			}
			cancel(errors.New(msg))
		})
	}
	return ctx, w
}

// poke says the fetch is alive, with its last retry's reason.
func (w *stallWatch) poke(retry string) {
	if w.t == nil {
		return
	}
	w.mu.Lock()
	if retry != "" {
		w.lastRetry = retry
	}
	w.mu.Unlock()
	w.t.Reset(w.d)
}

// stalled is why the watch ended the fetch, or nil.
func (w *stallWatch) stalled() error {
	if w.ctx.Err() == nil {
		return nil
	}
	if c := context.Cause(w.ctx); c != nil && !errors.Is(c, context.Canceled) && !errors.Is(c, context.DeadlineExceeded) {
		return c
	}
	return nil
}

func (w *stallWatch) stop() {
	if w.t != nil {
		w.t.Stop()
	}
	w.cancel(nil)
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
