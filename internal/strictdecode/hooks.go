package strictdecode

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
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
// (a size inside a table, one entry of a string map).
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
		return nil, fmt.Errorf("expected a duration string like \"5s\", got %s", Describe(from.Interface()))
	}
}

// sizeHook fills int64 fields tagged unit:"bytes" from sizes written like
// "100G" (ParseSize). It runs on the table holding the field, because a
// hook on the int64 itself could not tell a size from a count.
func sizeHook(from, to reflect.Value) (any, error) {
	t, m, ok := structTable(from, to)
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
			if n, isInt = AsInt(v); !isInt {
				errs = append(errs, &subKeyError{Key: key, Msg: fmt.Sprintf("expected a size like \"100G\", \"1.5T\" or \"512M\", got %s", Describe(v))})
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
				return nil, fmt.Errorf("expected a table, got %s", Describe(v))
			}
			out := make(map[string]string, len(m))
			var errs []error
			for _, k := range slices.Sorted(maps.Keys(m)) {
				str, ok := ScalarString(m[k])
				if !ok {
					errs = append(errs, &subKeyError{Key: k, Msg: fmt.Sprintf("expected a string, got %s", Describe(m[k]))})
					continue
				}
				out[k] = str
			}
			return out, errors.Join(errs...)
		case t == anyMapType:
			m, ok := normalize(v).(map[string]any)
			if !ok {
				return nil, fmt.Errorf("expected a table, got %s", Describe(v))
			}
			return m, nil
		}
		switch t.Kind() {
		case reflect.Interface:
			return normalize(v), nil
		case reflect.String:
			if !isStr {
				return nil, fmt.Errorf("expected a string, got %s: quote it", Describe(v))
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
			return nil, fmt.Errorf("expected true or false, got %s", Describe(v))
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n, ok := AsInt(v)
			if !ok && isStr && fromEnv {
				var err error
				n, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64)
				ok = err == nil
			}
			if !ok {
				return nil, fmt.Errorf("expected an integer, got %s", Describe(v))
			}
			if to.OverflowInt(n) {
				return nil, fmt.Errorf("%d is out of range", n)
			}
			return n, nil
		case reflect.Float32, reflect.Float64:
			if f, ok := v.(float64); ok {
				return f, nil
			}
			if n, ok := AsInt(v); ok {
				return float64(n), nil
			}
			if isStr && fromEnv {
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
					return f, nil
				}
			}
			return nil, fmt.Errorf("expected a number, got %s", Describe(v))
		case reflect.Struct, reflect.Map:
			if _, ok := v.(map[string]any); !ok {
				return nil, fmt.Errorf("expected a table, got %s", Describe(v))
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
			return nil, fmt.Errorf("expected an array, got %s", Describe(v))
		}
		return v, nil
	}
}

// structTable is what the table-level hooks (sizeHook, minDurationHook)
// work on: the struct type being decoded into and the table the file
// wrote for it. ok is false for any other decode step, which they pass
// through unchanged.
func structTable(from, to reflect.Value) (reflect.Type, map[string]any, bool) {
	t := to.Type()
	if t.Kind() != reflect.Struct || t == durationType {
		return nil, nil, false
	}
	m, ok := from.Interface().(map[string]any)
	return t, m, ok
}

// minDurationHook refuses a written duration below its field's floor
// (tag min:"1s"). It runs on the table holding the field, so it sees what
// the file wrote: an unwritten field keeps its zero (the default), while
// a written "0s" is below the floor and refused, naming the key.
func minDurationHook(from, to reflect.Value) (any, error) {
	t, m, ok := structTable(from, to)
	if !ok {
		return from.Interface(), nil
	}
	var errs []error
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		floor := f.Tag.Get("min")
		if floor == "" || f.Type != durationType {
			continue
		}
		minD, err := time.ParseDuration(floor)
		if err != nil {
			return nil, fmt.Errorf("field %s: bad min tag %q: %w", f.Name, floor, err)
		}
		key := fieldKey(f)
		v, present := m[key]
		if !present || v == nil {
			continue
		}
		var d time.Duration
		switch x := v.(type) {
		case time.Duration:
			d = x
		case string:
			if d, err = time.ParseDuration(strings.TrimSpace(x)); err != nil {
				continue // durationHook says what is wrong with it
			}
		default:
			continue
		}
		if d < minD {
			errs = append(errs, &subKeyError{Key: key, Msg: fmt.Sprintf("%s is below its floor of %s: write at least %s (leave it out for the default)", d, minD, floor)})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, nil
}
