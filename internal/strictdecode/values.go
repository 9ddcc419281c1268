package strictdecode

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/docker/go-units"
)

// The values of a parsed tree as the hooks and callers read them: the
// integer types of the TOML and YAML parsers taken as one, scalars as
// text, and values named in messages the way an operator wrote them.

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtTpP]?)(i?)([bB]?)$`)

// ParseSize reads a byte size as operators write it: "100G", "55G",
// "1.5T", "512M", "100GiB", "4096". A bare unit letter and the "iB" forms
// are binary (G = 2^30, what df -h prints; go-units' RAMInBytes); "GB",
// "TB"... are decimal (go-units' FromHumanSize). The form is checked first
// so that what go-units would also accept ("1e3", "5 b") stays an error.
// Fields tagged unit:"bytes" are decoded with it.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	m := sizeRE.FindStringSubmatch(t)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size: write it like \"100G\", \"1.5T\" or \"512M\"", s)
	}
	unit, iB, b := m[2], m[3] != "", m[4] != ""
	if iB && unit == "" {
		return 0, fmt.Errorf("%q is not a size: \"i\" needs a unit letter (GiB)", s)
	}
	if unit == "" && strings.Contains(m[1], ".") {
		return 0, fmt.Errorf("%q: a byte count must be whole", s)
	}
	num, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	parse, base := units.RAMInBytes, 1024.0
	if unit != "" && b && !iB {
		parse, base = units.FromHumanSize, 1000
	}
	if num*math.Pow(base, float64(strings.IndexAny("KMGTP", strings.ToUpper(unit))+1)) >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	n, err := parse(strings.ReplaceAll(t, " ", ""))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size: write it like \"100G\", \"1.5T\" or \"512M\"", s)
	}
	return n, nil
}

// AsInt reads v as an integer when it is one: any of the parsers' integer
// types, or a float64 without a fraction (YAML and JSON numbers) small
// enough to be exact.
func AsInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), true
		}
	}
	return 0, false
}

// ScalarString turns a scalar into its text (env = { EP_SIZE = 1 } is
// meant as "1"); tables and arrays are refused.
func ScalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	}
	if n, ok := AsInt(v); ok {
		return strconv.FormatInt(n, 10), true
	}
	return "", false
}

// normalize maps the integer types of the TOML and YAML parsers onto int64
// and nested maps/slices likewise, so a value (and a hash of it) does not
// depend on which format it came from.
func normalize(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = normalize(e)
		}
		return out
	}
	return v
}

// Describe names a value for a message saying it has the wrong type:
// string "x", a table, an array, nothing, or its Go type and value.
func Describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", x)
	case map[string]any, map[any]any:
		return "a table"
	case []any:
		return "an array"
	case nil:
		return "nothing"
	default:
		return fmt.Sprintf("%T %v", v, v)
	}
}
