package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.uber.org/zap"
)

// key is one line of the keys file: the sha256 of a key and, optionally,
// the model names it may ask for. It is named in logs by its line only.
type key struct {
	line  int
	hash  [sha256.Size]byte
	names map[string]bool // nil: every name
}

// allows says whether k may ask for name (a nil key: anonymous, anything).
func (k *key) allows(name string) bool {
	return k == nil || k.names == nil || k.names[name]
}

// keyring is the keys file as loaded.
type keyring struct {
	file string
	keys []key
}

// parseKeys reads a keys file: a key a line as "sha256:HEX" or
// "sha256:HEX name1,name2"; blank lines and # comments are skipped. An
// error names the file and the line, never what the line holds.
func parseKeys(file string, data []byte) (*keyring, error) {
	kr := &keyring{file: file}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) > 2 {
			return nil, fmt.Errorf("api_keys_file %s line %d: want \"sha256:HEX\" or \"sha256:HEX name1,name2\" (names separated by commas, no spaces)", file, n)
		}
		hexs, ok := strings.CutPrefix(fields[0], "sha256:")
		raw, err := hex.DecodeString(hexs)
		if !ok || err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("api_keys_file %s line %d: not \"sha256:\" and 64 hex digits (the sha256 of the key, as `printf %%s KEY | sha256sum` prints it)", file, n)
		}
		k := key{line: n}
		copy(k.hash[:], raw)
		if prev, dup := seen[k.hash]; dup {
			return nil, fmt.Errorf("api_keys_file %s line %d: the same key as line %d: keep one line per key", file, n, prev)
		}
		seen[k.hash] = n
		if len(fields) == 2 {
			k.names = map[string]bool{}
			for _, name := range strings.Split(fields[1], ",") {
				if name == "" {
					return nil, fmt.Errorf("api_keys_file %s line %d: an empty model name in the list: write names separated by single commas", file, n)
				}
				k.names[name] = true
			}
		}
		kr.keys = append(kr.keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("api_keys_file %s: %w", file, err)
	}
	return kr, nil
}

// match is the key whose hash is token's, nil when none: every key is
// compared, in constant time.
func (kr *keyring) match(token string) *key {
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range kr.keys {
		if subtle.ConstantTimeCompare(sum[:], kr.keys[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return &kr.keys[found]
}

// ReloadKeys reads api_keys_file again (a key added or revoked takes
// effect for the next request); on error the keys in use stay.
func (g *Gateway) ReloadKeys() error {
	if g.cfg.APIKeysFile == "" {
		return nil
	}
	b, err := os.ReadFile(g.cfg.APIKeysFile)
	if err != nil {
		return fmt.Errorf("api_keys_file %s: %w", g.cfg.APIKeysFile, err)
	}
	kr, err := parseKeys(g.cfg.APIKeysFile, b)
	if err != nil {
		return err
	}
	if len(kr.keys) == 0 {
		g.log.Warn("gateway: api_keys_file holds no key: every request gets 401", zap.String("file", kr.file))
	}
	g.keys.Store(kr)
	g.log.Info("gateway keys loaded", zap.String("file", kr.file), zap.Int("keys", len(kr.keys)))
	return nil
}

// authenticate finds the request's key (nil without api_keys_file).
func (g *Gateway) authenticate(r *http.Request) (*key, *apiError) {
	kr := g.keys.Load()
	if kr == nil {
		return nil, nil
	}
	h := r.Header.Get("Authorization")
	scheme, token, _ := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, &apiError{status: http.StatusUnauthorized, typ: typeInvalid, code: "missing_api_key", reason: "unauthorized",
			msg: "You didn't provide an API key: send it as \"Authorization: Bearer KEY\"."}
	}
	k := kr.match(token)
	if k == nil {
		return nil, &apiError{status: http.StatusUnauthorized, typ: typeInvalid, code: "invalid_api_key", reason: "unauthorized",
			msg: "Incorrect API key provided."}
	}
	return k, nil
}

// errForbidden is a key asking for a name it is not given.
func errForbidden(name string) *apiError {
	return &apiError{status: http.StatusForbidden, typ: typeInvalid, param: "model", code: "model_not_allowed", reason: "forbidden",
		msg: fmt.Sprintf("this API key may not use the model `%s`", name)}
}
