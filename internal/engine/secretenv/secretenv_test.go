package secretenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/fault"
)

// Values come from the node worker's environment and from files; the
// errors name variable, source and fix but never a value.
func TestResolveFromEnvAndFile(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "hf_token")
	if err := os.WriteFile(tokenFile, []byte("hf-file-secret-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NODE_API_KEY": "env-secret-456"}
	got, err := Resolve(map[string]string{"API_KEY": "env:NODE_API_KEY", "HF_TOKEN": "file:" + tokenFile},
		func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got["API_KEY"] != "env-secret-456" || got["HF_TOKEN"] != "hf-file-secret-123" {
		t.Errorf("resolved %v", got)
	}

	_, err = Resolve(map[string]string{"A": "env:UNSET_ONE", "B": "file:" + filepath.Join(dir, "nope"), "C": "plain-text-token"},
		func(string) string { return "" }, nil)
	if err == nil {
		t.Fatal("missing sources resolved")
	}
	for _, want := range []string{"env_from.A: UNSET_ONE is not set", "env_from.B: read " + filepath.Join(dir, "nope"), "env_from.C: not a source", "env:NAME"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "plain-text-token") {
		t.Errorf("a token pasted into env_from is echoed by the error: %q", err)
	}
	if typ, ok := fault.TypeOf(err); !ok || typ != fault.InvalidSpec {
		t.Errorf("a missing secret is not permanent: %v", err)
	}
}

func TestParse(t *testing.T) {
	for src, ok := range map[string]bool{"env:HF_TOKEN": true, "file:/etc/sparklane/hf": true, "env:1BAD": false, "file:rel/path": false, "file:/a/../b": false, "vault:x": false, "HF_TOKEN": false} {
		_, err := Parse(src)
		if (err == nil) != ok {
			t.Errorf("Parse(%q) error %v, want ok=%v", src, err, ok)
		}
	}
}

func TestMaskHidesEverySecretLongestFirst(t *testing.T) {
	out := Mask("boot: key=abcd1234 prefix=abcd1234xyz n=1", []string{"abcd1234", "abcd1234xyz", "1"})
	if strings.Contains(out, "abcd") || !strings.Contains(out, "n=1") || strings.Count(out, Masked) != 2 {
		t.Errorf("masked %q", out)
	}
}

// One rule names secrets for every masker: whole words of the name, so
// token counts and tokenizer paths stay readable.
func TestLooksSecretByWord(t *testing.T) {
	for name, want := range map[string]bool{
		"HF_TOKEN": true, "OPENAI_API_KEY": true, "--api-key": true, "--hf-token": true, "DB_PASSWORD": true, "aws_secret_access_key": true,
		"MAX_NUM_BATCHED_TOKENS": false, "TOKENIZER": false, "--tokenizer": false, "NCCL_IB_HCA": false, "SIM_LANE": false, "MONKEY": false,
	} {
		if got := LooksSecret(name); got != want {
			t.Errorf("LooksSecret(%q) = %v, want %v", name, got, want)
		}
	}
	if MaskValue("HF_TOKEN", "hf_abc") != Masked || MaskValue("TOKENIZER", "/m/tok") != "/m/tok" || MaskValue("HF_TOKEN", "") != "" {
		t.Error("MaskValue does not follow LooksSecret")
	}
}
