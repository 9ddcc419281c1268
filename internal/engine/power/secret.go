package power

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/fault"
)

// Masked is what a Secret prints as everywhere: logs, errors, JSON, %#v.
const Masked = "***"

// Secret holds a credential (the Home Assistant token, a RouterOS password)
// so that it cannot leak by accident: every way of printing or marshalling
// it yields "***". The value sits behind a pointer so that even printing a
// struct that embeds a Secret in an unexported field shows an address, not
// the text. Only this package reads the value, to put it on the wire.
type Secret struct {
	v   *string
	src string
}

// NewSecret wraps value; source says where it came from ("token_env HA_TOKEN")
// so errors can tell the operator which credential to fix without showing it.
func NewSecret(value, source string) Secret {
	return Secret{v: &value, src: source}
}

// Source names where the secret was read from, for error messages.
func (s Secret) Source() string {
	if s.src == "" {
		return "an unnamed source"
	}
	return s.src
}

// Empty reports whether no value is held, so callers can refuse to send an
// empty credential.
func (s Secret) Empty() bool { return s.v == nil || *s.v == "" }

func (s Secret) reveal() string {
	if s.v == nil {
		return ""
	}
	return *s.v
}

// String masks the value so %s and %v never print it.
func (s Secret) String() string { return Masked }

// GoString masks the value so %#v never prints it.
func (s Secret) GoString() string { return Masked }

// Format masks the value for every verb (%x, %q, %d ...), not only %s and %v.
func (s Secret) Format(f fmt.State, verb rune) { _, _ = f.Write([]byte(Masked)) }

// MarshalJSON masks the value so a Secret in a result or report stays hidden.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + Masked + `"`), nil }

// MarshalText masks the value for text encoders (YAML, TOML, zap).
func (s Secret) MarshalText() ([]byte, error) { return []byte(Masked), nil }

// scrub replaces every occurrence of the secret in text, for the rare place
// where foreign text (a server's error body) is quoted in an error.
func (s Secret) scrub(text string) string {
	v := s.reveal()
	if len(v) < 4 {
		return text
	}
	return strings.ReplaceAll(text, v, Masked)
}

// LoadToken reads the Home Assistant token for p from the environment
// variable named by token_env, or else the file named by token_file. The
// token is never taken from config itself, so it never lands in config
// files, workflow inputs or history. When both are set, a non-empty
// token_env wins and token_file is the fallback.
func LoadToken(p config.Power) (Secret, error) {
	return loadToken(p, os.Getenv)
}

func loadToken(p config.Power, getenv func(string) string) (Secret, error) {
	if p.TokenEnv == "" && p.TokenFile == "" {
		return Secret{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf(
			"power.relay %q: neither power.token_env nor power.token_file is set: name the environment variable or file that holds the Home Assistant token", p.Relay))
	}
	if p.TokenEnv != "" {
		if v := strings.TrimSpace(getenv(p.TokenEnv)); v != "" {
			return NewSecret(v, "token_env "+p.TokenEnv), nil
		}
		if p.TokenFile == "" {
			return Secret{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf(
				"power.token_env %s is empty or unset in this worker's environment: export the Home Assistant long-lived token there", p.TokenEnv))
		}
	}
	b, err := os.ReadFile(p.TokenFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Secret{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf(
				"power.token_file %s does not exist: write the Home Assistant token there or fix the path", p.TokenFile))
		}
		// Read errors name the path only; they cannot contain file content.
		return Secret{}, fmt.Errorf("power.token_file %s: %w", p.TokenFile, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return Secret{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf(
			"power.token_file %s is empty: write the Home Assistant long-lived token there", p.TokenFile))
	}
	return NewSecret(v, "token_file "+p.TokenFile), nil
}
