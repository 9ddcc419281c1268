#!/bin/sh
# bench-images.sh — the lane image's chain transfer (internal/engine/images) against
# sparkrun's method (`docker save IMG | ssh hN docker load` to each node in
# turn) on a 4-host netns test fleet (source h1, targets h2, h3, h4), same
# image, one run; prints ratios. The script takes the heavy-test lock itself.
# Root required (network namespaces, one dockerd per host).
#   SPARKLANE_IMAGES_BENCH_MIB=256 scripts/bench-images.sh
set -eu
cd "$(dirname "$0")/.."
: "${SPARKLANE_IMAGES_BENCH_MIB:=256}"
export SPARKLANE_IMAGES_BENCH_MIB
go test -c -o /tmp/sparklane-images-bench.test ./internal/engine/images/
exec flock /tmp/sparklane-heavy.lock /tmp/sparklane-images-bench.test \
	-test.run '^$' -test.bench 'BenchmarkImagesVsSparkrun' -test.benchtime 1x -test.v 2>&1 |
	grep -E 'bench_test|Benchmark|ok|FAIL|PASS'
