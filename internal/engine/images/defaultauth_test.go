package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The control host's own Docker logins are found where Docker finds
// them: $DOCKER_CONFIG/config.json when DOCKER_CONFIG is set (and then
// only there), else ~/.docker/config.json; no file there is no login, not
// an error. A configured file that is missing stays an error.
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
	if c, err := LookupCredentials(inHome, "mirror.lan:5000"); err != nil || c == nil || c.Username != "u" {
		t.Errorf("the login in %s: %v, %v", inHome, c, err)
	}
	missing := filepath.Join(home, "gone.json")
	if _, err := LookupCredentials(missing, "mirror.lan:5000"); err == nil || !strings.Contains(err.Error(), "image_registry_auth_file "+missing+" is not on the control host") {
		t.Errorf("a configured file that is missing: %v", err)
	}
}
