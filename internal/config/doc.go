// Package config reads the files operators write: the fleet configuration
// (sparklane.toml) and lane recipes (sparklane TOML, sparkrun v2 YAML). It
// decodes them into its own file-format types, checks each file as written
// (every error at once, each naming its file and key) and loads recipe
// sets. It does not plan: internal/lane resolves a lane, checks it on the
// fleet and renders what each node runs, into internal/contract's wire
// types. It knows nothing of Temporal, and must not import activities,
// workflows, the workers, the CLI or the lane resolver.
//
// The fleet config (sparklane.toml) is read with viper. Each value comes from
// the first of these that sets it:
//
//  1. a command-line flag bound to the key (starter and worker bind only
//     --config, which names the file);
//  2. the environment: SPARKLANE_ + the key path upper-cased with "." → "_"
//     (SPARKLANE_STATE_DIR, SPARKLANE_TEMPORAL_ADDRESS, SPARKLANE_CONFIG for
//     the file itself); lists are comma-separated (SPARKLANE_SHARED_ROOTS=/a,/b);
//     keys inside [[nodes]], [[clusters]] and [[devices]] have no variable;
//  3. the file: --config, else $SPARKLANE_CONFIG, else ./sparklane.toml;
//  4. the defaults (DefaultStateDir, DefaultNamespace, ...).
//
// Before viper sees a file it is parsed with go-toml to check what the
// operator wrote: size and key-count limits, unknown keys with their full
// path, keys in the wrong case (viper folds case, so State_Dir would
// otherwise be read as state_dir silently) and types. Recipes (TOML and
// sparkrun YAML) are decoded under the same rules. Those rules are
// internal/strictdecode's, which knows no schema; this package owns the
// types, the defaults and what each key means.
package config
