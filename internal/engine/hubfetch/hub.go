package hubfetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
)

// hub talks to the Hub's HTTP API for one Request. Redirects are followed
// by hand (at most maxHops), so each hop's headers are seen and the token
// is sent only to the endpoint's own host.
type hub struct {
	r      *Request
	base   *url.URL
	client *http.Client
	rep    *reporter
}

const maxHops = 8

// DefaultReadIdle is Request.ReadIdle's default: how long a request may
// deliver nothing before it is aborted and retried.
const DefaultReadIdle = 2 * time.Minute

// Knobs a test turns down; the defaults suit a WAN and a CDN.
var (
	backoffBase = 500 * time.Millisecond
	backoffMax  = 15 * time.Second
	// readIdle is Request.ReadIdle's default: a body read that delivers
	// nothing for this long is aborted, so a stalled connection becomes a
	// retried, resumed transient error.
	readIdle = DefaultReadIdle
)

func newHub(r *Request) (*hub, error) {
	base, err := url.Parse(r.Endpoint)
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("hubfetch: endpoint %q: %w", r.Endpoint, err))
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   20 * time.Second,
		ResponseHeaderTimeout: min(time.Minute, r.ReadIdle),
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   r.ParallelFiles*r.ParallelRanges + 4,
		// The sizes and hashes are those of the bytes, not of an encoding.
		DisableCompression: true,
	}
	// HTTP/1.1 only: parallel ranges are worth something because each
	// is its own TCP stream (a CDN caps each one); HTTP/2 would multiplex
	// them onto one.
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	client := &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &hub{r: r, base: base, client: client, rep: &reporter{fn: r.Progress, chunk: r.ChunkSize}}, nil
}

// send makes one request, with the token only when u is on the endpoint's
// host (a CDN's signed URL needs none, and must not see it).
func (h *hub) send(ctx context.Context, method string, u *url.URL, rng string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "sparklane-hubfetch/1")
	req.Header.Set("Accept-Encoding", "identity")
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	if h.r.Token != "" && u.Scheme == h.base.Scheme && u.Host == h.base.Host {
		req.Header.Set("Authorization", "Bearer "+string(h.r.Token))
	}
	resp, err := h.client.Do(req)
	if err != nil {
		// url.Error carries the URL, never headers: the token stays out.
		return nil, err
	}
	return resp, nil
}

// listing is the revision's listing: its commit and its files.
type listing struct {
	SHA      string       `json:"sha"`
	Siblings []listedFile `json:"siblings"`
}

// listedFile is a sibling of GET /api/models/{repo}/revision/{rev}?blobs=true
// (without the parameter, or from a mirror that ignores it, only
// rfilename: fillMetadata then completes it).
type listedFile struct {
	RFilename string   `json:"rfilename"`
	Size      *int64   `json:"size"`
	BlobID    string   `json:"blobId"`
	LFS       *lfsInfo `json:"lfs"`
}

// lfsInfo is a listed LFS file's content hash and size.
type lfsInfo struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// revision lists the repo at the request's revision, with blob sizes and
// ids when the endpoint gives them (?blobs=true), following relative
// redirects (a renamed repo). An endpoint that refuses the parameter (400,
// 422) is asked again without it: the files' metadata then comes from a
// HEAD each (fillMetadata), as huggingface_hub's snapshot_download gets it.
func (h *hub) revision(ctx context.Context) (*listing, error) {
	base := fmt.Sprintf("%s/api/models/%s/revision/%s", h.r.Endpoint, h.r.Repo, url.PathEscape(h.r.Revision))
	u, err := url.Parse(base + "?blobs=true")
	if err != nil {
		return nil, fault.Permanent(fault.InvalidSpec, err)
	}
	var out *listing
	err = h.retry(ctx, "list "+h.what(), func() (bool, error) {
		var err error
		out, err = h.getListing(ctx, u)
		var refused *blobsRefused
		if errors.As(err, &refused) && u.RawQuery != "" {
			u.RawQuery = ""
			out, err = h.getListing(ctx, u)
		}
		return false, err
	})
	return out, err
}

// blobsRefused is an endpoint's refusal of ?blobs=true (HTTP 400 or 422).
type blobsRefused struct{ said string }

func (e *blobsRefused) Error() string { return "the endpoint refused ?blobs=true (" + e.said + ")" }

func (h *hub) getListing(ctx context.Context, u *url.URL) (*listing, error) {
	for range maxHops {
		resp, err := h.send(ctx, http.MethodGet, u, "")
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", h.what(), err)
		}
		if isRedirect(resp.StatusCode) {
			next, err := redirectTarget(u, resp)
			if err != nil {
				return nil, err
			}
			u = next
			continue
		}
		defer resp.Body.Close()
		if (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnprocessableEntity) && u.RawQuery != "" {
			return nil, &blobsRefused{said: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, hubMessage(resp))}
		}
		if resp.StatusCode != http.StatusOK {
			return nil, h.statusError(resp, "")
		}
		return h.decodeListing(resp)
	}
	return nil, fault.Permanent(HubBadResponse, fmt.Errorf("list %s: more than %d redirects", h.what(), maxHops))
}

// decodeListing reads a listing's JSON. An answer that is not JSON (a
// proxy's login page, a web server's index, a wrong endpoint) is a
// transient error that says what came back instead, so the progress line
// of a fetch that keeps retrying it says why.
func (h *hub) decodeListing(resp *http.Response) (*listing, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("list %s: read the listing: %w", h.what(), err)
	}
	var l listing
	if err := json.Unmarshal(body, &l); err != nil {
		head := strings.Join(strings.Fields(string(body[:min(len(body), 80)])), " ")
		return nil, fmt.Errorf("list %s: the answer is not the Hub's JSON (HTTP %d, Content-Type %q, begins %q: %v): is %s a Hub, or a mirror of its API? a proxy's login page answers like this",
			h.what(), resp.StatusCode, resp.Header.Get("Content-Type"), head, err, h.r.Endpoint)
	}
	return &l, nil
}

func isRedirect(code int) bool {
	return code == http.StatusMovedPermanently || code == http.StatusFound || code == http.StatusSeeOther ||
		code == http.StatusTemporaryRedirect || code == http.StatusPermanentRedirect
}

// redirectTarget resolves a 3xx's Location (relative ones against u) and
// closes the response.
func redirectTarget(u *url.URL, resp *http.Response) (*url.URL, error) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return nil, fault.Permanent(HubBadResponse, fmt.Errorf("GET %s: %d without a usable Location", u.Redacted(), resp.StatusCode))
	}
	return u.ResolveReference(loc), nil
}

// what names the request's repo and revision for messages.
func (h *hub) what() string {
	return fmt.Sprintf("repo %s at revision %s on %s", h.r.Repo, h.r.Revision, h.r.Endpoint)
}

// hubMessage is the Hub's explanation of an error: the X-Error-Message
// header, else the JSON body's "error".
func hubMessage(resp *http.Response) string {
	if m := resp.Header.Get("X-Error-Message"); m != "" {
		return m
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error any `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != nil {
		return fmt.Sprint(e.Error)
	}
	return strings.TrimSpace(string(b[:min(len(b), 300)]))
}

// statusError classifies a response the request cannot use: permanent
// for what a retry cannot fix (typed by what to do about it), transient
// for 408, 429 and 5xx. file is "" for repo-level requests.
func (h *hub) statusError(resp *http.Response, file string) error {
	code := resp.Header.Get("X-Error-Code")
	msg := hubMessage(resp)
	said := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if msg != "" {
		said += ", the Hub said: " + msg
	}
	token := "no token was sent: set HF_TOKEN (or log in with `hf auth login`, which writes the token file)"
	if h.r.Token != "" {
		token = "the token was sent"
		if h.r.TokenSource != "" {
			token += " (from " + h.r.TokenSource + ")"
		}
	}
	page := h.r.Endpoint + "/" + h.r.Repo
	st := resp.StatusCode
	switch {
	case st == http.StatusNotFound && code == "RevisionNotFound":
		return fault.Permanent(HubNotFound, fmt.Errorf("revision %q of repo %s not found on %s (%s): check the revision (a branch, tag or commit sha)", h.r.Revision, h.r.Repo, h.r.Endpoint, said))
	case st == http.StatusNotFound && (code == "EntryNotFound" || file != "" && code != "RepoNotFound"):
		return fault.Permanent(HubNotFound, fmt.Errorf("file %s of %s not found (%s): the Hub's listing named it; retry later or skip it", file, h.what(), said))
	case st == http.StatusNotFound:
		return fault.Permanent(HubNotFound, fmt.Errorf("repo %s not found on %s (%s): check the name; a private repo needs a token of an account that can read it", h.r.Repo, h.r.Endpoint, said))
	case code == "GatedRepo" || st == http.StatusForbidden && strings.Contains(strings.ToLower(msg), "gated"):
		return fault.Permanent(HubGated, fmt.Errorf("%s is gated (%s; %s): accept its license on %s with your account, then set HF_TOKEN to a token of that account", h.what(), said, token, page))
	case st == http.StatusUnauthorized:
		return fault.Permanent(HubUnauthorized, fmt.Errorf("%s: unauthorized (%s; %s): the repo is private or gated, or does not exist; use a token of an account that can read %s", h.what(), said, token, page))
	case st == http.StatusForbidden:
		return fault.Permanent(HubUnauthorized, fmt.Errorf("%s: forbidden (%s; %s): the token lacks read access to %s; use a token with read permission on it", h.what(), said, token, page))
	case st == http.StatusRequestTimeout || st == http.StatusTooManyRequests || st >= 500:
		return fmt.Errorf("%s: %s", h.what(), said)
	}
	return fault.Permanent(HubBadResponse, fmt.Errorf("%s, file %q: unexpected answer (%s)", h.what(), file, said))
}

// retry runs fn until it succeeds, fails permanently, the context ends,
// or MaxAttempts tries in a row failed transiently; a try that made
// progress (fn says so) starts the count again, so a flaky link slows a
// long download but does not fail it.
func (h *hub) retry(ctx context.Context, what string, fn func() (bool, error)) error {
	failures := 0
	for {
		progressed, err := fn()
		if err == nil {
			return nil
		}
		if _, perm := fault.TypeOf(err); perm || ctx.Err() != nil {
			return err
		}
		if progressed {
			failures = 0
		}
		failures++
		if failures >= h.r.MaxAttempts {
			return fmt.Errorf("%s: gave up after %d tries in a row: %w", what, failures, err)
		}
		why := err.Error()
		if !strings.HasPrefix(why, what) {
			why = what + ": " + why
		}
		h.rep.retrying(fmt.Sprintf("try %d of %d failed, retrying: %s", failures, h.r.MaxAttempts, why))
		d := min(backoffMax, backoffBase<<min(failures-1, 10))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}
