package config

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// metrics_address defaults to loopback, may be "off", and is refused —
// naming file and key — when it would listen beyond loopback: /metrics
// has no authentication.
func TestMetricsAddressIsLoopbackOnly(t *testing.T) {
	dir := t.TempDir()
	base := "[[nodes]]\nname = \"a\"\nroots = [\"/nvme\"]\n"
	for addr, ok := range map[string]bool{"": true, "127.0.0.1:9464": true, "[::1]:9000": true, "localhost:0": true, "off": true,
		"0.0.0.0:9464": false, "10.0.0.5:9464": false, ":9464": false, "127.0.0.1": false} {
		body := base
		if addr != "" {
			body = "metrics_address = \"" + addr + "\"\n" + base
		}
		path := conftest.WriteFile(t, dir, "sparklane.toml", body)
		cfg, err := Load(path)
		if err != nil {
			t.Fatalf("%q: %v", addr, err)
		}
		if addr == "" && cfg.MetricsAddress != DefaultMetricsAddress {
			t.Errorf("default metrics_address %q, want %q", cfg.MetricsAddress, DefaultMetricsAddress)
		}
		err = validate(cfg, nil)
		if ok && err != nil {
			t.Errorf("%q refused: %v", addr, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), path+": metrics_address: ")) {
			t.Errorf("%q: error %v, want one naming %s and metrics_address", addr, err, path)
		}
	}
}
