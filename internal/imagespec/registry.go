package imagespec

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CheckRegistry checks an image_registry (host[:port][/path prefix], no
// scheme, no credentials) and an image_registry_auth_file (an absolute
// path on the control host). Errors name the key and the fix.
func CheckRegistry(reg, authFile string) error {
	host, _, _ := strings.Cut(reg, "/")
	switch {
	case reg == "":
	case strings.Contains(reg, "://"):
		return fmt.Errorf("image_registry %q carries a scheme: give host[:port][/prefix] (a registry that answers plain HTTP goes in image_insecure_registries)", reg)
	case strings.Contains(host, "@"):
		return fmt.Errorf("image_registry %q carries credentials: remove them and set image_registry_auth_file to a Docker config.json on the control host", reg)
	case host == "" || strings.ContainsAny(reg, " \t\n@") || strings.HasSuffix(reg, "/") || !(strings.ContainsAny(host, ".:") || host == "localhost"):
		return fmt.Errorf("image_registry %q is not a registry host: give host[:port][/prefix], e.g. \"mirror.lan:5000\" or \"registry.example.com/team\"", reg)
	}
	if authFile != "" && (!filepath.IsAbs(authFile) || filepath.Clean(authFile) != authFile) {
		return fmt.Errorf("image_registry_auth_file %q is not an absolute clean path: give the path of a Docker config.json (or a username:password file) on the control host", authFile)
	}
	return nil
}

// DefaultAuthFile is the Docker config.json of the process that asks, as
// Docker itself finds it: $DOCKER_CONFIG/config.json when DOCKER_CONFIG is
// set, else $HOME/.docker/config.json (getenv reads the environment;
// os.Getenv). It is "" when that file does not exist — no login, so pulls
// go anonymous — or when neither variable is set.
func DefaultAuthFile(getenv func(string) string) string {
	var p string
	switch dir, home := getenv("DOCKER_CONFIG"), getenv("HOME"); {
	case dir != "":
		p = filepath.Join(dir, "config.json")
	case home != "":
		p = filepath.Join(home, ".docker", "config.json")
	default:
		return ""
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() {
		return ""
	}
	return abs
}

// CheckRegistryHost accepts a registry host as an image names it
// (host[:port], by Docker's rules a host with a '.' or a ':', or
// localhost): no scheme, path or credentials, and a port that is a number.
func CheckRegistryHost(h string) error {
	bad := h == "" || strings.ContainsAny(h, "/@ \t\n") || !(strings.ContainsAny(h, ".:") || h == "localhost")
	if i := strings.LastIndex(h, ":"); !bad && i >= 0 && !strings.HasSuffix(h, "]") {
		p, err := strconv.Atoi(h[i+1:])
		bad = err != nil || p < 1 || p > 65535 || i == 0
	}
	if bad {
		return fmt.Errorf("%q is not a registry host: write host[:port] as the image names it, like \"10.0.0.5:5000\" (no scheme, no path)", h)
	}
	return nil
}
