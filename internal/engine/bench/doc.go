// Package bench measures a lane: a built-in perf sweep against the lane's
// OpenAI-compatible API (prompt processing and token generation at several
// prompt lengths, depths and concurrencies, TTFT), and external quality
// harnesses run as shell commands whose JSON reports are ingested
// (tool-eval-bench first). Token counts always come from the server's
// usage block, never from a local guess. It knows nothing of Temporal.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package bench
