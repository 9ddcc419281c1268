package power_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/engine/power"
	"github.com/sparklane/sparklane/internal/fault"
)

const leakToken = "LEAKCANARY-9f3e1c2b7a"

func TestSecretNeverPrints(t *testing.T) {
	s := power.NewSecret(leakToken, "token_env HA_TOKEN")
	type holder struct {
		Exported Secret
		hidden   power.Secret
	}
	h := holder{Exported: Secret{s}, hidden: s}
	outs := []string{
		fmt.Sprint(s), fmt.Sprintf("%s|%v|%+v|%#v|%q|%x|%X|%d", s, s, s, s, s, s, s, s),
		fmt.Sprintf("%v|%+v|%#v", h, h, h), fmt.Sprintf("%v %+v", &s, []power.Secret{s}),
		s.String(), s.GoString(),
	}
	js, err := json.Marshal(map[string]any{"tok": s, "h": h, "p": &s})
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(js))
	txt, _ := s.MarshalText()
	outs = append(outs, string(txt))
	for _, o := range outs {
		if strings.Contains(o, leakToken) || strings.Contains(o, fmt.Sprintf("%x", leakToken)) {
			t.Fatalf("secret leaked: %s", o)
		}
	}
	if !strings.Contains(string(js), `"tok":"***"`) {
		t.Fatalf("JSON should show the mask: %s", js)
	}
	if s.Source() != "token_env HA_TOKEN" || s.Empty() {
		t.Fatalf("source %q empty %v", s.Source(), s.Empty())
	}
}

// Secret embeds power.Secret in an exported field of a local type.
type Secret struct{ power.Secret }

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ha.token")
	if err := os.WriteFile(file, []byte(leakToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SPARKLANE_TEST_HA_TOKEN", leakToken)
	s, err := power.LoadToken(config.Power{Relay: "switch.x", TokenEnv: "SPARKLANE_TEST_HA_TOKEN"})
	if err != nil || s.Empty() || s.Source() != "token_env SPARKLANE_TEST_HA_TOKEN" {
		t.Fatalf("token_env: %v %q", err, s.Source())
	}
	s, err = power.LoadToken(config.Power{Relay: "switch.x", TokenFile: file})
	if err != nil || s.Source() != "token_file "+file {
		t.Fatalf("token_file: %v %q", err, s.Source())
	}
	// env unset falls back to the file
	s, err = power.LoadToken(config.Power{TokenEnv: "SPARKLANE_TEST_UNSET_VAR", TokenFile: file})
	if err != nil || s.Source() != "token_file "+file {
		t.Fatalf("fallback: %v %q", err, s.Source())
	}

	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	bad := []struct {
		p    config.Power
		want string
	}{
		{config.Power{Relay: "switch.x"}, "neither power.token_env nor power.token_file"},
		{config.Power{TokenEnv: "SPARKLANE_TEST_UNSET_VAR"}, "power.token_env SPARKLANE_TEST_UNSET_VAR is empty or unset"},
		{config.Power{TokenFile: filepath.Join(dir, "missing")}, "does not exist"},
		{config.Power{TokenFile: empty}, "is empty"},
	}
	for _, b := range bad {
		_, err := power.LoadToken(b.p)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: want error containing %q, got %v", b.p, b.want, err)
			continue
		}
		if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec {
			t.Errorf("%+v: want InvalidSpec, got %q", b.p, typ)
		}
		if strings.Contains(err.Error(), leakToken) {
			t.Errorf("error leaks the token: %v", err)
		}
	}
}
