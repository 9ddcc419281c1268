package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

// Decoding is mapstructure's (viper's decoder) with three hooks: durations
// ("30s"), byte sizes ("100G", fields tagged unit:"bytes") and a strict
// type check whose messages say what to write. A hook error carries the
// key mapstructure was decoding, so every type error names its key path.

var (
	durationType  = reflect.TypeOf(time.Duration(0))
	stringMapType = reflect.TypeOf(map[string]string(nil))
	anyMapType    = reflect.TypeOf(map[string]any(nil))
)

// subKeyError is an error about key Key below the value a hook was handed
// (a size inside a [[staging]] table, one entry of an env table).
type subKeyError struct {
	Key string
	Msg string
}

func (e *subKeyError) Error() string { return e.Key + ": " + e.Msg }

// durationHook reads a time.Duration from a Go duration string.
func durationHook(from, to reflect.Value) (any, error) {
	if to.Type() != durationType {
		return from.Interface(), nil
	}
	switch x := from.Interface().(type) {
	case time.Duration:
		return x, nil
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(x))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration: write it like \"5s\", \"2m\" or \"1h30m\"", x)
		}
		return d, nil
	default:
		return nil, fmt.Errorf("expected a duration string like \"5s\", got %s", describe(from.Interface()))
	}
}

// sizeHook fills int64 fields tagged unit:"bytes" from sizes written like
// "100G" (ParseSize). It runs on the table holding the field, because a
// hook on the int64 itself could not tell min_free from a row count.
func sizeHook(from, to reflect.Value) (any, error) {
	t := to.Type()
	if t.Kind() != reflect.Struct || t == durationType {
		return from.Interface(), nil
	}
	m, ok := from.Interface().(map[string]any)
	if !ok {
		return from.Interface(), nil
	}
	var out map[string]any
	var errs []error
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Tag.Get("unit") != "bytes" {
			continue
		}
		key := fieldKey(f)
		v, present := m[key]
		if !present || v == nil {
			continue
		}
		var n int64
		switch x := v.(type) {
		case string:
			var err error
			if n, err = ParseSize(x); err != nil {
				errs = append(errs, &subKeyError{Key: key, Msg: err.Error()})
				continue
			}
		default:
			var isInt bool
			if n, isInt = asInt(v); !isInt {
				errs = append(errs, &subKeyError{Key: key, Msg: fmt.Sprintf("expected a size like \"100G\", \"1.5T\" or \"512M\", got %s", describe(v))})
				continue
			}
		}
		if out == nil {
			out = make(map[string]any, len(m))
			for k, v := range m {
				out[k] = v
			}
		}
		out[key] = n
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if out == nil {
		return m, nil
	}
	return out, nil
}

// typeHook checks that a value has the kind its field needs and says what
// to write when it does not. With fromEnv, strings are also read as
// numbers, booleans and comma-separated lists: that is all an environment
// variable can hold.
func typeHook(fromEnv bool) mapstructure.DecodeHookFuncValue {
	return func(from, to reflect.Value) (any, error) {
		t := to.Type()
		v := from.Interface()
		s, isStr := v.(string)
		switch {
		case t == durationType:
			return v, nil
		case t == stringMapType:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("expected a table, got %s", describe(v))
			}
			out := make(map[string]string, len(m))
			var errs []error
			for _, k := range sortedKeys(m) {
				str, ok := scalarString(m[k])
				if !ok {
					errs = append(errs, &subKeyError{Key: k, Msg: fmt.Sprintf("expected a string, got %s", describe(m[k]))})
					continue
				}
				out[k] = str
			}
			return out, errors.Join(errs...)
		case t == anyMapType:
			m, ok := normalize(v).(map[string]any)
			if !ok {
				return nil, fmt.Errorf("expected a table, got %s", describe(v))
			}
			return m, nil
		}
		switch t.Kind() {
		case reflect.Interface:
			return normalize(v), nil
		case reflect.String:
			if !isStr {
				return nil, fmt.Errorf("expected a string, got %s: quote it", describe(v))
			}
			return s, nil
		case reflect.Bool:
			if b, ok := v.(bool); ok {
				return b, nil
			}
			if isStr && fromEnv {
				if b, err := strconv.ParseBool(strings.TrimSpace(s)); err == nil {
					return b, nil
				}
			}
			return nil, fmt.Errorf("expected true or false, got %s", describe(v))
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n, ok := asInt(v)
			if !ok && isStr && fromEnv {
				var err error
				n, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64)
				ok = err == nil
			}
			if !ok {
				return nil, fmt.Errorf("expected an integer, got %s", describe(v))
			}
			if to.OverflowInt(n) {
				return nil, fmt.Errorf("%d is out of range", n)
			}
			return n, nil
		case reflect.Float32, reflect.Float64:
			if f, ok := v.(float64); ok {
				return f, nil
			}
			if n, ok := asInt(v); ok {
				return float64(n), nil
			}
			if isStr && fromEnv {
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
					return f, nil
				}
			}
			return nil, fmt.Errorf("expected a number, got %s", describe(v))
		case reflect.Struct:
			if _, ok := v.(map[string]any); !ok {
				return nil, fmt.Errorf("expected a table, got %s", describe(v))
			}
			return v, nil
		case reflect.Slice:
			switch x := v.(type) {
			case []any:
				return x, nil
			case []string:
				return x, nil
			}
			if isStr && fromEnv {
				var out []any
				for _, part := range strings.Split(s, ",") {
					if part = strings.TrimSpace(part); part != "" {
						out = append(out, part)
					}
				}
				return out, nil
			}
			return nil, fmt.Errorf("expected an array, got %s", describe(v))
		case reflect.Map:
			if _, ok := v.(map[string]any); !ok {
				return nil, fmt.Errorf("expected a table, got %s", describe(v))
			}
			return v, nil
		}
		return v, nil
	}
}

// decoderConfig is the mapstructure setup for config and recipe structs:
// unknown keys are errors (ErrorUnused, as viper's UnmarshalExact), no
// weak typing beyond what the hooks allow.
func decoderConfig(c *mapstructure.DecoderConfig, fromEnv bool) {
	c.DecodeHook = mapstructure.ComposeDecodeHookFunc(sizeHook, durationHook, typeHook(fromEnv))
	c.ErrorUnused = true
	c.WeaklyTypedInput = false
	c.ZeroFields = false
	c.TagName = "mapstructure"
}

// decodeTree decodes a parsed file tree into out with the strict hooks.
func decodeTree(tree map[string]any, out any) error {
	c := &mapstructure.DecoderConfig{Result: out}
	decoderConfig(c, false)
	d, err := mapstructure.NewDecoder(c)
	if err != nil {
		return err
	}
	return d.Decode(tree)
}

// decodeErrors turns mapstructure's joined errors into one error per line,
// each "FILE: KEY: what is wrong". Unknown keys reported by ErrorUnused
// are dropped when keysChecked (the raw-key check already named them with
// hints); otherwise they are named here. envVar maps a key path to the
// environment variable that set it, for values that came from there.
func decodeErrors(file string, err error, keysChecked bool, envVar func(key string) string) []error {
	var out []error
	var walk func(e error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if de, ok := e.(*mapstructure.DecodeError); ok {
			name := de.Name()
			if strings.HasPrefix(name, "config.") && !strings.Contains(name, "[") {
				name = "" // ErrorUnused names the root by its Go type (config.Recipe)
			}
			inner := de.Unwrap()
			msg := ""
			if inner != nil {
				msg = inner.Error()
			}
			if rest, ok := strings.CutPrefix(msg, "has invalid keys: "); ok {
				if keysChecked {
					return
				}
				keys := strings.Split(rest, ", ")
				sort.Strings(keys)
				for _, k := range keys {
					out = append(out, fmt.Errorf("%s: unknown key %s", file, join(name, k)))
				}
				return
			}
			subs := subKeyErrors(inner)
			if len(subs) == 0 {
				out = append(out, keyErr(file, name, msg, envVar))
				return
			}
			for _, s := range subs {
				out = append(out, keyErr(file, join(name, s.Key), s.Msg, envVar))
			}
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		// "decoding failed due to the following error(s)" wraps the list.
		if inner := errors.Unwrap(e); inner != nil {
			walk(inner)
			return
		}
		out = append(out, fmt.Errorf("%s: %v", file, e))
	}
	walk(err)
	return out
}

func keyErr(file, key, msg string, envVar func(string) string) error {
	if envVar != nil {
		if ev := envVar(key); ev != "" {
			return fmt.Errorf("%s: %s (from $%s): %s", file, key, ev, msg)
		}
	}
	if key == "" {
		return fmt.Errorf("%s: %s", file, msg)
	}
	return fmt.Errorf("%s: %s: %s", file, key, msg)
}

func subKeyErrors(e error) []*subKeyError {
	if s, ok := e.(*subKeyError); ok {
		return []*subKeyError{s}
	}
	j, ok := e.(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	var out []*subKeyError
	for _, x := range j.Unwrap() {
		s, ok := x.(*subKeyError)
		if !ok {
			return nil
		}
		out = append(out, s)
	}
	return out
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

func describe(v any) string {
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
