#!/usr/bin/env bash
# bench-cutover.sh [SIZE_GIB] — a cutover's switch window and what its
# clients see, in the old order (--stage-ahead=never: stop, then stage)
# against stage ahead (stage and verify while the old lane serves), on the
# same data in one run: a one-node fleet of the integration suite (real
# Temporal server, workers, engine-sim containers), a serving lane, and a
# lane that stages SIZE_GIB GiB (default 4) of its own synthetic NAS. A
# client asks the lanes' port every 200 ms throughout. Prints each order's
# switch window, client downtime and failed rounds, the ratio (goal <= 0.05),
# the new lane's cold ready + probe + 2 s (goal: the stage-ahead downtime
# under it), and the serving lane's completion latency p50/p99 idle against
# during the stage ahead (goal: p99 <= 1.5x idle).
# Needs Docker and about 3 x SIZE_GIB GiB free under /tmp; as root the page
# cache is dropped before each order. The script takes the heavy-test lock
# itself. The test is TestBenchCutover (internal/suites/itest,
# build tag benchcutover).
#   scripts/bench-cutover.sh 4
set -euo pipefail
cd "$(dirname "$0")/.."
SPARKLANE_BENCH_CUTOVER_GIB=${1:-${SPARKLANE_BENCH_CUTOVER_GIB:-4}}
export SPARKLANE_BENCH_CUTOVER_GIB
need=$((3 * SPARKLANE_BENCH_CUTOVER_GIB + 1))
avail=$(df -P --block-size=1G "${TMPDIR:-/tmp}" | awk 'NR == 2 { print $4 }')
if ((avail < need)); then
	echo "bench-cutover.sh: ${TMPDIR:-/tmp} has ${avail} GiB free; a ${SPARKLANE_BENCH_CUTOVER_GIB} GiB stage needs ${need} GiB (the NAS and two staged copies)" >&2
	exit 1
fi
bin=$(mktemp /tmp/sparklane-cutover-bench.XXXXXX)
trap 'rm -f "$bin"' EXIT
go test -c -tags benchcutover -o "$bin" ./internal/suites/itest/
cd internal/suites/itest
echo "== commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ../../../workflows ../../../activities || echo ' (+ local changes)'), load $(cut -d' ' -f1-3 /proc/loadavg)"
flock /tmp/sparklane-heavy.lock "$bin" -test.run '^TestBenchCutover$' -test.count 1 -test.v -test.timeout 60m 2>&1 |
	grep -E '^BENCH|--- |^(ok|FAIL|PASS)|_test.go:'
