// Command gwbench measures what the gateway (internal/gateway) adds to a
// request, beside nginx as a plain reverse proxy to the same engine-sim:
//
//	gwbench run --engine-sim BIN [--duration 5s] [--stream-n 300]
//	gwbench serve-gateway --listen ADDR --backend URL --served NAME --alias NAME
//
// run starts one engine-sim (fast pacing: the engine's own time is
// near zero, so what is measured is the proxies), the gateway as its own
// process (this binary's serve-gateway) and nginx (/usr/sbin/nginx, its
// config in a temp dir); then, non-streaming, wrk at concurrency 1 and 64
// against each (direct, gateway, nginx): p50/p99 latency and requests/s;
// and streaming, a sequential Go client timing each answer's first body
// byte (TTFT). It prints the table and the ratios against the goals.
// Used by scripts/bench-gateway.sh.
//
// A benchmark main: it measures the product path's own cost against a
// peer on the same backend.
//
// It may import the test kit (internal/testkit/simtest): it is a benchmark,
// not a product path.
package main
