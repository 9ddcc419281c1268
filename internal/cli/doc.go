// Package cli is the starter, the operator's command line: every
// `starter` command (status, lanes, recipe, stage, verify, up, stop,
// probe, cutover, cancel, attach, bench, report, power, logs, disk,
// fleet, schedule, control, init, demo). A command loads the fleet
// config, opens one Temporal client, starts or queries workflows, follows
// them (progress queries → live bars) and prints their results: text for
// people, or with --json one JSON document on stdout for scripts.
//
// The starter is a client only. It never hosts a workflow, an activity
// worker or the Temporal server: runs live in the control service (the
// worker program's dev mode, which the starter starts in the background
// when none runs: see controlExe) or on an external cluster, so killing a
// starter at any moment loses nothing and `starter attach` follows the
// run again. Node work is the node workers'; the starter reaches a node
// itself only for operator tools that run no workflow (init's discovery,
// fleet install, logs), over SSH with the host key checked.
//
// So this package must not import the Temporal server: not
// go.temporal.io/server/..., the UI server, internal/devserver (its
// searchattr, names only, is fine) nor internal/workers/embedded, which
// links the server into the control service. The starter would carry a
// server it never runs, and the server's package inits alone slowed every
// command's start-up. TestStarterDoesNotLinkTheServer checks the
// starter's dependencies.
//
// Every command starts with one preamble (command.go): withConfig,
// withClient, withLane or withRun load what it works on (the config, the
// Temporal connection, a rendered lane, a run) and hand it to the
// command's body; output prints the result as JSON or text.
package cli
