package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The Hub fetch keys load, and each bad value is refused naming the file,
// the key and the fix.
func TestFetchKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(extra string) string {
		p := filepath.Join(dir, "sparklane.toml")
		body := extra + "\n[[nodes]]\nname = \"n1\"\n\n[[clusters]]\nname = \"c\"\nnodes = [\"n1\"]\n"
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := Load(write("hf_endpoint = \"http://127.0.0.1:9/\"\nhf_token_file = \"/etc/sparklane/hf-token\"\nfetch_node = \"n1\""))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HFEndpoint != "http://127.0.0.1:9/" || cfg.HFTokenFile != "/etc/sparklane/hf-token" || cfg.FetchNode != "n1" {
		t.Fatalf("loaded %q %q %q", cfg.HFEndpoint, cfg.HFTokenFile, cfg.FetchNode)
	}
	if errs := ConfigErrors(cfg); len(errs) > 0 {
		t.Fatalf("good fetch keys: %v", errs)
	}
	if cfg, err := Load(write(`image_insecure_registries = ["10.0.0.5:5000", "mirror.lan", "localhost:5000"]`)); err != nil || len(ConfigErrors(cfg)) > 0 || len(cfg.ImageInsecureRegistries) != 3 {
		t.Fatalf("image_insecure_registries: %v %v", err, cfg)
	}
	if cfg, err := Load(write(`fetch_node = "control"`)); err != nil || len(ConfigErrors(cfg)) > 0 {
		t.Fatalf("fetch_node = control: %v %v", err, ConfigErrors(cfg))
	}
	for extra, want := range map[string]string{
		`hf_endpoint = "huggingface.co"`:                                `hf_endpoint: "huggingface.co" is not an http(s) URL`,
		`hf_token_file = "token"`:                                       `hf_token_file: "token" is not absolute`,
		`fetch_node = "dgx9"`:                                           `fetch_node: unknown node "dgx9": name a node that mounts the NAS read-write, or "control"`,
		`hf_endpoint = "ftp://mirror/hf"`:                               `hf_endpoint: "ftp://mirror/hf" is not an http(s) URL`,
		`image_insecure_registries = ["10.0.0.5:5000", "http://m.lan"]`: `image_insecure_registries[1]: "http://m.lan" is not a registry host: write host[:port]`,
		`image_insecure_registries = ["mirror"]`:                        `image_insecure_registries[0]: "mirror" is not a registry host`,
	} {
		cfg, err := Load(write(extra))
		if err == nil {
			err = errors.Join(ConfigErrors(cfg)...)
		}
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "sparklane.toml") {
			t.Errorf("%s: %v, want %q naming the file", extra, err, want)
		}
	}
}

// revision and fetch belong to hub-mirror blocks; a bad revision, or a
// fetched block without an absolute src, is refused naming the key.
func TestFetchBlockKeys(t *testing.T) {
	dir := t.TempDir()
	load := func(block string) error {
		p := filepath.Join(dir, "lane.toml")
		body := "cluster = \"c\"\nruntime = \"sim\"\nimage = \"i\"\nmodel = \"org/m\"\ncommand = \"x\"\n\n[[staging]]\n" + block
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := LoadRecipe(p)
		if err != nil {
			return err
		}
		if errs := RecipeErrors(r); len(errs) > 0 {
			return errs[0]
		}
		return nil
	}
	ok := "kind = \"hub-mirror\"\nid = \"w\"\nsrc = \"/nas/hub\"\ndst = \"/srv/hf\"\nrepos = [\"org/m\"]\n"
	if err := load(ok + "revision = \"0123456789abcdef0123456789abcdef01234567\"\nfetch = true\n"); err != nil {
		t.Fatalf("a pinned, fetched block: %v", err)
	}
	for block, want := range map[string]string{
		ok + "revision = \"../x\"\n": `staging[0].revision: "../x" has the part ".."`,
		"kind = \"hub-mirror\"\nid = \"w\"\nsrc = \"hub\"\ndst = \"/srv/hf\"\nrepos = [\"org/m\"]\nfetch = true\n":                                     `staging[0].src: "hub" is not absolute`,
		"kind = \"sparse-rows\"\nid = \"e\"\nsrc = \"/nas/t\"\ndst = \"/srv/e\"\nformat = \"packed\"\ntensors = [\"t\"]\nlayers = [1]\nfetch = true\n": "revision/fetch belong to hub-mirror blocks",
	} {
		if err := load(block); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "lane.toml") {
			t.Errorf("%s: %v, want %q naming the file", block, err, want)
		}
	}
}
