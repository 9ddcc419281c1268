package images

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
)

func TestCheckRegistry(t *testing.T) {
	for reg, want := range map[string]string{
		"":                    "",
		"127.0.0.1:5000":      "",
		"mirror.lan/team":     "",
		"localhost":           "",
		"https://mirror.lan":  "carries a scheme",
		"u:p@mirror.lan":      "carries credentials",
		"mirror":              "is not a registry host",
		"mirror.lan/":         "is not a registry host",
		"mirror.lan:5000/a b": "is not a registry host",
	} {
		err := CheckRegistry(reg, "")
		if got := ""; err != nil {
			got = err.Error()
			if want == "" || !strings.Contains(got, want) {
				t.Errorf("CheckRegistry(%q) = %v, want %q", reg, err, want)
			}
		} else if want != "" {
			t.Errorf("CheckRegistry(%q) = nil, want %q", reg, want)
		}
	}
	if err := CheckRegistry("m.lan", "auth.json"); err == nil || !strings.Contains(err.Error(), "image_registry_auth_file") {
		t.Errorf("a relative auth file: %v", err)
	}
}

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
}

// TestRegistryAuth reads both file forms into the header Docker takes.
func TestRegistryAuth(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("alice:s3cret\n"), 0o600)
	cfg := filepath.Join(dir, "config.json")
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{"m.lan:5000": map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("bob:pw2"))}}})
	os.WriteFile(cfg, b, 0o600)
	for file, want := range map[string]string{plain: `"username":"alice","password":"s3cret"`, cfg: `"username":"bob","password":"pw2"`} {
		h, err := RegistryAuth(file, "m.lan:5000/team")
		if err != nil {
			t.Fatal(err)
		}
		dec, _ := base64.URLEncoding.DecodeString(h)
		if !strings.Contains(string(dec), want) || !strings.Contains(string(dec), `"serveraddress":"m.lan:5000"`) {
			t.Errorf("%s: header %s, want %s", file, dec, want)
		}
	}
	if _, err := RegistryAuth(cfg, "other.lan"); err == nil || !strings.Contains(err.Error(), "no \"auths\" entry for other.lan") {
		t.Errorf("other host: %v", err)
	}
	if _, err := RegistryAuth(filepath.Join(dir, "none"), "m.lan"); err == nil || !strings.Contains(err.Error(), "image_registry_auth_file") {
		t.Errorf("missing file: %v", err)
	}
}
