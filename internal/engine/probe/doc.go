// Package probe decides whether a lane serves, over plain HTTP against the
// head's OpenAI-compatible API: WaitReady tells a long weight load (port
// closed) from a dead lane (a rank container exited), Smoke checks answers,
// DecodeProbe measures decode and prefill rates from a streamed completion.
// It knows nothing of Docker or Temporal: rank liveness comes in through a
// callback, progress goes out through one.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package probe
