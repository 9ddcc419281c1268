#!/usr/bin/env bash
# bench-gateway.sh [DURATION] [STREAM_N]
#
# What the gateway (internal/gateway) adds to a request, in one run, beside
# nginx (Debian's package, /usr/sbin/nginx) as a plain reverse proxy to the
# same engine-sim: non-streaming p50/p99 latency and requests/s under wrk at
# concurrency 1 and 64 (each run DURATION, default 5s, after a 1 s warm-up),
# and streaming time to first token over STREAM_N sequential requests
# (default 300). Goals: gateway p99 added ≤ nginx's + 1 ms, throughput ≥
# 0.9× nginx's, TTFT added ≤ 2 ms at p99. The load, the proxy and the engine
# share this machine's cores. Needs wrk and nginx (apt-get install wrk nginx).
set -euo pipefail
DURATION=${1:-5s}
STREAM_N=${2:-300}
cd "$(dirname "$0")/.."
for tool in wrk /usr/sbin/nginx; do
	command -v "$tool" >/dev/null || { echo "bench-gateway.sh: needs $tool (apt-get install wrk nginx)" >&2; exit 1; }
done
bin="${TMPDIR:-/tmp}/sparklane-gwbench"
mkdir -p "$bin"
CGO_ENABLED=0 go build -o "$bin/engine-sim" ./engine-sim
go build -o "$bin/gwbench" ./scripts/gwbench
echo "commit $(git rev-parse --short HEAD) $(date -u +%F)"
exec "$bin/gwbench" run --engine-sim "$bin/engine-sim" --duration "$DURATION" --stream-n "$STREAM_N"
