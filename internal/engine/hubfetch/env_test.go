package hubfetch

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEndpointFromEnv(t *testing.T) {
	t.Setenv("HF_ENDPOINT", "")
	if got := EndpointFromEnv(); got != DefaultEndpoint {
		t.Fatalf("no HF_ENDPOINT: %q", got)
	}
	t.Setenv("HF_ENDPOINT", "https://hf-mirror.example/ ")
	if got := EndpointFromEnv(); got != "https://hf-mirror.example" {
		t.Fatalf("HF_ENDPOINT: %q", got)
	}
}

func TestTokenFromEnv(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "XDG_CACHE_HOME"} {
		t.Setenv(v, "")
	}
	check := func(what string, wantTok Secret, wantSrc string) {
		t.Helper()
		tok, src, err := TokenFromEnv()
		if err != nil || tok != wantTok || src != wantSrc {
			t.Fatalf("%s: token ok=%v, source %q, %v; want source %q", what, tok == wantTok, src, err, wantSrc)
		}
	}
	check("nothing", "", "")
	def := filepath.Join(home, ".cache", "huggingface", "token")
	os.MkdirAll(filepath.Dir(def), 0o700)
	os.WriteFile(def, []byte(" hf_default\r\n"), 0o600)
	check("default file", "hf_default", def)
	xdg := t.TempDir()
	os.MkdirAll(filepath.Join(xdg, "huggingface"), 0o700)
	os.WriteFile(filepath.Join(xdg, "huggingface", "token"), []byte("hf_xdg\n"), 0o600)
	t.Setenv("XDG_CACHE_HOME", xdg)
	check("XDG_CACHE_HOME", "hf_xdg", filepath.Join(xdg, "huggingface", "token"))
	hfHome := t.TempDir()
	os.WriteFile(filepath.Join(hfHome, "token"), []byte("hf_home"), 0o600)
	t.Setenv("HF_HOME", hfHome)
	check("HF_HOME", "hf_home", filepath.Join(hfHome, "token"))
	p := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(p, []byte("hf_path\n"), 0o600)
	t.Setenv("HF_TOKEN_PATH", p)
	check("HF_TOKEN_PATH", "hf_path", p)
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "hf_legacy")
	check("HUGGING_FACE_HUB_TOKEN", "hf_legacy", "HUGGING_FACE_HUB_TOKEN")
	t.Setenv("HF_TOKEN", " hf_env ")
	check("HF_TOKEN", "hf_env", "HF_TOKEN")

	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	os.Chmod(p, 0)
	os.Remove(p)
	os.Mkdir(p, 0o700) // a directory where the file should be: unreadable
	if _, _, err := TokenFromEnv(); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("unreadable token file: %v", err)
	}
}

func TestSecretNeverPrinted(t *testing.T) {
	req := Request{Repo: "a/b", Token: "hf_TOPSECRET"}
	j, _ := json.Marshal(req)
	for _, s := range []string{fmt.Sprintf("%v", req), fmt.Sprintf("%+v", req), fmt.Sprintf("%#v", req), fmt.Sprint(req.Token), string(j)} {
		if strings.Contains(s, "TOPSECRET") {
			t.Fatalf("the token shows in %s", s)
		}
	}
}
