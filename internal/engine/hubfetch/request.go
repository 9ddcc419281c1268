package hubfetch

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// Permanent fault types of this engine (fault.Permanent). Workflows branch
// on these, never on message text; every other error is transient.
const (
	// HubNotFound: the repo, the revision or a file does not exist (or is
	// private and no token was given: the Hub answers both alike).
	HubNotFound = "HubNotFound"
	// HubUnauthorized: the Hub refused the token, or a token is needed.
	HubUnauthorized = "HubUnauthorized"
	// HubGated: the repo is gated and the token's account has not been
	// granted access: accept the license on the repo's page.
	HubGated = "HubGated"
	// HubContentMismatch: downloaded bytes do not hash to what the Hub
	// announces (or the Hub contradicts its own listing).
	HubContentMismatch = "HubContentMismatch"
	// HubBadResponse: the Hub (or the endpoint standing in for it) answered
	// something this engine cannot use safely: a listing without sizes, a
	// file name leaving the snapshot, an unexpected 4xx.
	HubBadResponse = "HubBadResponse"
	// NASFull: the cache dir's filesystem lacks the space the download
	// needs (checked before writing, and on ENOSPC while writing).
	NASFull = "NASFull"
	// NASReadOnly: the cache dir's filesystem is mounted read-only.
	NASReadOnly = "NASReadOnly"
	// NASPermissionDenied: the worker's user may not write the cache dir.
	NASPermissionDenied = "NASPermissionDenied"
)

// DefaultEndpoint is the public Hub, used when Request.Endpoint is empty.
const DefaultEndpoint = contract.DefaultHubEndpoint

// Secret is a token. It prints and marshals as "<redacted>", so logging a
// Request or sending it through a workflow history cannot leak it; it is
// only ever put in the Authorization header.
type Secret string

// String redacts the token in %v and %s.
func (Secret) String() string { return "<redacted>" }

// GoString redacts the token in %#v.
func (Secret) GoString() string { return `"<redacted>"` }

// MarshalJSON redacts the token in JSON (a workflow input, a log line).
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"<redacted>"`), nil }

// MarshalText redacts the token in text encodings.
func (Secret) MarshalText() ([]byte, error) { return []byte("<redacted>"), nil }

// Request is one fetch: a repo at a revision into a hub cache dir. The
// zero value of each tuning field picks its default. Everything a retry
// needs is on disk, so the same Request resumes a killed fetch.
type Request struct {
	// Endpoint is the Hub's base URL (DefaultEndpoint when empty; see
	// EndpointFromEnv for HF_ENDPOINT).
	Endpoint string
	// Token authorizes private and gated repos. Read it on the worker with
	// TokenFromEnv rather than passing it through a workflow input.
	Token Secret
	// TokenSource says where Token came from ("HF_TOKEN", a file path), so
	// a refusal can name what to fix without naming the token.
	TokenSource string
	// CacheDir is the hub cache root (hf_cache_dir): the repo lands in
	// CacheDir/models--ORG--NAME/{blobs,snapshots,refs}.
	CacheDir string
	// Repo is "org/name" (or a bare "name").
	Repo string
	// Revision is a branch, a tag or a commit sha ("main" when empty). The
	// fetch pins it to one commit before downloading anything.
	Revision string
	// Skip are doublestar globs matched against each file's path in the
	// repo, as hub-mirror's skip matches paths under snapshots/REV/; a
	// matching file is never requested.
	Skip []string
	// ParallelFiles bounds the files downloaded at once (default 4).
	ParallelFiles int
	// ParallelRanges bounds the ranges of one large file downloaded at once
	// (default 4). Files of at most ChunkSize are one request.
	ParallelRanges int
	// ChunkSize is the unit of a range request, of resume bookkeeping and
	// of progress reports (default 64 MiB).
	ChunkSize int64
	// MaxAttempts bounds the tries of each HTTP request against transient
	// failures (5xx, 429, dropped connections) before the fetch returns a
	// transient error (default 5; 1 means no retry). A try that received
	// bytes does not use one up.
	MaxAttempts int
	// VerifyExisting re-hashes blobs already complete in the cache instead
	// of trusting their size (see Result.ReusedFiles).
	VerifyExisting bool
	// ReadIdle bounds how long a request may deliver nothing — its
	// response's headers (at most a minute), or its body's next byte —
	// before it is aborted and retried from the bytes on disk (default 2
	// minutes). A wrapper whose liveness check is shorter (a heartbeat
	// timeout) sets it below that, so a stall is handled here, in one
	// attempt, not by a second attempt started beside it.
	ReadIdle time.Duration
	// Progress, when set, is called with the running totals after each
	// chunk (at least every second while bytes land) and each finished
	// file, after each HEAD of the metadata
	// fallback, and each time a request is retried, one call at a time,
	// from the fetch's goroutines: report it as a heartbeat. It must
	// return quickly. A fetch that stays silent longer than ReadIdle plus
	// the retry backoff is stuck outside the network (a hung disk).
	Progress func(Progress)
}

// Progress is the running total of a fetch; Bytes counts what is in place
// (already present, resumed, or downloaded), so it never goes backwards.
type Progress struct {
	Files, FilesDone int
	Bytes, BytesDone int64
	// Downloaded counts the bytes received over HTTP in this call.
	Downloaded int64
	// Retry is why the last retried request failed (which request, which
	// try, the error), until bytes arrive again: what a progress line
	// shows while a fetch retries.
	Retry string
	// HeadDone of HeadFiles files had their size and etag read by a HEAD
	// (the listing carried none: see Result.HeadFiles).
	HeadDone, HeadFiles int
}

// Result says what a fetch found and did.
type Result struct {
	Repo, Revision string
	// Commit is the sha the revision resolved to; SnapshotDir is
	// CacheDir/models--ORG--NAME/snapshots/Commit.
	Commit      string
	SnapshotDir string
	// Files and Bytes are the snapshot's files that were not skipped.
	Files int
	Bytes int64
	// SkippedFiles and SkippedBytes matched a Skip glob.
	SkippedFiles int
	SkippedBytes int64
	// DownloadedFiles are blobs fetched (in whole or in part) and put in
	// place by this call; DownloadedBytes were received over HTTP.
	DownloadedFiles int
	DownloadedBytes int64
	// ResumedBytes were kept from *.incomplete files of an earlier call.
	ResumedBytes int64
	// ReusedFiles were blobs already complete (by size, or by hash with
	// VerifyExisting).
	ReusedFiles int
	// RefWritten: refs/Revision was created or updated to Commit.
	RefWritten bool
	// MissingFiles and MissingBytes are what the cache lacked when the
	// fetch began: files whose blob was not complete, and the bytes still
	// to download (less what partial downloads hold). Plan reports them
	// without fetching.
	MissingFiles int
	MissingBytes int64
	// Endpoint is the Hub the fetch used (Request.Endpoint, or
	// DefaultEndpoint).
	Endpoint string
	// HeadFiles is how many files had their size and etag read by a HEAD
	// of their /resolve URL, as huggingface_hub's snapshot_download does,
	// because the endpoint's listing carried no file metadata (it ignored
	// or refused ?blobs=true). Skipped files are never asked, so
	// SkippedBytes does not count them then.
	HeadFiles int
}

// Defaults of the tuning fields.
const (
	defaultParallelFiles  = 4
	defaultParallelRanges = 4
	defaultChunkSize      = 64 << 20
	defaultMaxAttempts    = 5
)

// A repo id: one or two names of letters, digits, '-', '_', '.'.
var repoPattern = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$`)

// withDefaults validates r and fills in its defaults.
func (r Request) withDefaults() (Request, error) {
	invalid := func(format string, a ...any) (Request, error) {
		return r, fault.Permanent(fault.InvalidSpec, fmt.Errorf("hubfetch: "+format, a...))
	}
	if r.Endpoint == "" {
		r.Endpoint = DefaultEndpoint
	}
	r.Endpoint = strings.TrimRight(r.Endpoint, "/")
	if !strings.HasPrefix(r.Endpoint, "https://") && !strings.HasPrefix(r.Endpoint, "http://") {
		return invalid("endpoint %q is not an http(s) URL", r.Endpoint)
	}
	if !repoPattern.MatchString(r.Repo) || strings.Contains(r.Repo, "..") || strings.Contains(r.Repo, "--") {
		return invalid("repo %q: want org/name", r.Repo)
	}
	if r.Revision == "" {
		r.Revision = "main"
	}
	if err := checkRelPath(r.Revision); err != nil {
		return invalid("revision %q: %v", r.Revision, err)
	}
	if r.CacheDir == "" || !filepath.IsAbs(r.CacheDir) {
		return invalid("cache dir %q: want an absolute path (hf_cache_dir)", r.CacheDir)
	}
	r.CacheDir = filepath.Clean(r.CacheDir)
	for _, g := range r.Skip {
		if !doublestar.ValidatePattern(g) {
			return invalid("skip glob %q is not a valid pattern", g)
		}
	}
	if r.ParallelFiles <= 0 {
		r.ParallelFiles = defaultParallelFiles
	}
	if r.ParallelRanges <= 0 {
		r.ParallelRanges = defaultParallelRanges
	}
	if r.ChunkSize <= 0 {
		r.ChunkSize = defaultChunkSize
	}
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = defaultMaxAttempts
	}
	if r.ReadIdle <= 0 {
		r.ReadIdle = readIdle
	}
	return r, nil
}

// checkRelPath accepts a slash-separated relative path whose components
// are real names: no "", ".", "..", backslash or NUL, so it cannot leave
// the directory it is joined to.
func checkRelPath(p string) error {
	if p == "" || strings.ContainsAny(p, "\\\x00") {
		return fmt.Errorf("empty, or has a backslash or NUL")
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("component %q would leave its directory", c)
		}
	}
	return nil
}

// skipped says whether a skip glob matches path (the file's path in the
// repo), with hub-mirror's semantics: doublestar.Match on the whole path.
func (r *Request) skipped(path string) bool {
	for _, g := range r.Skip {
		if ok, _ := doublestar.Match(g, path); ok {
			return true
		}
	}
	return false
}
