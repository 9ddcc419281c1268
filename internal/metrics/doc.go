// Package metrics exports what an operator of a long-running fleet needs in
// Prometheus: the Temporal SDK's own metrics (activity latency, task-queue
// polls, workflow task failures — through SDKHandler) and sparklane's
// (staging bytes and bytes/s per node and block, files verified and
// repaired, readiness seconds, probe tok/s and TTFT per lane, bench
// results, node outage seconds), served on a configurable address.
// It knows nothing of workflows: workers plug SDKHandler into their client
// options and activities call the recorders.
//
// It imports the Temporal SDK's metrics interface only, never activities or
// workflows.
package metrics
