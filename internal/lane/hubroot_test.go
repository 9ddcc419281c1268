package lane

import (
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// {hf_cache_dir} at the start of a staging src is the fleet's hub root
// (alone or followed by a path); anywhere else it is left as written, and
// a fleet without hf_cache_dir leaves it for Validate to name.
func TestStagingSrcOnTheFleetsHubRoot(t *testing.T) {
	cfg := &config.Config{HFCacheDir: "/mnt/nas/hub/"}
	for src, want := range map[string]string{
		"{hf_cache_dir}": "/mnt/nas/hub",
		"{hf_cache_dir}/models--o--m/snapshots/x": "/mnt/nas/hub/models--o--m/snapshots/x",
		"{hf_cache_dir}x":                         "{hf_cache_dir}x",
		"/nas/{hf_cache_dir}":                     "/nas/{hf_cache_dir}",
		"/nas/hub":                                "/nas/hub",
	} {
		if got := StagingSrc(cfg, src); got != want {
			t.Errorf("StagingSrc(%q) = %q, want %q", src, got, want)
		}
	}
	if got := StagingSrc(&config.Config{}, "{hf_cache_dir}"); got != "{hf_cache_dir}" {
		t.Errorf("with no hub root: %q", got)
	}
}
