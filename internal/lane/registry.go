package lane

import (
	"fmt"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
)

// wireRegistry sets w's image registry: the recipe's image_registry, else
// the config's (with its auth file), checked (images.CheckRegistry). The
// error names the file and key at fault.
func wireRegistry(cfg *config.Config, r *config.Recipe, w *contract.Recipe) error {
	file := r.File
	if w.ImageRegistry == "" {
		if w.ImageRegistryAuthFile != "" {
			return fmt.Errorf("%s: image_registry_auth_file %s without image_registry: set image_registry (host[:port]) in the recipe, or move the auth file to the config's root", r.File, w.ImageRegistryAuthFile)
		}
		w.ImageRegistry, w.ImageRegistryAuthFile, file = cfg.ImageRegistry, cfg.ImageRegistryAuthFile, cfg.File
	}
	if w.ImageRegistry == "" && w.ImageRegistryAuthFile != "" {
		return fmt.Errorf("%s: image_registry_auth_file %s without image_registry: set image_registry = \"host[:port]\" next to it, or remove it", file, w.ImageRegistryAuthFile)
	}
	if err := images.CheckRegistry(w.ImageRegistry, w.ImageRegistryAuthFile); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}
