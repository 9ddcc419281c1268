// Package fault classifies errors where they happen. Engines wrap permanent
// failures (bad recipe, host-key mismatch, image missing, content mismatch
// after copy) with Permanent and a type name; activities turn those into
// non-retryable Temporal application errors of that type, and workflows
// branch on the type, never on message text. Everything else is transient.
//
// It must not import go.temporal.io, activities, workflows, internal/cli or
// internal/workers (activities wrap it; it knows nothing of Temporal).
package fault
