#!/usr/bin/env bash
# bench-gateway-cutover.sh [CLIENTS] — issue 54's "through a cutover":
# what clients of the gateway see while a lane is switched. The
# integration suite's gateway fleet (real Temporal server inside a real
# control service process, the gateway its own process, engine-sim
# containers on this machine's Docker): lane gw-a serves; CLIENTS clients
# (default 200; the official OpenAI Go SDK without retries, half
# streaming, by the alias "chat") ask the gateway while `starter cutover
# --lane gw-b` runs (staged ahead). Prints the client-visible failures
# (goal 0), the requests the gateway held and the longest wait of one
# against gw-b's cold ready + probe, the switch window and the drains.
# Needs Docker and curl. The script takes the heavy-test lock itself. The
# test is TestBenchGatewayCutover (internal/suites/itest, build tag
# benchgateway).
#   scripts/bench-gateway-cutover.sh 200
set -euo pipefail
cd "$(dirname "$0")/.."
SPARKLANE_BENCH_GATEWAY_CLIENTS=${1:-${SPARKLANE_BENCH_GATEWAY_CLIENTS:-200}}
export SPARKLANE_BENCH_GATEWAY_CLIENTS
bin=$(mktemp /tmp/sparklane-gateway-bench.XXXXXX)
trap 'rm -f "$bin"' EXIT
go test -c -tags benchgateway -o "$bin" ./internal/suites/itest/
cd internal/suites/itest
echo "== commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ../../gateway ../../workers ../../../workflows ../../../activities || echo ' (+ local changes)'), $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
flock /tmp/sparklane-heavy.lock "$bin" -test.run '^TestBenchGatewayCutover$' -test.count 1 -test.v -test.timeout 40m 2>&1 |
	grep -E '^BENCH|--- |^(ok|FAIL|PASS)|_test.go:'
