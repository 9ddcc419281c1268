#!/usr/bin/env bash
# bench-hubmirror.sh [SIZE_GIB] [SMALL_FILES]
#
# Benchmarks the hub-mirror engine against cp and rsync on the same data in
# the same run (defaults: 8 GiB in 40 files, and 10,000 small files):
#   - cold stage vs `cp -a` and `rsync -a` (each followed by `sync`, since
#     staging fsyncs; raw cp/rsync times are printed too),
#   - second pass (verify-only, copies nothing) vs `rsync -a`'s own quick
#     check of the same tree (a second `rsync -a`: speed; it reads no content)
#     and vs `rsync -a --checksum` (which reads every byte), cold and warm,
#     with the ratio rsync's quick check itself reaches over --checksum,
#   - full-content verify (`verify --full`, what `verify = "sha256"` checks)
#     vs `rsync -a --checksum` (strength: both read every byte),
#   - resume after kill -9 at ~50%: bytes re-copied by the rerun.
# A sampled pass against a full-content peer is not a like-for-like ratio;
# the RATIOS lines say which is which.
# Page cache is dropped before every timed phase when we are root.
# Data lives under a temp dir on the filesystem of /var/tmp (or $BENCH_DIR).
set -euo pipefail

SIZE_GIB=${1:-8}
SMALL_FILES=${2:-10000}
BIG_FILES=40
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/hubmirror-bench.XXXXXX")
bgpid=""
cleanup() {
	if [[ -n "$bgpid" ]]; then kill -9 "$bgpid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

cd "$here"
go build -o "$work/hmb" ./internal/engine/hubmirror/cmd/hubmirror-bench
hmb="$work/hmb"
nas="$work/nas/hub"
node="$work/node"
mkdir -p "$node"

. "$here/scripts/lib/bench.sh"

echo "== generating ${SIZE_GIB} GiB in ${BIG_FILES} files + ${SMALL_FILES} small files under $work"
t0=$(now)
"$hmb" gen -hub "$nas" -repo org/big -gib "$SIZE_GIB" -files "$BIG_FILES"
small_gib=$(awk -v n="$SMALL_FILES" 'BEGIN { printf "%.6f", n * 8192 / 1073741824 }')
"$hmb" gen -hub "$nas" -repo org/small -gib "$small_gib" -files "$SMALL_FILES"
echo "  generated in $(secs "$t0" "$(now)") s"
big_bytes=$(du -sb --apparent-size "$nas/models--org--big/blobs" | cut -f1)

# bench NAME REPO: cold stage vs cp -a vs rsync -a, then second pass vs rsync --checksum.
bench() {
	local name=$1 repo=$2 dir="models--${2//\//--}"
	local bytes
	bytes=$(du -sb --apparent-size "$nas/$dir" | cut -f1)
	echo
	echo "== $name tree ($repo, $bytes bytes)"

	drop; local s e
	s=$(now)
	"$hmb" stage -src "$nas" -dst "$node/stage-$name" -repos "$repo" >"$work/stage-$name.json"
	e=$(now); local t_stage; t_stage=$(secs "$s" "$e")
	echo "  hub-mirror cold stage : ${t_stage} s ($(mibs "$bytes" "$t_stage") MiB/s)  $(cat "$work/stage-$name.json")"

	drop; mkdir -p "$node/cp-$name"
	s=$(now); cp -a "$nas/$dir" "$node/cp-$name/"; local m; m=$(now); sync; e=$(now)
	local t_cp t_cpraw; t_cp=$(secs "$s" "$e"); t_cpraw=$(secs "$s" "$m")
	echo "  cp -a + sync          : ${t_cp} s ($(mibs "$bytes" "$t_cp") MiB/s; cp alone ${t_cpraw} s)"

	drop; mkdir -p "$node/rsync-$name"
	s=$(now); rsync -a "$nas/$dir" "$node/rsync-$name/"; m=$(now); sync; e=$(now)
	local t_rs t_rsraw; t_rs=$(secs "$s" "$e"); t_rsraw=$(secs "$s" "$m")
	echo "  rsync -a + sync       : ${t_rs} s ($(mibs "$bytes" "$t_rs") MiB/s; rsync alone ${t_rsraw} s)"
	rm -rf "$node/cp-$name"

	drop
	s=$(now)
	"$hmb" stage -src "$nas" -dst "$node/stage-$name" -repos "$repo" >"$work/pass2-$name.json"
	e=$(now); local t_p2; t_p2=$(secs "$s" "$e")
	echo "  hub-mirror 2nd pass   : ${t_p2} s  $(cat "$work/pass2-$name.json")"
	drop
	s=$(now)
	"$hmb" verify -src "$nas" -dst "$node/stage-$name" -repos "$repo" | python3 -c 'import json,sys; v=json.load(sys.stdin); print("  verify: ok=%d bad=%d missing=%d" % (v["ok"], len(v["bad"]), len(v["missing"])))'
	e=$(now); local t_v; t_v=$(secs "$s" "$e")
	echo "  hub-mirror verify     : ${t_v} s"
	drop
	s=$(now); rsync -a "$nas/$dir" "$node/rsync-$name/"; e=$(now)
	local t_rsq; t_rsq=$(secs "$s" "$e")
	echo "  rsync -a (quick check): ${t_rsq} s"
	drop
	s=$(now); rsync -a --checksum "$nas/$dir" "$node/rsync-$name/"; e=$(now)
	local t_rsc; t_rsc=$(secs "$s" "$e")
	echo "  rsync -a --checksum   : ${t_rsc} s"
	# The same three with the caches warm: each tool's trees are read once
	# untimed first (the drop before --checksum left the mirror cold).
	"$hmb" stage -src "$nas" -dst "$node/stage-$name" -repos "$repo" >/dev/null
	s=$(now)
	"$hmb" stage -src "$nas" -dst "$node/stage-$name" -repos "$repo" >/dev/null
	e=$(now); local t_p2w; t_p2w=$(secs "$s" "$e")
	rsync -a "$nas/$dir" "$node/rsync-$name/"
	s=$(now); rsync -a "$nas/$dir" "$node/rsync-$name/"; e=$(now)
	local t_rsqw; t_rsqw=$(secs "$s" "$e")
	s=$(now); rsync -a --checksum "$nas/$dir" "$node/rsync-$name/"; e=$(now)
	local t_rscw; t_rscw=$(secs "$s" "$e")
	echo "  warm: hub-mirror 2nd pass ${t_p2w} s, rsync -a ${t_rsqw} s, rsync -a --checksum ${t_rscw} s"
	drop
	s=$(now)
	"$hmb" verify -src "$nas" -dst "$node/stage-$name" -repos "$repo" -full | python3 -c 'import json,sys; v=json.load(sys.stdin); print("  full verify: ok=%d bad=%d missing=%d" % (v["ok"], len(v["bad"]), len(v["missing"])))'
	e=$(now); local t_vf; t_vf=$(secs "$s" "$e")
	echo "  hub-mirror verify --full (sha256): ${t_vf} s"
	rm -rf "$node/rsync-$name"
	echo "  RATIOS $name: stage throughput / cp+sync = $(ratio "$t_cp" "$t_stage")x, / cp alone = $(ratio "$t_cpraw" "$t_stage")x, / rsync+sync = $(ratio "$t_rs" "$t_stage")x;" \
		"speed: 2nd pass vs rsync -a quick check = $(ratio "$t_rsq" "$t_p2")x faster (goal >= 1), vs rsync --checksum = $(ratio "$t_rsc" "$t_p2")x faster, verify vs rsync --checksum = $(ratio "$t_rsc" "$t_v")x faster;" \
		"strength (both read every byte): verify --full vs rsync --checksum = $(ratio "$t_rsc" "$t_vf")x faster;" \
		"warm: 2nd pass vs rsync -a quick check = $(ratio "$t_rsqw" "$t_p2w")x, vs rsync --checksum = $(ratio "$t_rscw" "$t_p2w")x;" \
		"the peer's own bound: rsync -a quick check vs rsync --checksum = $(ratio "$t_rsc" "$t_rsq")x cold, $(ratio "$t_rscw" "$t_rsqw")x warm"
	rm -rf "$node/stage-$name"
}

bench big org/big
bench small org/small

echo
echo "== resume after kill -9 at ~50% (org/big)"
drop
prog="$work/progress.json"
rm -f "$prog"
"$hmb" stage -src "$nas" -dst "$node/resume" -repos org/big -progress "$prog" >/dev/null 2>&1 &
bgpid=$!
half=$((big_bytes / 2))
while :; do
	if ! kill -0 "$bgpid" 2>/dev/null; then echo "  stage finished before 50%: cannot measure resume" >&2; exit 1; fi
	if [[ -s "$prog" ]] && (($(jget "$prog" bytes_done) >= half)); then break; fi
	sleep 0.2
done
kill -9 "$bgpid"
wait "$bgpid" 2>/dev/null || true
bgpid=""
done_at_kill=$(jget "$prog" bytes_done)
# What the killed run had written: finished files plus temp files.
written=$(find "$node/resume" -type f ! -name .sparklane-ledger.json -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
echo "  killed at bytes_done=$done_at_kill of $big_bytes (last durable progress, as a heartbeat would carry it); $written bytes on disk"
s=$(now)
"$hmb" stage -src "$nas" -dst "$node/resume" -repos org/big -resume "$prog" >"$work/resume.json"
e=$(now)
copied=$(jget "$work/resume.json" copied_bytes)
total=$(jget "$work/resume.json" total_bytes)
recopied=$((written + copied - total))
if ((recopied < 0)); then recopied=0; fi
echo "  rerun: $(secs "$s" "$e") s  $(cat "$work/resume.json")"
"$hmb" verify -src "$nas" -dst "$node/resume" -repos org/big -full | python3 -c 'import json,sys; v=json.load(sys.stdin); print("  full verify after resume: ok=%d bad=%d missing=%d" % (v["ok"], len(v["bad"]), len(v["missing"]))); sys.exit(0 if not v["bad"] and not v["missing"] else 1)'
echo "  RATIOS resume: re-copied $recopied bytes = $(awk -v r="$recopied" -v t="$big_bytes" 'BEGIN { printf "%.2f", 100 * r / t }')% of $big_bytes"
