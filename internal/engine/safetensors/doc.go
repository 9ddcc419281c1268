// Package safetensors reads safetensors headers: an 8-byte little-endian
// header length, a JSON header, then the data; data_offsets are relative to
// the start of the data. It also reads model.safetensors.index.json.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package safetensors
