# shellcheck shell=bash
# What the benchmark scripts share: timing, throughput and ratio
# arithmetic, reading the benches' JSON, and dropping the page cache.
# Source it: . "$(dirname "$0")/lib/bench.sh"

# now prints the wall clock in seconds with nanoseconds.
now() { date +%s.%N; }
# secs START END prints END - START to two decimals.
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# ratio A B prints A / B to two decimals ("inf" when B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "inf" }'; }
# mibs BYTES SECONDS [DECIMALS] prints the rate in MiB/s (0 decimals
# unless given; "inf" when SECONDS is 0).
mibs() { awk -v n="$1" -v s="$2" -v d="${3:-0}" 'BEGIN { if (s > 0) printf "%." d "f", n / 1048576 / s; else print "inf" }'; }
# jget FILE KEY prints the top-level KEY of the JSON object in FILE.
jget() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
# drop writes dirty pages out and, as root, drops the page cache so the
# next phase reads cold; unprivileged it says the timings are warm.
drop() {
	sync
	if [[ $(id -u) -eq 0 ]] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then :; else
		echo "  (cannot drop the page cache: timings are warm)" >&2
	fi
}
