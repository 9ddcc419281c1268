package lane

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// DefaultRevision is what a hub-mirror block that pins no revision is
// fetched at: the Hub's default branch.
const DefaultRevision = "main"

// FetchOptions choose which of a lane's hub-mirror repos a fetch plan
// holds.
type FetchOptions struct {
	// Repo keeps only this repo ("": every repo).
	Repo string
	// MarkedOnly keeps only blocks with fetch = true (what a stage without
	// --fetch fetches first).
	MarkedOnly bool
	// Endpoint is the HF_ENDPOINT of the shell that asks (the starter's):
	// the plan's endpoint when the config sets no hf_endpoint, so the
	// fetch goes where `hf download` in that shell would, whatever the
	// fetching worker's environment says.
	Endpoint string
}

// FetchPlan resolves what `starter fetch` (or a stage that fetches first)
// downloads for lane r: each repo of its hub-mirror blocks at the block's
// revision, into the block's src, with its skip globs; and which worker
// fetches (fetch_node), from which endpoint (hf_endpoint, else
// o.Endpoint), with which token file. It reads no files. nil, nil: nothing to fetch (no block qualifies).
func FetchPlan(cfg *config.Config, r *contract.Recipe, o FetchOptions) (*contract.FetchPlan, error) {
	bad := func(format string, a ...any) (*contract.FetchPlan, error) {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf(format, a...))
	}
	p := &contract.FetchPlan{Lane: r.Name, Endpoint: cfg.HFEndpoint, TokenFile: cfg.HFTokenFile}
	if p.Endpoint == "" {
		p.Endpoint = strings.TrimRight(strings.TrimSpace(o.Endpoint), "/")
		if e := p.Endpoint; e != "" && !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
			return bad("HF_ENDPOINT %q is not an http(s) URL: set it to the Hub's (or the mirror's) base URL, like \"https://huggingface.co\", or set hf_endpoint in %s", o.Endpoint, cfg.File)
		}
	}
	if n := cfg.FetchNode; n != "" && n != config.FetchControl {
		if cfg.Node(n) == nil {
			return bad("%s: fetch_node: unknown node %q: name a node that mounts the NAS, or %q", cfg.File, n, config.FetchControl)
		}
		p.Node = n
	}
	found := false
	for i, b := range r.Staging {
		if b.Kind != "hub-mirror" || o.MarkedOnly && !b.Fetch {
			continue
		}
		rev := b.Revision
		if rev == "" {
			rev = DefaultRevision
		}
		for _, repo := range b.Repos {
			if o.Repo != "" && repo != o.Repo {
				continue
			}
			found = true
			src := StagingSrc(cfg, b.Src)
			if !filepath.IsAbs(src) {
				return bad("%s: staging[%d].src: %q is not absolute: a fetched block needs the NAS hub root it downloads into", r.File, i, src)
			}
			p.Repos = append(p.Repos, contract.FetchRepo{Block: b.ID, Repo: repo, Revision: rev, CacheDir: filepath.Clean(src), Skip: b.Skip})
		}
	}
	if o.Repo != "" && !found {
		var all []string
		for _, b := range r.Staging {
			if b.Kind == "hub-mirror" {
				all = append(all, b.Repos...)
			}
		}
		slices.Sort(all)
		return bad("lane %s (%s): --repo %s is not a repo of its hub-mirror blocks (repos: %v)", r.Name, r.File, o.Repo, slices.Compact(all))
	}
	if len(p.Repos) == 0 {
		return nil, nil
	}
	return p, nil
}
