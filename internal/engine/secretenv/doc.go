// Package secretenv resolves a recipe's [env_from] entries — container
// environment variables whose values are secrets (API tokens) — on the node
// worker, at the moment a container is created. A recipe names where each
// value lives ("env:NAME" in the node worker's environment, "file:/path" on
// the node), never the value: workflow inputs, Temporal history, plans,
// logs and reports then hold only the name, as the Home Assistant token's
// token_env/token_file already do.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package secretenv
