// Package control finds, starts and stops the control service: the one
// long-lived process per state_dir that, in embedded mode, holds the
// Temporal server (SQLite under state_dir), its web UI, the control worker
// and the workers of this machine's nodes.
//
// `starter` is only ever a client of it. When no control service runs,
// starter starts one in the background (detached into its own session,
// logging to state_dir/control.log) and connects to it; a starter killed
// at any moment therefore leaves nothing half-owned: the run goes on in the
// service and any later starter can follow, cancel or resume it.
//
// One control service per state_dir is guaranteed by an exclusive flock on
// state_dir/control.lock, which also publishes who holds it (pid, command,
// start time, frontend and UI addresses) so that every refusal can name
// the owner. The lock dies with its process, so a kill -9 never leaves a
// stale lock behind.
//
// The package knows nothing of Temporal beyond addresses.
//
// It owns the control service's lock and lifecycle (Acquire, Start,
// Stop, Find) and a client's connection to the service (Conn, Dial). It
// must not import activities, workflows, the workers or the engines: the
// starter, a client only, links it.
package control
