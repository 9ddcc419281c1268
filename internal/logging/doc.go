// Package logging builds the one zap logger every sparklane process uses and
// plugs it into the Temporal SDK, so worker, workflow and activity logs land
// in the same stream (console for a person at a terminal, JSON for machines).
//
// It imports the Temporal SDK's log interface only, never activities or
// workflows.
package logging
