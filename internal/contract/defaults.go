package contract

import "time"

// DefaultPickup is how long a node worker may take to pick up a pinned
// activity before its node is called unreachable.
const DefaultPickup = 10 * time.Second

// DefaultOutageBudget is how long a run waits for a node whose worker went
// away (a reboot, an upgrade) before it fails naming the node: a node
// reboots in minutes, and a multi-hour stage must not roll back for that.
const DefaultOutageBudget = 30 * time.Minute

// DefaultGrace is the wait before the fleet probe's one re-probe.
const DefaultGrace = 5 * time.Second

// ReprobeAttempts is "re-probe once before bail": the fleet probe's two
// attempts, DefaultGrace (or the config's probe_grace) apart.
const ReprobeAttempts = 2
