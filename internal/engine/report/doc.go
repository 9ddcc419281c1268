// Package report writes and reads bench report bundles: a JSON record and
// a Markdown page per run
// (recipes/LANE/reports/UTC-TIMESTAMP_LABEL.{md,json}),
// an evidence directory beside them (the recipe as served, the rendered
// per-node plan with secrets masked, staging ledger summaries, image digest,
// engine args, sparklane version, Temporal IDs), baseline verdicts and an
// SVG history plot. It knows nothing of Temporal beyond carrying IDs.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package report
