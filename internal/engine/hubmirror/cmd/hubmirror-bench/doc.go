// Command hubmirror-bench drives the hub-mirror engine for
// scripts/bench-hubmirror.sh: it generates a hub tree, runs a stage (which
// the script may kill -9 mid-copy), resumes from the progress file a killed
// run left, and runs a verify-only pass, printing results as JSON.
//
// A benchmark main: it calls the engine directly, without Temporal.
package main
