package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The login in a Docker config.json where Docker keeps it is read; a
// configured file that is missing stays an error naming it.
func TestLookupCredentialsOfADockerConfig(t *testing.T) {
	home := t.TempDir()
	inHome := filepath.Join(home, ".docker", "config.json")
	if err := os.MkdirAll(filepath.Dir(inHome), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inHome, []byte(`{"auths": {"mirror.lan:5000": {"auth": "dTpw"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := LookupCredentials(inHome, "mirror.lan:5000"); err != nil || c == nil || c.Username != "u" {
		t.Errorf("the login in %s: %v, %v", inHome, c, err)
	}
	missing := filepath.Join(home, "gone.json")
	if _, err := LookupCredentials(missing, "mirror.lan:5000"); err == nil || !strings.Contains(err.Error(), "image_registry_auth_file "+missing+" is not on the control host") {
		t.Errorf("a configured file that is missing: %v", err)
	}
}
