package lane

import (
	"path/filepath"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// HubRootPlaceholder may begin a [[staging]] block's src: the fleet's
// hf_cache_dir (the NAS hub root). A recipe that writes it stages from
// whatever NAS the fleet config names, so a shipped recipe (sim-demo)
// works on any fleet unedited.
const HubRootPlaceholder = "{hf_cache_dir}"

// OnHubRoot reports whether src is written relative to the hub root:
// HubRootPlaceholder alone or followed by "/".
func OnHubRoot(src string) bool {
	return src == HubRootPlaceholder || strings.HasPrefix(src, HubRootPlaceholder+"/")
}

// StagingSrc is a staging block's src on cfg's fleet: HubRootPlaceholder
// at its start is the config's hf_cache_dir. With no hf_cache_dir it stays
// as written (Validate names the key to set).
func StagingSrc(cfg *config.Config, src string) string {
	if cfg == nil || cfg.HFCacheDir == "" || !OnHubRoot(src) {
		return src
	}
	return filepath.Join(cfg.HFCacheDir, strings.TrimPrefix(src, HubRootPlaceholder))
}

// resolveStaging writes each block's src as the fleet sees it
// (StagingSrc): the recipe a run carries names the NAS path.
func resolveStaging(cfg *config.Config, blocks []contract.Staging) {
	for i := range blocks {
		blocks[i].Src = StagingSrc(cfg, blocks[i].Src)
	}
}
