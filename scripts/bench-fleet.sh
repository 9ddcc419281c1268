#!/usr/bin/env bash
# The multi-host measurements: `starter fleet install` on 3 hosts of the
# network-namespace test fleet, the cutover of the same engine-sim lane
# (3 nodes, hub-mirror + sparse-rows staged cold, bench) on that fleet and
# on the single-host demo path (node directories, one Docker engine) in the
# same run, and the bytes packed again after a node service was stopped for
# 90 s mid-pack. Needs root, Docker and the test fleet's tools (iproute2,
# util-linux, iptables, openssh-server, dockerd); takes ~8 minutes.
#   scripts/bench-fleet.sh
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp /tmp/sparklane-benchfleet.XXXX)
if ! go test -count=1 -v -timeout 30m -run 'TestRealFleet$|TestSameLaneOnOneHost' ./internal/suites/fleete2e/ >"$log" 2>&1; then
	grep -E -- "--- FAIL|_test.go" "$log" | tail -40
	echo "failed; the whole log is $log" >&2
	exit 1
fi
grep MEASURE "$log" | sed 's/.*MEASURE //'
fleet=$(sed -n 's/.*MEASURE cutover fl-a (3 hosts.*: \([0-9.]*\) s$/\1/p' "$log")
one=$(sed -n 's/.*MEASURE cutover fl-a (3 local nodes.*: \([0-9.]*\) s$/\1/p' "$log")
awk -v a="$fleet" -v b="$one" 'BEGIN { printf "cutover on the netns fleet / on one host: %.2fx (%s s / %s s)\n", a / b, a, b }'
echo "(log: $log)"
