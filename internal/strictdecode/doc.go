// Package strictdecode decodes the files operators write (TOML, YAML, and
// viper's merge of a file with the environment) into tagged Go structs,
// strictly: every unknown key is an error naming its full table path with a
// "did you mean" hint, a key in the wrong case is refused rather than
// folded, values must have the type their field needs (durations like
// "30s", byte sizes like "100G" in fields tagged unit:"bytes"), files over
// MaxFileBytes or MaxFileKeys are refused before they are parsed, and every
// error names the file and the key path, all of them at once. It exists
// because viper folds keys to lower case and mapstructure matches field
// names without case: left alone, neither reports State_Dir or a key
// written under the wrong [[table]] header.
//
// Fields are read from their mapstructure tag; a field tagged
// mapstructure:"-" or toml:"-" is never read from a file.
//
// It knows nothing of the schemas it decodes: it must not import any
// package of sparklane's (no config types, no fault classes, no Temporal).
// Callers own what a file means and classify the errors returned here.
package strictdecode
