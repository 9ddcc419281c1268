package secretenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/sparklane/sparklane/internal/fault"
)

// Kinds of source.
const (
	// FromEnv reads a variable of the node worker's own environment (its
	// systemd unit's EnvironmentFile, say).
	FromEnv = "env"
	// FromFile reads a file on the node (trailing newlines trimmed), e.g. a
	// 0600 file under /etc/sparklane.
	FromFile = "file"
)

// Source is one parsed env_from value.
type Source struct {
	Kind string // FromEnv or FromFile
	Name string // the variable name or the absolute file path
}

// String is the source as written in a recipe ("env:HF_TOKEN").
func (s Source) String() string { return s.Kind + ":" + s.Name }

var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidName reports whether name can be an environment variable's name.
func ValidName(name string) bool { return varName.MatchString(name) }

// Parse reads "env:NAME" or "file:/absolute/path". The error says which
// forms are accepted, so a recipe author fixes it in one go.
func Parse(src string) (Source, error) {
	kind, name, ok := strings.Cut(strings.TrimSpace(src), ":")
	switch {
	case !ok:
	case kind == FromEnv && ValidName(name):
		return Source{Kind: FromEnv, Name: name}, nil
	case kind == FromEnv:
		return Source{}, fmt.Errorf("%q: %q is not a variable name", src, name)
	case kind == FromFile && filepath.IsAbs(name) && filepath.Clean(name) == name:
		return Source{Kind: FromFile, Name: name}, nil
	case kind == FromFile:
		return Source{}, fmt.Errorf("%q: the file must be an absolute, clean path", src)
	}
	// The value is not echoed: a token pasted here by mistake must not
	// reach a log.
	return Source{}, errors.New("not a source (value not shown): use env:NAME (a variable of the node worker's environment) or file:/path (a file on the node), never the secret itself")
}

// Resolve reads every entry of from (variable → source) with getenv and
// readFile (os.Getenv and os.ReadFile on a node worker) and returns the
// values. Errors name the variable, the source and the node's fix — never a
// value — and are permanent: retrying does not create a missing secret.
func Resolve(from map[string]string, getenv func(string) string, readFile func(string) ([]byte, error)) (map[string]string, error) {
	if len(from) == 0 {
		return nil, nil
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	keys := make([]string, 0, len(from))
	for k := range from {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(from))
	var errs []error
	for _, k := range keys {
		src, err := Parse(from[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("env_from.%s: %w", k, err))
			continue
		}
		var v string
		switch src.Kind {
		case FromEnv:
			v = getenv(src.Name)
			if v == "" {
				errs = append(errs, fmt.Errorf("env_from.%s: %s is not set (or empty) in the node worker's environment: set it in the worker's service environment and restart it", k, src.Name))
				continue
			}
		case FromFile:
			b, err := readFile(src.Name)
			if err != nil {
				errs = append(errs, fmt.Errorf("env_from.%s: read %s on the node: %w (create it, readable by the node worker)", k, src.Name, unwrapPath(err)))
				continue
			}
			v = strings.TrimRight(string(b), "\r\n")
			if v == "" {
				errs = append(errs, fmt.Errorf("env_from.%s: %s on the node is empty", k, src.Name))
				continue
			}
		}
		out[k] = v
	}
	if len(errs) > 0 {
		return nil, fault.Permanent(fault.InvalidSpec, errors.Join(errs...))
	}
	return out, nil
}

// unwrapPath drops the *PathError wrapper (its path is already named).
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Masked is what a secret value prints as.
const Masked = "***"

// secretWords are the words (of a name split at '_', '-' and '.') that
// make it a secret's name: HF_TOKEN, OPENAI_API_KEY, --api-key, DB_PASSWORD
// — but not MAX_NUM_BATCHED_TOKENS or TOKENIZER, whose values are plain.
var secretWords = map[string]bool{
	"TOKEN": true, "KEY": true, "APIKEY": true, "SECRET": true, "PASSWORD": true,
	"PASSWD": true, "PASS": true, "CREDENTIAL": true, "CREDENTIALS": true,
}

// LooksSecret reports whether a variable or flag name names a secret: the
// one rule by which the CLI's plans and dry runs and the reports mask a
// value written literally in a recipe's [env] or command (where it should
// not be: [env_from] keeps secrets out of history), and render warns.
func LooksSecret(name string) bool {
	for _, w := range strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool { return r == '_' || r == '-' || r == '.' }) {
		if secretWords[w] {
			return true
		}
	}
	return false
}

// EnvSecrets are the values of the NAME=VALUE entries of env whose name
// looks like a secret's: what to Mask in the output of a process run with
// env.
func EnvSecrets(env []string) []string { return EnvValues(env, LooksSecret) }

// EnvValues are the non-empty values of the NAME=VALUE entries of env whose
// name secret accepts.
func EnvValues(env []string, secret func(name string) bool) []string {
	var out []string
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && v != "" && secret(k) {
			out = append(out, v)
		}
	}
	return out
}

// MaskValue is value, or Masked when name looks like a secret's.
func MaskValue(name, value string) string {
	if value != "" && LooksSecret(name) {
		return Masked
	}
	return value
}

// Mask replaces every occurrence of each secret value in s with Masked:
// the one masker for anything that may echo a resolved value (an engine's
// boot lines, a hook's output) before it is logged or written to a report.
// Values shorter than 4 bytes are left alone (masking "1" would garble
// every number).
func Mask(s string, secrets []string) string {
	vals := append([]string(nil), secrets...)
	// Longest first, so a secret containing another is masked whole.
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	for _, v := range vals {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, Masked)
		}
	}
	return s
}
