package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// On a terminal, init shows an unknown host's key fingerprint and adds it
// to known_hosts only when the operator answers yes; "no" writes nothing.
// (The prompt reads App.In; askHostKeys stands in for the terminal.)
func TestInitConfirmsUnknownHostKey(t *testing.T) {
	s := sshdtest.Start(t)
	dir := t.TempDir()
	kh := filepath.Join(dir, "known_hosts")
	out := filepath.Join(dir, "sparklane.toml")
	args := []string{"init", "--node", "dgx1=" + s.User + "@127.0.0.1:" + strconv.Itoa(s.Port), "--known-hosts", kh, "--identity", s.IdentityFile, "--out", out}
	run := func(answer string, ask bool) (error, string, string) {
		var o, e bytes.Buffer
		a := &App{Out: &o, Err: &e, In: strings.NewReader(answer), askHostKeys: ask}
		err := a.execute(context.Background(), args)
		return err, o.String(), e.String()
	}
	fp := ssh.FingerprintSHA256(s.HostKey)

	err, o, e := run("no\n", true)
	if err == nil || !strings.Contains(e, fp) || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("answer no: err %v\n%s%s", err, o, e)
	}
	if b, _ := os.ReadFile(kh); len(b) != 0 {
		t.Fatalf("known_hosts written after 'no': %s", b)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatal("config written after 'no'")
	}

	err, o, e = run("yes\n", true)
	if err != nil || !strings.Contains(e, "added "+s.HostKey.Type()+" "+fp) || !strings.Contains(o, "wrote "+out) {
		t.Fatalf("answer yes: err %v\n%s%s", err, o, e)
	}
	// Now known: no prompt needed (a non-terminal run succeeds).
	err, o, e = run("", false)
	if err != nil || !strings.Contains(o, "is up to date") || strings.Contains(e, "Trust it") {
		t.Fatalf("after trusting: err %v\n%s%s", err, o, e)
	}
}

// init writes shared_roots and hf_cache_dir: with --shared-root naming
// the NAS (a loopback host mounts nothing alike), the hub cache on it is
// found; two are an error off a terminal, naming them and --hf-cache-dir,
// and nothing is written; the flag chooses. The clusters the recipes
// beside the file name are written when the fleet holds them, sized for
// them; one needing more nodes is a comment, and lanes lists its lane as
// needing them — no BROKEN, no warning. recipe check passes on the file.
func TestInitSharedRootHubCacheAndRecipeClusters(t *testing.T) {
	s := sshdtest.Start(t)
	dir := t.TempDir()
	nas := t.TempDir()
	for _, d := range []string{"a/huggingface/hub/models--org--m/snapshots", "b/models--org--n"} {
		if err := os.MkdirAll(filepath.Join(nas, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	head := "runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve\"\n"
	writeConfigTestFile(t, filepath.Join(dir, "recipes"), "duo.toml", head+"cluster = \"2nodes-dac\"\n[defaults]\ntensor_parallel = 2\n")
	writeConfigTestFile(t, filepath.Join(dir, "recipes"), "solo.toml", head+"cluster = \"2nodes-dac\"\n[defaults]\ntensor_parallel = 1\n")
	writeConfigTestFile(t, filepath.Join(dir, "recipes"), "quad.toml", head+"cluster = \"4nodes-switch\"\n[defaults]\ntensor_parallel = 4\n")
	out := filepath.Join(dir, "sparklane.toml")
	target := s.User + "@127.0.0.1:" + strconv.Itoa(s.Port)
	auth := writeConfigTestFile(t, dir, "docker-config.json", `{"auths": {}}`)
	args := []string{"init", "--node", "dgx1=" + target, "--node", "dgx2=" + target, "--node", "dgx3=" + target,
		"--known-hosts", s.KnownHostsFile, "--identity", s.IdentityFile, "--shared-root", nas, "--out", out,
		"--insecure-registry", "10.0.0.5:5000", "--insecure-registry", "mirror.lan", "--registry-auth-file", auth}

	// A registry flag that is not what it must be stops init before any
	// node is dialled, naming the flag and the value.
	for bad, want := range map[string]string{
		"http://mirror.lan":             `--insecure-registry http://mirror.lan: "http://mirror.lan" is not a registry host: write host[:port]`,
		"mirror.lan:5000/v2":            `--insecure-registry mirror.lan:5000/v2: "mirror.lan:5000/v2" is not a registry host`,
		"mirror.lan:http":               `--insecure-registry mirror.lan:http: "mirror.lan:http" is not a registry host`,
		"docker-config.json":            `--registry-auth-file "docker-config.json": give the absolute path`,
		filepath.Join(dir, "nope.json"): "--registry-auth-file " + filepath.Join(dir, "nope.json") + ": stat ",
	} {
		flag := "--insecure-registry"
		if strings.HasSuffix(bad, ".json") {
			flag = "--registry-auth-file"
		}
		if code, o, e := runStarter(t, append(args, flag, bad)...); code == 0 || !strings.Contains(e, want) {
			t.Errorf("%s %s: exit %d, want %q\n%s%s", flag, bad, code, want, o, e)
		}
	}

	code, o, e := runStarter(t, args...)
	hubs := filepath.Join(nas, "a", "huggingface", "hub") + ", " + filepath.Join(nas, "b")
	if code == 0 || !strings.Contains(e, "2 Hugging Face hub caches on the shared roots ("+hubs+"): choose one with --hf-cache-dir") {
		t.Fatalf("two hub caches off a terminal: exit %d\n%s%s", code, o, e)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatal("a config was written with the hub cache undecided")
	}
	code, o, e = runStarter(t, append(args, "--hf-cache-dir", filepath.Join(nas, "b"))...)
	cfg, _ := os.ReadFile(out)
	for _, want := range []string{
		"shared_roots = [\"" + nas + "\"]", "hf_cache_dir = \"" + filepath.Join(nas, "b") + "\"", "ssh = \"" + target + "\"",
		"default_cluster = \"all-3x\"", "name = \"2nodes-dac\"\nnodes = [\"dgx1\", \"dgx2\"]",
		"# cluster 4nodes-switch (named by recipes/quad.toml) needs 4 nodes; this fleet has 3: not written",
		"nothing is\n# configured in any node's Docker", "image_insecure_registries = [\"10.0.0.5:5000\", \"mirror.lan\"]\n",
		"image_registry_auth_file = \"" + auth + "\"\n",
	} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if code != 0 || !strings.Contains(o, "cluster 2nodes-dac (dgx1, dgx2) for recipes/duo.toml, recipes/solo.toml") || !strings.Contains(o, "shared root: "+nas+" (given)") {
		t.Fatalf("--hf-cache-dir: exit %d\n%s%s", code, o, e)
	}
	if code, o, e := runStarter(t, "recipe", "check", out); code != 0 {
		t.Fatalf("recipe check %s: exit %d\n%s%s\n%s", out, code, o, e, cfg)
	}
	code, o, e = runStarter(t, "--config", out, "lanes")
	if code != 0 || strings.Contains(o, "BROKEN") || e != "" || !regexp.MustCompile(`(?m)^quad +- +4nodes-switch +sim +needs 4 nodes; this fleet has 3$`).MatchString(o) || !strings.Contains(o, "duo ") {
		t.Fatalf("lanes on init's config: exit %d\n%s%s", code, o, e)
	}

	// One hub cache left: found, no flag needed.
	if err := os.RemoveAll(filepath.Join(nas, "b")); err != nil {
		t.Fatal(err)
	}
	code, o, e = runStarter(t, append(args, "--write")...)
	cfg, _ = os.ReadFile(out)
	if code != 0 || !strings.Contains(string(cfg), "hf_cache_dir = \""+filepath.Join(nas, "a", "huggingface", "hub")+"\"") {
		t.Fatalf("one hub cache: exit %d\n%s%s\n%s", code, o, e, cfg)
	}
}
