package lane

import (
	"fmt"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
)

// wireRegistry sets how w's image is pulled: the recipe's image_registry,
// else the config's (none: the registry the image names); the recipe's
// image_registry_auth_file, else the config's (a file on the control
// host). Each is checked (images.CheckRegistry); the error names
// the file and key at fault.
func wireRegistry(cfg *config.Config, r *config.Recipe, w *contract.Recipe) error {
	regFile, authFile := r.File, r.File
	if w.ImageRegistry == "" {
		w.ImageRegistry, regFile = cfg.ImageRegistry, cfg.File
	}
	if w.ImageRegistryAuthFile == "" {
		w.ImageRegistryAuthFile, authFile = cfg.ImageRegistryAuthFile, cfg.File
	}
	if err := images.CheckRegistry(w.ImageRegistry, ""); err != nil {
		return fmt.Errorf("%s: %w", regFile, err)
	}
	if err := images.CheckRegistry("", w.ImageRegistryAuthFile); err != nil {
		return fmt.Errorf("%s: %w", authFile, err)
	}
	return nil
}
