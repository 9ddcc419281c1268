package hubfetch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// EndpointFromEnv returns HF_ENDPOINT (without a trailing slash) or
// DefaultEndpoint, as the Hub's own tools do, so a mirror or a proxy set
// for `hf` applies to sparklane too.
func EndpointFromEnv() string {
	if e := strings.TrimRight(strings.TrimSpace(os.Getenv("HF_ENDPOINT")), "/"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// TokenFromEnv finds the token the Hub's tools would use, in their order:
// HF_TOKEN, then the legacy HUGGING_FACE_HUB_TOKEN, then the token file
// (HF_TOKEN_PATH, else $HF_HOME/token, else
// $XDG_CACHE_HOME/huggingface/token, else ~/.cache/huggingface/token). It
// returns the token and where it came from (a variable name or the file's
// path, for error messages); no token at all is "", "", nil. The token is
// never part of an error.
func TokenFromEnv() (Secret, string, error) {
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := cleanToken(os.Getenv(v)); t != "" {
			return Secret(t), v, nil
		}
	}
	p := tokenPath()
	if p == "" {
		return "", "", nil
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read the Hub token file %s: %w", p, err)
	}
	if t := cleanToken(string(b)); t != "" {
		return Secret(t), p, nil
	}
	return "", "", nil
}

// tokenPath is huggingface_hub's HF_TOKEN_PATH default chain.
func tokenPath() string {
	if p := os.Getenv("HF_TOKEN_PATH"); p != "" {
		return expandHome(p)
	}
	if h := os.Getenv("HF_HOME"); h != "" {
		return filepath.Join(expandHome(h), "token")
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(expandHome(x), "huggingface", "token")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "huggingface", "token")
}

func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// cleanToken drops CR/LF and surrounding blanks, as huggingface_hub does.
func cleanToken(t string) string {
	return strings.TrimSpace(strings.NewReplacer("\r", "", "\n", "").Replace(t))
}
