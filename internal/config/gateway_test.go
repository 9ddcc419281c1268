package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// [gateway] loads with its defaults; a listen address beyond loopback
// without keys, half a TLS pair and a relative keys file are errors naming
// the key; [[gateways]] are named, and [gateway] beside them is refused.
func TestGatewayKeys(t *testing.T) {
	dir := t.TempDir()
	load := func(name, tables string) *Config {
		t.Helper()
		c, err := Load(conftest.WriteFile(t, dir, name, conftest.GoodConfig+"\n"+tables))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cfg := load("sparklane.toml", "[gateway]\nlisten = \"127.0.0.1:9000\"\n")
	gs := cfg.Gateways()
	if len(gs) != 1 || gs[0].Listen != "127.0.0.1:9000" || gs[0].HoldTimeout != 10*time.Minute || gs[0].MaxHeld != 1024 || gs[0].DrainTimeout != 2*time.Minute || gs[0].MaxBody != 32<<20 {
		t.Fatalf("gateways %+v, want the listen given and the defaults", gs)
	}
	for _, tc := range []struct{ body, want string }{
		{"[gateway]\nlisten = \"0.0.0.0:8080\"\n", "gateway.listen: 0.0.0.0:8080 is beyond loopback and no api_keys_file is set"},
		{"[gateway]\ntls_cert = \"/etc/c.pem\"\n", "gateway.tls_cert: tls_cert and tls_key go together"},
		{"[gateway]\napi_keys_file = \"keys\"\n", "gateway.api_keys_file: \"keys\" is not absolute"},
		{"[gateway]\nlisten = \"8080\"\n", "gateway.listen: \"8080\" is not host:port"},
		{"[gateway]\nhold_timeout = \"0s\"\n", "hold_timeout"},
		{"[gateway]\nclusters = [\"nope\"]\n", "gateway.clusters: unknown cluster \"nope\""},
		{"[[gateways]]\nname = \"../x\"\n", "gateways[0].name: \"../x\": write lower-case letters"},
	} {
		p := conftest.WriteFile(t, dir, "bad.toml", conftest.GoodConfig+"\n"+tc.body)
		c, err := Load(p)
		if err == nil {
			err = validate(c, nil)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
	cfg = load("two.toml", "[[gateways]]\nname = \"a\"\nlisten = \"127.0.0.1:9001\"\n\n[[gateways]]\nname = \"b\"\nlisten = \"127.0.0.2:9002\"\nwake = true\n")
	if gs := cfg.Gateways(); len(gs) != 2 || gs[1].Name != "b" || !gs[1].Wake || cfg.FindGateway("a") == nil {
		t.Fatalf("[[gateways]] %+v", gs)
	}
}
