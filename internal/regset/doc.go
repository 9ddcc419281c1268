// Package regset is the set of recipe registries a fleet config sees:
// the config's [registries], plus the clones `starter registry add` made
// under STATE_DIR/registries, minus those `starter registry disable NAME`
// turned off (as sparkrun's `registry disable`; the names are listed in
// STATE_DIR/registries/.disabled). A disabled registry's recipes are
// neither listed nor resolved; its clone stays, so enabling it again
// costs nothing.
//
// It imports nothing of the project: internal/config applies it when it
// loads a fleet config (so the starter and the control service agree),
// internal/registry and the starter change it.
//
// It must not import any other project package (see above).
package regset
