#!/bin/sh
# bench-pull.sh — a lane image pulled into this machine's Docker by
# sparklane's own registry client (internal/engine/images.Pull, the image
# step's pull) against `docker pull` of the same reference, from a real
# docker-registry on 127.0.0.1 (plain HTTP), same data, same run, three
# rounds alternating which goes first; prints both times and the ratio
# (sparklane ÷ docker pull). The script takes the heavy-test lock itself.
#   SPARKLANE_PULL_BENCH_MIB=160 scripts/bench-pull.sh
set -eu
cd "$(dirname "$0")/.."
: "${SPARKLANE_PULL_BENCH_MIB:=160}"
export SPARKLANE_PULL_BENCH_MIB
go test -c -o /tmp/sparklane-pull-bench.test ./internal/engine/images/
exec flock /tmp/sparklane-heavy.lock /tmp/sparklane-pull-bench.test \
	-test.run '^$' -test.bench 'BenchmarkPullVsDockerPull' -test.benchtime 1x -test.v 2>&1 |
	grep -E 'bench_test|Benchmark|ok|FAIL|PASS'
