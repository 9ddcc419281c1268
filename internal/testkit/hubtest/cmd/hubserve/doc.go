// Command hubserve runs the Hub test double (internal/testkit/hubtest) on
// 127.0.0.1 with one generated repo, for scripts/bench-fetch.sh and for
// trying a Hub client against it by hand (HF_ENDPOINT=its URL). It writes
// a JSON manifest (URL, repo, commit, files) and serves until SIGINT or
// SIGTERM.
package main
