// Command hubfetch-bench runs one hubfetch.Fetch and prints its Result and
// wall time as JSON, for scripts/bench-fetch.sh. The endpoint defaults to
// HF_ENDPOINT and the token to the Hub's token chain, as Fetch's callers
// will do.
package main
