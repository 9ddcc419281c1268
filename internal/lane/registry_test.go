package lane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// image_registry: the recipe's wins over the config's, the config's
// applies otherwise (with its auth file), and a bad value is refused
// naming the file, the key and the fix.
func TestImageRegistryIsWiredAndChecked(t *testing.T) {
	dir := t.TempDir()
	base := "runtime = \"vllm\"\nimage = \"eng:1\"\ncommand = \"vllm serve m\"\n"
	cfg := sparkFleet()
	cfg.ImageRegistry, cfg.ImageRegistryAuthFile = "mirror.lan:5000", "/etc/sparklane/registry-auth"
	for _, c := range []struct{ recipe, reg, auth, err string }{
		{"", "mirror.lan:5000", "/etc/sparklane/registry-auth", ""},
		{"image_registry = \"ghcr.io/team\"\n", "ghcr.io/team", "/etc/sparklane/registry-auth", ""},
		{"image_registry = \"https://m.lan\"\n", "", "", "r.toml: image_registry \"https://m.lan\" carries a scheme"},
		// An auth file without a registry: for the registry the image names.
		{"image_registry_auth_file = \"/a\"\n", "mirror.lan:5000", "/a", ""},
		{"image_registry = \"m.lan\"\nimage_registry_auth_file = \"auth\"\n", "", "", "r.toml: image_registry_auth_file \"auth\" is not an absolute clean path"},
	} {
		r := mustRecipe(t, writeFile(t, dir, "r.toml", base+c.recipe))
		w := Wire(r)
		err := wireRegistry(cfg, r, &w)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.recipe, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want %q", c.recipe, err, c.err)
		case c.err == "" && (w.ImageRegistry != c.reg || w.ImageRegistryAuthFile != c.auth):
			t.Errorf("%q: wired %s %s, want %s %s", c.recipe, w.ImageRegistry, w.ImageRegistryAuthFile, c.reg, c.auth)
		}
	}
	cfg.ImageRegistry = "mirror"
	r := mustRecipe(t, writeFile(t, dir, "r.toml", base))
	w := Wire(r)
	if err := wireRegistry(cfg, r, &w); err == nil || !strings.HasPrefix(err.Error(), "sparklane.toml: image_registry \"mirror\" is not a registry host") {
		t.Errorf("a bad config registry: %v", err)
	}
}

// Neither the recipe nor the config naming image_registry_auth_file, the
// control host's own Docker logins are wired (DOCKER_CONFIG, else HOME, as
// Docker finds them), the path alone; none there, none is wired and the
// pulls go anonymous. A file the config names wins over them.
func TestDefaultRegistryLoginsAreTheControlHostsDocker(t *testing.T) {
	dir, home := t.TempDir(), t.TempDir()
	r := mustRecipe(t, writeFile(t, dir, "r.toml", "runtime = \"vllm\"\nimage = \"eng:1\"\ncommand = \"vllm serve m\"\n"))
	cfg := sparkFleet()
	env := map[string]string{"HOME": home}
	wired := func() string {
		t.Helper()
		w := Wire(r)
		if err := wireRegistryEnv(cfg, r, &w, func(k string) string { return env[k] }); err != nil {
			t.Fatal(err)
		}
		return w.ImageRegistryAuthFile
	}
	if got := wired(); got != "" {
		t.Errorf("no Docker config on the control host: wired %q, want none", got)
	}
	file := filepath.Join(home, ".docker", "config.json")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`{"auths": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := wired(); got != file {
		t.Errorf("HOME's Docker config: wired %q, want %s", got, file)
	}
	env["DOCKER_CONFIG"] = filepath.Join(home, "elsewhere")
	if got := wired(); got != "" {
		t.Errorf("DOCKER_CONFIG without config.json: wired %q, want none", got)
	}
	cfg.ImageRegistryAuthFile = "/etc/sparklane/registry-auth"
	if got := wired(); got != cfg.ImageRegistryAuthFile {
		t.Errorf("the config's file: wired %q, want %s", got, cfg.ImageRegistryAuthFile)
	}
}
