package lane

import (
	"fmt"
	"os"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/imagespec"
)

// wireRegistry sets how w's image is pulled: the recipe's image_registry,
// else the config's (none: the registry the image names); the recipe's
// image_registry_auth_file, else the config's, else the control host's
// own Docker logins as Docker finds them (imagespec.DefaultAuthFile: this
// process's $DOCKER_CONFIG or ~/.docker; none there, the pulls go
// anonymous). Resolve runs on the control host — in the starter and the
// control service — so the path is one there; only the path enters the
// run, the control service reads the logins (SendRegistryAuth). Each is
// checked (imagespec.CheckRegistry); the error names the file and key at
// fault.
func wireRegistry(cfg *config.Config, r *config.Recipe, w *contract.Recipe) error {
	return wireRegistryEnv(cfg, r, w, os.Getenv)
}

// wireRegistryEnv is wireRegistry reading the environment through getenv.
func wireRegistryEnv(cfg *config.Config, r *config.Recipe, w *contract.Recipe, getenv func(string) string) error {
	regFile, authFile := r.File, r.File
	if w.ImageRegistry == "" {
		w.ImageRegistry, regFile = cfg.ImageRegistry, cfg.File
	}
	if w.ImageRegistryAuthFile == "" {
		w.ImageRegistryAuthFile, authFile = cfg.ImageRegistryAuthFile, cfg.File
	}
	if w.ImageRegistryAuthFile == "" {
		w.ImageRegistryAuthFile = imagespec.DefaultAuthFile(getenv)
	}
	if err := imagespec.CheckRegistry(w.ImageRegistry, ""); err != nil {
		return fmt.Errorf("%s: %w", regFile, err)
	}
	if err := imagespec.CheckRegistry("", w.ImageRegistryAuthFile); err != nil {
		return fmt.Errorf("%s: %w", authFile, err)
	}
	return nil
}
