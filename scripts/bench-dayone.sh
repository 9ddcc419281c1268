#!/bin/sh
# bench-dayone.sh — day one from the release tarball on the 3-host
# network-namespace fleet (internal/suites/fleete2e,
# TestDayOneFromTheReleaseInThreeCommands): unpack, `starter init`,
# `starter fleet install`, `starter cutover --lane sim-demo --fetch`
# (Hub double, engine-sim image built on the head from the release), the
# first answered completion; then the user's own lanes from a plain-HTTP
# registry and one with a login. Prints the wall time per phase, the
# command count and the files edited, beside sparkrun's day one (2
# commands: `sparkrun setup`, `sparkrun run RECIPE`; not runnable here: it
# needs NVIDIA GPUs, so its count is compared, not its time).
# SPARKLANE_RELEASE_DIR=DIR reuses a release (scripts/release DIR); else
# the test builds one (minutes). The script takes the heavy-test lock.
#   scripts/bench-dayone.sh
set -eu
cd "$(dirname "$0")/.."
go test -c -o /tmp/sparklane-dayone.test ./internal/suites/fleete2e/
cd internal/suites/fleete2e
flock /tmp/sparklane-heavy.lock /tmp/sparklane-dayone.test \
	-test.run '^TestDayOneFromTheReleaseInThreeCommands$' -test.count 1 -test.timeout 30m -test.v 2>&1 |
	grep -E 'dayone (phase|total)|^(--- |ok|FAIL|PASS)' | sed 's/^ *//'
echo "peer: sparkrun day one = 2 commands (sparkrun setup; sparkrun run RECIPE), 0 edits"
