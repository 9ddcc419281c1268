package imagespec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if err := CheckRegistry("m.lan", "auth.json"); err == nil || !strings.Contains(err.Error(), "image_registry_auth_file") || !strings.Contains(err.Error(), "control host") {
		t.Errorf("a relative auth file: %v", err)
	}
}

// The control host's own Docker logins are found where Docker finds
// them: $DOCKER_CONFIG/config.json when DOCKER_CONFIG is set (and then
// only there), else ~/.docker/config.json; no file there is no login, not
// an error.
func TestDefaultAuthFileIsWhereDockerLooks(t *testing.T) {
	home, dc := t.TempDir(), t.TempDir()
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	if got := DefaultAuthFile(env(map[string]string{"HOME": home, "DOCKER_CONFIG": dc})); got != "" {
		t.Errorf("no config.json anywhere: %q, want none", got)
	}
	if got := DefaultAuthFile(env(nil)); got != "" {
		t.Errorf("neither HOME nor DOCKER_CONFIG: %q, want none", got)
	}
	inHome := filepath.Join(home, ".docker", "config.json")
	if err := os.MkdirAll(filepath.Dir(inHome), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inHome, []byte(`{"auths": {"mirror.lan:5000": {"auth": "dTpw"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := DefaultAuthFile(env(map[string]string{"HOME": home})); got != inHome {
		t.Errorf("HOME only: %q, want %s", got, inHome)
	}
	// DOCKER_CONFIG set: Docker reads only there, so the file in HOME is
	// not used.
	if got := DefaultAuthFile(env(map[string]string{"HOME": home, "DOCKER_CONFIG": dc})); got != "" {
		t.Errorf("DOCKER_CONFIG without a config.json: %q, want none (not %s)", got, inHome)
	}
	inDC := filepath.Join(dc, "config.json")
	if err := os.WriteFile(inDC, []byte(`{"auths": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := DefaultAuthFile(env(map[string]string{"HOME": home, "DOCKER_CONFIG": dc})); got != inDC {
		t.Errorf("DOCKER_CONFIG: %q, want %s", got, inDC)
	}
}

// A registry host is written as an image names it: host[:port], with a
// '.' or ':' (or localhost), no scheme, path or credentials, a real port.
func TestCheckRegistryHost(t *testing.T) {
	for _, h := range []string{"10.0.0.5:5000", "mirror.lan", "localhost", "localhost:5000", "[::1]:5000"} {
		if err := CheckRegistryHost(h); err != nil {
			t.Errorf("CheckRegistryHost(%q): %v", h, err)
		}
	}
	for _, h := range []string{"", "mirror", "http://m.lan:5000", "m.lan:5000/team", "u@m.lan", "m.lan:0", "m.lan:65536", "m.lan:x", ":5000"} {
		if err := CheckRegistryHost(h); err == nil || !strings.Contains(err.Error(), "not a registry host") {
			t.Errorf("CheckRegistryHost(%q) = %v, want 'not a registry host'", h, err)
		}
	}
}
