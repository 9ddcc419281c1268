// Package devserver runs the embedded Temporal server that `worker dev` and
// `starter` use when temporal.address is empty: all four services in-process,
// persisted in a SQLite file under state_dir (so history survives a restart),
// bound to 127.0.0.1, with the real Temporal web UI next to it.
//
// It is the only package that imports the Temporal server besides
// internal/workers/embedded; the starter must never link it.
package devserver
