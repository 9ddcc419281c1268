// Package searchattr names the custom search attributes sparklane stamps on
// its workflow runs, so runs can be filtered by lane and cluster in the web
// UI and with `temporal workflow list --query 'SparklaneLane = "demo-4x"'`.
// It is separate from devserver so workflows and the starter can use the
// names without linking the Temporal server.
//
// It must not import the Temporal server: the starter and the workflows read
// these names too.
package searchattr
