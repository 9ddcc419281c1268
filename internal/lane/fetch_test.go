package lane

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// FetchPlan holds each hub-mirror repo at its block's revision (main when
// none), into the block's src with its skip globs, on the fetch node.
func TestFetchPlan(t *testing.T) {
	cfg := simFleet(t)
	cfg.HFEndpoint, cfg.HFTokenFile, cfg.FetchNode = "http://127.0.0.1:9", "/etc/hf-token", cfg.Nodes[1].Name
	r := &contract.Recipe{File: "lane.toml", Name: "demo", Staging: []contract.Staging{
		{Kind: "hub-mirror", ID: "w", Src: "/nas/hub/", Repos: []string{"org/a", "org/b"}, Skip: []string{"page15/**"}, Revision: "abc", Fetch: true},
		{Kind: "sparse-rows", ID: "e", Src: "/nas/t"},
		{Kind: "hub-mirror", ID: "x", Src: "/nas/hub", Repos: []string{"org/c"}},
	}}
	p, err := FetchPlan(cfg, r, FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Node != cfg.Nodes[1].Name || p.Endpoint != "http://127.0.0.1:9" || p.TokenFile != "/etc/hf-token" || len(p.Repos) != 3 {
		t.Fatalf("plan %+v", p)
	}
	if a, c := p.Repos[0], p.Repos[2]; a.Repo != "org/a" || a.Revision != "abc" || a.CacheDir != "/nas/hub" || a.Skip[0] != "page15/**" || c.Revision != DefaultRevision || c.Block != "x" {
		t.Fatalf("repos %+v", p.Repos)
	}
	if p, _ := FetchPlan(cfg, r, FetchOptions{MarkedOnly: true}); p == nil || len(p.Repos) != 2 {
		t.Fatalf("marked only: %+v", p)
	}
	if p, _ := FetchPlan(cfg, r, FetchOptions{Repo: "org/c"}); p == nil || len(p.Repos) != 1 || p.Repos[0].Repo != "org/c" {
		t.Fatalf("--repo org/c: %+v", p)
	}
	if _, err := FetchPlan(cfg, r, FetchOptions{Repo: "org/z"}); err == nil || !strings.Contains(err.Error(), "--repo org/z is not a repo of its hub-mirror blocks (repos: [org/a org/b org/c])") {
		t.Fatalf("--repo org/z: %v", err)
	}
	cfg.FetchNode = config.FetchControl
	if p, _ := FetchPlan(cfg, r, FetchOptions{}); p.Node != "" {
		t.Fatalf("fetch_node = control: node %q", p.Node)
	}
	r.Staging[0].Fetch = false
	if p, err := FetchPlan(cfg, r, FetchOptions{MarkedOnly: true}); p != nil || err != nil {
		t.Fatalf("no block marked: %+v, %v", p, err)
	}
}

// The plan's endpoint is hf_endpoint, else the asking shell's
// HF_ENDPOINT (trailing slash dropped), else "" (the worker's own); a
// shell's HF_ENDPOINT that is not an http(s) URL is refused, naming it.
func TestFetchPlanEndpoint(t *testing.T) {
	cfg := simFleet(t)
	r := &contract.Recipe{File: "lane.toml", Name: "demo", Staging: []contract.Staging{{Kind: "hub-mirror", ID: "w", Src: "/nas/hub", Repos: []string{"org/a"}}}}
	for _, c := range []struct{ config, env, want string }{
		{"", "", ""},
		{"", " http://mirror:8080/ ", "http://mirror:8080"},
		{"https://hub.example", "http://mirror:8080", "https://hub.example"},
	} {
		cfg.HFEndpoint = c.config
		p, err := FetchPlan(cfg, r, FetchOptions{Endpoint: c.env})
		if err != nil || p.Endpoint != c.want {
			t.Errorf("hf_endpoint %q, HF_ENDPOINT %q: endpoint %q (%v), want %q", c.config, c.env, p.Endpoint, err, c.want)
		}
	}
	cfg.HFEndpoint = ""
	if _, err := FetchPlan(cfg, r, FetchOptions{Endpoint: "mirror.local"}); err == nil || !strings.Contains(err.Error(), `HF_ENDPOINT "mirror.local" is not an http(s) URL`) {
		t.Fatalf("a bad HF_ENDPOINT: %v", err)
	}
}
