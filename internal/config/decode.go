package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// decoder copies a generic TOML/YAML tree (maps, slices, scalars) into the
// config structs, collecting every unknown key and wrong type with its full
// key path instead of stopping at the first or silently dropping it.
type decoder struct {
	file string
	// rootKeys are the valid keys of the file's top level; an unknown key
	// deeper down that matches one gets the "root keys must come first" hint.
	rootKeys []string
	errs     []error
}

var durationType = reflect.TypeOf(time.Duration(0))

func (d *decoder) fail(key, format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf("%s: %s: %s", d.file, key, fmt.Sprintf(format, args...)))
}

// fieldKey is the file key a struct field is read from: its mapstructure
// tag, else its json tag, else "" (not read from files).
func fieldKey(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	for _, tag := range []string{"mapstructure", "json"} {
		v, ok := f.Tag.Lookup(tag)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(v, ",")
		if name == "-" {
			return ""
		}
		if name != "" {
			return name
		}
	}
	return ""
}

// structKeys lists the file keys of a struct type, for hints.
func structKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		if k := fieldKey(t.Field(i)); k != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", x)
	case map[string]any:
		return "a table"
	case []any:
		return "an array"
	case nil:
		return "nothing"
	default:
		return fmt.Sprintf("%T %v", v, v)
	}
}

// decode copies in (a value from the parsed tree) into out at key path.
func (d *decoder) decode(path string, in any, out reflect.Value, fieldName string) {
	t := out.Type()
	if t == durationType {
		switch x := in.(type) {
		case string:
			dur, err := time.ParseDuration(x)
			if err != nil {
				d.fail(path, "%q is not a duration: write it like \"5s\", \"2m\" or \"1h30m\"", x)
				return
			}
			out.SetInt(int64(dur))
		default:
			d.fail(path, "expected a duration string like \"5s\", got %s", describe(in))
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := in.(map[string]any)
		if !ok {
			d.fail(path, "expected a table, got %s", describe(in))
			return
		}
		fields := map[string]int{}
		for i := 0; i < t.NumField(); i++ {
			if k := fieldKey(t.Field(i)); k != "" {
				fields[k] = i
			}
		}
		for _, k := range sortedKeys(m) {
			i, ok := fields[k]
			if !ok {
				d.unknown(path, k, structKeys(t))
				continue
			}
			d.decode(join(path, k), m[k], out.Field(i), t.Field(i).Name)
		}
	case reflect.String:
		switch x := in.(type) {
		case string:
			out.SetString(x)
		default:
			d.fail(path, "expected a string, got %s: quote it", describe(in))
		}
	case reflect.Bool:
		b, ok := in.(bool)
		if !ok {
			d.fail(path, "expected true or false, got %s", describe(in))
			return
		}
		out.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		if s, ok := in.(string); ok && fieldName == "MinFree" {
			n, err := ParseSize(s)
			if err != nil {
				d.fail(path, "%v", err)
				return
			}
			out.SetInt(n)
			return
		}
		n, ok := asInt(in)
		if !ok {
			if fieldName == "MinFree" {
				d.fail(path, "expected a size like \"100G\", \"1.5T\" or \"512M\", got %s", describe(in))
			} else {
				d.fail(path, "expected an integer, got %s", describe(in))
			}
			return
		}
		if out.OverflowInt(n) {
			d.fail(path, "%d is out of range", n)
			return
		}
		out.SetInt(n)
	case reflect.Float64:
		switch x := in.(type) {
		case float64:
			out.SetFloat(x)
		default:
			n, ok := asInt(in)
			if !ok {
				d.fail(path, "expected a number, got %s", describe(in))
				return
			}
			out.SetFloat(float64(n))
		}
	case reflect.Slice:
		arr, ok := in.([]any)
		if !ok {
			d.fail(path, "expected an array, got %s", describe(in))
			return
		}
		s := reflect.MakeSlice(t, len(arr), len(arr))
		for i, v := range arr {
			d.decode(fmt.Sprintf("%s[%d]", path, i), v, s.Index(i), fieldName)
		}
		out.Set(s)
	case reflect.Map:
		m, ok := in.(map[string]any)
		if !ok {
			d.fail(path, "expected a table, got %s", describe(in))
			return
		}
		res := reflect.MakeMapWithSize(t, len(m))
		for _, k := range sortedKeys(m) {
			v := m[k]
			kp := join(path, k)
			switch t.Elem().Kind() {
			case reflect.String:
				s, ok := scalarString(v)
				if !ok {
					d.fail(kp, "expected a string, got %s", describe(v))
					continue
				}
				res.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(s))
			case reflect.Interface:
				res.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(normalize(v)))
			default:
				ev := reflect.New(t.Elem()).Elem()
				d.decode(kp, v, ev, fieldName)
				res.SetMapIndex(reflect.ValueOf(k), ev)
			}
		}
		out.Set(res)
	case reflect.Interface:
		if in != nil {
			out.Set(reflect.ValueOf(normalize(in)))
		}
	default:
		d.fail(path, "cannot read a %s here (internal: unsupported field kind)", t.Kind())
	}
}

// unknown records an unknown key with the most useful hint.
func (d *decoder) unknown(path, key string, valid []string) {
	full := join(path, key)
	hint := ""
	if path != "" && contains(d.rootKeys, key) {
		hint = fmt.Sprintf(" — did you mean the root key %s? Root keys must come before the first [[table]] header", key)
	} else if near := nearest(key, valid); near != "" {
		hint = fmt.Sprintf(" — did you mean %s?", join(path, near))
	} else if len(valid) > 0 {
		hint = " — valid keys here: " + strings.Join(valid, ", ")
	}
	d.errs = append(d.errs, fmt.Errorf("%s: unknown key %s%s", d.file, full, hint))
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func asInt(v any) (int64, bool) {
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

// scalarString turns a scalar into its text (env = { EP_SIZE = 1 } is
// meant as "1"); tables and arrays are refused.
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	}
	if n, ok := asInt(v); ok {
		return strconv.FormatInt(n, 10), true
	}
	return "", false
}

// normalize maps the integer types of the TOML and YAML parsers onto int64
// and nested maps/slices likewise, so a recipe's hash does not depend on
// which format it came from.
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

// nearest returns the valid key closest to key when the edit distance is
// small enough to be a typo.
func nearest(key string, valid []string) string {
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
