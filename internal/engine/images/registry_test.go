package images

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

func TestRegistryRef(t *testing.T) {
	for img, want := range map[string]string{
		"vllm/vllm:1.0":                           "m.lan:5000/vllm/vllm:1.0",
		"ghcr.io/org/eng:2":                       "m.lan:5000/org/eng:2",
		"eng@sha256:" + strings.Repeat("a", 64):   "m.lan:5000/eng@sha256:" + strings.Repeat("a", 64),
		"eng:3@sha256:" + strings.Repeat("a", 64): "m.lan:5000/eng:3",
	} {
		r, err := contract.ParseImageRef(img)
		if err != nil {
			t.Fatal(err)
		}
		if got := RegistryRef("m.lan:5000", r); got != want {
			t.Errorf("RegistryRef(%s) = %s, want %s", img, got, want)
		}
	}
	// Its own registry: the reference itself (Docker Hub spelled out).
	for img, want := range map[string]string{
		"10.0.0.5:5000/eng:1": "10.0.0.5:5000/eng:1",
		"nvcr.io/nvidia/x:2":  "nvcr.io/nvidia/x:2",
		"vllm/vllm:1.0":       "docker.io/vllm/vllm:1.0",
	} {
		r := contract.MustImageRef(img)
		if got := RegistryRef(r.Registry(), r); got != want {
			t.Errorf("RegistryRef(own, %s) = %s, want %s", img, got, want)
		}
	}
}

// LookupCredentials reads a login from both file forms, Docker Hub under
// its v1 URL, a credential helper the config names (a real executable on
// PATH), and nothing for a registry the file does not know.
func TestLookupCredentials(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("alice:s3cret\n"), 0o600)
	cfg := filepath.Join(dir, "config.json")
	b, _ := json.Marshal(map[string]any{
		"auths": map[string]any{
			"m.lan:5000":                  map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("bob:pw2"))},
			"https://index.docker.io/v1/": map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("hub:pw3"))},
		},
		"credHelpers": map[string]string{"helped.lan": "regtest"},
	})
	os.WriteFile(cfg, b, 0o600)
	helper := filepath.Join(dir, "bin", "docker-credential-regtest")
	os.MkdirAll(filepath.Dir(helper), 0o755)
	os.WriteFile(helper, []byte("#!/bin/sh\nread host\nprintf '{\"ServerURL\":\"%s\",\"Username\":\"carol\",\"Secret\":\"pw4\"}' \"$host\"\n"), 0o755)
	t.Setenv("PATH", filepath.Dir(helper)+":"+os.Getenv("PATH"))
	for _, c := range []struct{ file, reg, user, pw string }{
		{plain, "any.lan", "alice", "s3cret"},
		{cfg, "m.lan:5000/team", "bob", "pw2"},
		{cfg, "docker.io", "hub", "pw3"},
		{cfg, "helped.lan", "carol", "pw4"},
	} {
		got, err := LookupCredentials(c.file, c.reg)
		if err != nil || got == nil || got.Username != c.user || got.Password != c.pw {
			t.Errorf("%s for %s: %v %v, want %s", c.file, c.reg, got, err, c.user)
		}
	}
	if got, err := LookupCredentials(cfg, "other.lan"); got != nil || err != nil {
		t.Errorf("a registry the file does not know: %v %v, want none (anonymous)", got, err)
	}
	if _, err := LookupCredentials(filepath.Join(dir, "none"), "m.lan"); err == nil || !strings.Contains(err.Error(), "is not on the control host") {
		t.Errorf("missing file: %v", err)
	}
	c := Credentials{Username: "u", Password: "hunter2", IdentityToken: "tok"}
	if s := fmt.Sprintf("%v %+v %#v %s", c, c, c, &c); strings.Contains(s, "hunter2") || strings.Contains(s, "tok") {
		t.Errorf("credentials print their secrets: %s", s)
	}
}

// A credentials file is written 0600 in a 0700 directory (in Go for a
// local node, by the shell script over SSH for a remote one: the same
// file), read once (taken away as it is read), refused for another
// registry; stale files are swept.
func TestCredentialFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "registry-auth")
	payload, err := CredentialPayload("m.lan:5000/team", Credentials{Username: "u", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	p := NewCredentialPath()
	if err := CheckCredentialPath(p); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{CredentialDir + "/../x/pull-" + strings.Repeat("a", 32) + ".json", "/etc/passwd", CredentialDir + "/pull-x.json"} {
		if CheckCredentialPath(bad) == nil {
			t.Errorf("CheckCredentialPath(%q) accepted", bad)
		}
	}
	base := filepath.Base(p)
	if err := WriteCredentials(dir, base, payload); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(dir, base)); fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v", fi.Mode())
	}
	if _, err := TakeCredentials(dir, base, "other.lan"); err == nil || !strings.Contains(err.Error(), "are for m.lan:5000") {
		t.Errorf("another registry: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, base)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused file stays: %v", err)
	}

	// The SSH path's script, run by a real shell: the same file.
	base = filepath.Base(NewCredentialPath())
	cmd := exec.Command("sh", "-c", CredentialScript(dir, base))
	cmd.Stdin = strings.NewReader(string(payload))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script: %v: %s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, base)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("script's file: %v %v", fi, err)
	}
	c, err := TakeCredentials(dir, base, "m.lan:5000")
	if err != nil || c.Username != "u" || c.Password != "pw" {
		t.Fatalf("take: %v %v", c, err)
	}
	if _, err := os.Stat(filepath.Join(dir, base)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a taken file stays: %v", err)
	}
	if _, err := TakeCredentials(dir, base, "m.lan:5000"); err == nil || !strings.Contains(err.Error(), "sends them again") {
		t.Errorf("taken twice: %v", err)
	}

	// Stale files go; fresh ones and other files stay.
	old, fresh := filepath.Base(NewCredentialPath()), filepath.Base(NewCredentialPath())
	for _, n := range []string{old, fresh, "keep.txt"} {
		os.WriteFile(filepath.Join(dir, n), []byte("{}"), 0o600)
	}
	past := time.Now().Add(-CredentialTTL - time.Minute)
	os.Chtimes(filepath.Join(dir, old), past, past)
	SweepCredentials(dir, CredentialTTL, time.Now())
	for n, want := range map[string]bool{old: false, fresh: true, "keep.txt": true} {
		if _, err := os.Stat(filepath.Join(dir, n)); (err == nil) != want {
			t.Errorf("after the sweep %s exists %v, want %v", n, err == nil, want)
		}
	}
}

// The transport refuses plain HTTP unless the registry is listed or
// loopback.
func TestPlainHTTPPolicy(t *testing.T) {
	for _, c := range []struct {
		host     string
		insecure bool
		refused  bool
	}{
		{"10.0.0.5:5000", false, true},
		{"10.0.0.5:5000", true, false},
		{"127.0.0.1:5000", false, false},
		{"localhost:5000", false, false},
		{"127.0.0.2:5000", false, true},
	} {
		tr := transportFor(roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("sent") }), c.host, c.insecure)
		req, _ := http.NewRequest(http.MethodGet, "http://"+c.host+"/v2/", nil)
		_, err := tr.RoundTrip(req)
		if refused := errors.Is(err, errPlainHTTP); refused != c.refused || !isPlainHTTP(err) && c.refused {
			t.Errorf("%s insecure=%v: %v, want refused %v", c.host, c.insecure, err, c.refused)
		}
	}
	// A listed registry's redirect elsewhere (blob storage) is no
	// licence for plain HTTP there.
	tr := transportFor(roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("sent") }), "10.0.0.5:5000", true)
	req, _ := http.NewRequest(http.MethodGet, "http://10.0.0.6/blob", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, errPlainHTTP) {
		t.Errorf("plain HTTP to another host than the listed registry: %v", err)
	}
	s := PullSpec{Node: "n1", Registry: "10.0.0.5:5000/team", ConfigFile: "/etc/sparklane/sparklane.toml"}
	err := s.pullErr(t.Context(), "10.0.0.5:5000/team/eng:1", fmt.Errorf("Get: %w", errPlainHTTP))
	if want := "node n1: registry 10.0.0.5:5000 answers plain HTTP: add it to image_insecure_registries in /etc/sparklane/sparklane.toml"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
