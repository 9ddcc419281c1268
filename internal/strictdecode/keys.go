package strictdecode

import (
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// keyCheck walks a parsed file (go-toml or YAML, keys exactly as written)
// against the struct it will be decoded into and reports every key that
// is unknown or written in the wrong case, with its full path and the most
// useful hint. It runs before decoding because viper folds keys to lower
// case and mapstructure matches field names case-insensitively: neither
// would ever report State_Dir. Types are left to the decode hooks.
type keyCheck struct {
	file string
	// rootKeys are the valid keys of the file's top level; an unknown key
	// deeper down that matches one gets the "root keys must come first" hint.
	rootKeys []string
	errs     []error
}

func checkKeys(file string, tree map[string]any, t reflect.Type) []error {
	k := &keyCheck{file: file, rootKeys: structKeys(t)}
	k.walk("", tree, t)
	return k.errs
}

func (k *keyCheck) walk(path string, v any, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
	case t.Kind() == reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return // a type error, reported by the decoder
		}
		fields := structFields(t)
		valid := structKeys(t)
		for _, key := range slices.Sorted(maps.Keys(m)) {
			if ft, ok := fields[key]; ok {
				k.walk(join(path, key), m[key], ft)
				continue
			}
			k.unknown(path, key, valid)
		}
	case t.Kind() == reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return
		}
		for i, e := range arr {
			k.walk(fmt.Sprintf("%s[%d]", path, i), e, t.Elem())
		}
	}
}

// unknown records an unknown key with the most useful hint: the case to
// write it in, the root key it was meant to be, or the nearest valid key.
func (k *keyCheck) unknown(path, key string, valid []string) {
	full := join(path, quoteKey(key))
	for _, v := range valid {
		if strings.EqualFold(v, key) {
			k.errs = append(k.errs, fmt.Errorf("%s: key %s: write it %s: keys are lower-case (a key in another case would be read as %s without a word)", k.file, full, join(path, v), v))
			return
		}
	}
	hint := ""
	if root := foldFind(k.rootKeys, key); path != "" && root != "" {
		hint = fmt.Sprintf(" — did you mean the root key %s? Root keys must come before the first [[table]] header", root)
	} else if near := Nearest(key, valid); near != "" {
		hint = fmt.Sprintf(" — did you mean %s?", join(path, near))
	} else if len(valid) > 0 {
		hint = " — valid keys here: " + strings.Join(valid, ", ")
	}
	k.errs = append(k.errs, fmt.Errorf("%s: unknown key %s%s", k.file, full, hint))
}

var bareKeyRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// quoteKey writes a key as TOML would need it: bare when it can be, else
// quoted, so a key holding a newline or a dot stays one readable token.
func quoteKey(k string) string {
	if bareKeyRE.MatchString(k) {
		return k
	}
	return strconv.Quote(k)
}

func foldFind(list []string, s string) string {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return x
		}
	}
	return ""
}

// fieldKey is the file key a struct field is read from: its mapstructure
// tag, or "" when the field is not read from files (tag "-", or toml:"-"
// for a value the caller sets from elsewhere, like the file's own path).
func fieldKey(f reflect.StructField) string {
	if !f.IsExported() || f.Tag.Get("toml") == "-" {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		if k := fieldKey(t.Field(i)); k != "" {
			out[k] = t.Field(i).Type
		}
	}
	return out
}

// structKeys lists the file keys of a struct type, for hints.
func structKeys(t reflect.Type) []string {
	return slices.Sorted(maps.Keys(structFields(t)))
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Nearest returns the string of valid closest to key when the edit
// distance is small enough to be a typo, else "": the "did you mean" of an
// unknown key, and of any other name an operator may mistype.
func Nearest(key string, valid []string) string {
	best, bestD := "", 3
	for _, v := range valid {
		if dd := editDistance(key, v); dd < bestD {
			best, bestD = v, dd
		}
	}
	if bestD > len(key)/2 {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // not a typo; keeps hostile keys cheap
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
