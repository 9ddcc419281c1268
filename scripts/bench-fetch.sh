#!/usr/bin/env bash
# bench-fetch.sh [SIZE_MIB] [LARGE_FILES] [RATE_MIB_PER_CONN] [CONNS]
#
# Benchmarks sparklane's Hub fetch (internal/engine/hubfetch) against curl on the
# same repo in the same run (defaults: 1024 MiB in 8 LFS files plus 20
# small git files, each connection capped at 16 MiB/s, 8 connections):
#   - the Hub double (internal/testkit/hubtest/cmd/hubserve) serves the
#     repo on 127.0.0.1 with a per-connection rate cap, LFS bytes from a
#     separate "CDN" port (absolute redirects, as the public Hub);
#   - sparklane's fetch (hubfetch-bench) CONNS files at a time, one
#     connection each (the shape of xargs -P CONNS curl), every blob
#     verified while it streams (sha256 / git blob sha1), fsynced and
#     renamed into the hub cache;
#   - the same fetch with 4 files x 4 ranges of 16 MiB chunks (up to 16
#     connections: what parallel ranges buy against a per-connection cap);
#   - `curl -L` of every file one after another;
#   - `xargs -P CONNS curl -L` of the same files.
# curl neither verifies nor fsyncs: its times include an fsync of the files
# it wrote (`sync FILE...`).
# Throughput ratios are sparklane / peer (>= 0.9 x parallel curl is the goal).
# Data lives under a temp dir on the filesystem of /var/tmp (or $BENCH_DIR).
set -euo pipefail

SIZE_MIB=${1:-1024}
LARGE_FILES=${2:-8}
RATE_MIB=${3:-16}
CONNS=${4:-8}
SMALL_FILES=20
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/fetch-bench.XXXXXX")
srvpid=""
cleanup() {
	if [[ -n "$srvpid" ]]; then kill "$srvpid" 2>/dev/null || true; wait "$srvpid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

cd "$here"
go build -o "$work/hubserve" ./internal/testkit/hubtest/cmd/hubserve
go build -o "$work/hubfetch-bench" ./internal/engine/hubfetch/cmd/hubfetch-bench

. "$here/scripts/lib/bench.sh"

"$work/hubserve" -cdn -repo bench/model -bytes $((SIZE_MIB << 20)) -files "$LARGE_FILES" -small "$SMALL_FILES" \
	-rate $((RATE_MIB << 20)) -manifest "$work/manifest.json" >"$work/hubserve.log" 2>&1 &
srvpid=$!
for _ in $(seq 600); do [[ -s "$work/manifest.json" ]] && break; sleep 0.1; done
[[ -s "$work/manifest.json" ]] || { cat "$work/hubserve.log"; echo "hubserve did not start" >&2; exit 1; }
url=$(jget "$work/manifest.json" url)
repo=$(jget "$work/manifest.json" repo)
commit=$(jget "$work/manifest.json" commit)
bytes=$(jget "$work/manifest.json" bytes)
# One line per file: -o DEST URL (for xargs -n 3 curl).
python3 - "$work/manifest.json" "$work" >"$work/curl.args" <<'EOF'
import json, sys, urllib.parse
m = json.load(open(sys.argv[1]))
for f in m["files"]:
    q = urllib.parse.quote(f["path"])
    print(f'-o {sys.argv[2]}/DEST/{f["path"]} {m["url"]}/{m["repo"]}/resolve/{m["commit"]}/{q}')
EOF
echo "== $repo@${commit:0:12}: $(mibs "$bytes" 1 1) MiB in $LARGE_FILES LFS + $SMALL_FILES git files; ${RATE_MIB} MiB/s per connection; $url"
echo "   machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# sparklane NAME FILES RANGES CHUNK
sparklane() {
	local name=$1 files=$2 ranges=$3 chunk=$4 out="$work/$1.json"
	sync
	local t0 t1
	t0=$(now)
	"$work/hubfetch-bench" -endpoint "$url" -cache "$work/$name/hub" -repo "$repo" -revision main \
		-files "$files" -ranges "$ranges" -chunk "$chunk" >"$out"
	t1=$(now)
	local got
	got=$(jget "$out" DownloadedBytes)
	[[ "$got" == "$bytes" ]] || { echo "$name downloaded $got of $bytes bytes" >&2; exit 1; }
	secs "$t0" "$t1"
}

# curls NAME PARALLEL: xargs -P PARALLEL curl, then fsync of its files.
curls() {
	local name=$1 par=$2
	sync
	local t0 t1
	t0=$(now)
	sed "s#/DEST/#/$name/#" "$work/curl.args" | xargs -P "$par" -n 3 curl -sSfL --create-dirs
	local tc
	tc=$(now)
	# fsync of its own files, as the fetch fsyncs each blob (a bare `sync`
	# would also flush whatever else this shared machine has dirty).
	find "$work/$name" -type f -exec sync {} +
	t1=$(now)
	echo "  $name: curl $(secs "$t0" "$tc") s + fsync $(secs "$tc" "$t1") s" >&2
	local got
	got=$(find "$work/$name" -type f -printf '%s\n' | awk '{ n += $1 } END { print n + 0 }')
	[[ "$got" == "$bytes" ]] || { echo "$name wrote $got of $bytes bytes" >&2; exit 1; }
	rm -rf "${work:?}/$name"
	secs "$t0" "$t1"
}

t_sl=$(sparklane sparklane "$CONNS" 1 0)
rm -rf "${work:?}/sparklane"
t_slr=$(sparklane sparklane-ranges 4 4 $((16 << 20)))
rm -rf "${work:?}/sparklane-ranges"
t_seq=$(curls curl-seq 1)
t_par=$(curls curl-par "$CONNS")

printf '\n%-48s %9s %9s %14s %14s\n' "tool" "seconds" "MiB/s" "vs curl seq" "vs xargs -P$CONNS"
row() { printf '%-48s %9s %9s %13sx %13sx\n' "$1" "$2" "$(mibs "$bytes" "$2" 1)" "$(ratio "$t_seq" "$2")" "$(ratio "$t_par" "$2")"; }
row "sparklane fetch, $CONNS files x 1 (verified)" "$t_sl"
row "sparklane fetch, 4 files x 4 ranges (verified)" "$t_slr"
row "curl -L, one file after another, + fsync" "$t_seq"
row "xargs -P $CONNS curl -L, + fsync" "$t_par"
echo
echo "RATIO sparklane ($CONNS conns) / xargs -P $CONNS curl throughput: $(ratio "$t_par" "$t_sl") (goal >= 0.9)"
