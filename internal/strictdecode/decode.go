package strictdecode

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// Decode checks tree, parsed from file (ParseTOML, ParseYAML), against the
// struct out points to and decodes it into out. keyErrs are the keys out
// has no field for, each named by its full path with a hint (the case to
// write it in, the root key it was meant to be, the nearest valid key);
// valueErrs are the values of the wrong type, each naming its key path.
// Every error starts "FILE: ". Both are returned, apart so that a caller
// decoding a sub-table on its own can name its keys under the table.
func Decode(file string, tree map[string]any, out any) (keyErrs, valueErrs []error) {
	t := reflect.TypeOf(out).Elem()
	keyErrs = checkKeys(file, tree, t)
	c := &mapstructure.DecoderConfig{Result: out}
	decoderConfig(c, false)
	d, err := mapstructure.NewDecoder(c)
	if err == nil {
		err = d.Decode(tree)
	}
	if err != nil {
		valueErrs = decodeErrors(file, t.String(), err, len(keyErrs) > 0, nil)
	}
	return keyErrs, valueErrs
}

// DecodeViper decodes what v merged (the file as Decode checked it, the
// environment, defaults) into out with UnmarshalExact, reading strings as
// numbers, booleans and comma-separated lists too, since that is all an
// environment variable can hold. Each error names file and key; envVar
// names the variable that set a key ("" when none did), so an error about
// a value from the environment says so.
func DecodeViper(file string, v *viper.Viper, out any, envVar func(key string) string) []error {
	err := v.UnmarshalExact(out, func(c *mapstructure.DecoderConfig) { decoderConfig(c, true) })
	if err != nil {
		return decodeErrors(file, reflect.TypeOf(out).Elem().String(), err, false, envVar)
	}
	return nil
}

// EnvKeys lists the key paths of struct type t an environment variable may
// set (for viper's BindEnv): every scalar and list, recursing into tables,
// but not into arrays of tables ([[nodes]]), whose entries have no name an
// environment variable could carry.
func EnvKeys(t reflect.Type) []string { return envKeys(t, "") }

func envKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		k := fieldKey(f)
		if k == "" {
			continue
		}
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && ft != durationType:
			out = append(out, envKeys(ft, join(prefix, k))...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
		default:
			out = append(out, join(prefix, k))
		}
	}
	return out
}

// decoderConfig is the strict mapstructure setup: unknown keys are errors
// (ErrorUnused, as viper's UnmarshalExact), no weak typing beyond what the
// hooks allow.
func decoderConfig(c *mapstructure.DecoderConfig, fromEnv bool) {
	c.DecodeHook = mapstructure.ComposeDecodeHookFunc(sizeHook, minDurationHook, durationHook, typeHook(fromEnv))
	c.ErrorUnused = true
	c.WeaklyTypedInput = false
	c.ZeroFields = false
	c.TagName = "mapstructure"
}

// decodeErrors turns mapstructure's joined errors into one error per line,
// each "FILE: KEY: what is wrong". root is the decoded type's name, which
// ErrorUnused gives the top level. Unknown keys reported by ErrorUnused
// are dropped when keysChecked (checkKeys already named them with hints);
// otherwise they are named here. envVar maps a key path to the
// environment variable that set it, for values that came from there.
func decodeErrors(file, root string, err error, keysChecked bool, envVar func(key string) string) []error {
	var out []error
	var walk func(e error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if de, ok := e.(*mapstructure.DecodeError); ok {
			name := de.Name()
			if name == root {
				name = ""
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
