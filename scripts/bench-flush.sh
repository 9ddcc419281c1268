#!/usr/bin/env bash
# bench-flush.sh REV [ROUNDS] [SIZE_GIB]
#
# The hub-mirror engine at git revision REV against the engine of this
# checkout, and both against `cp -a` + sync, on the same data in the same
# run: one SIZE_GIB blob (default 4), ROUNDS rounds (default 8). Each round
# runs the three once, the order rotating from round to round; before each
# timed phase the previous output is deleted (kept with FRESH=1, below),
# the disk settles (SETTLE seconds, default 12) and the page cache is
# dropped (when we are root).
# Prints every round, the medians and in how many rounds this checkout's
# engine beat REV's. It is how a change to the copy loop (the trailing
# flush, the chunk size) is judged on this VM, whose disk spreads identical
# runs by a quarter: an A/B in one series, not two runs of bench-stage.sh.
#   FRESH=1     keep every output (each phase writes into space no earlier
#               phase freed, as bench-stage.sh does) instead of deleting the
#               previous one; needs (3 * ROUNDS + 2) * SIZE_GIB GiB free.
#   REV_ARGS, HEAD_ARGS
#               extra arguments for each engine's `hubmirror-bench stage`,
#               e.g. HEAD_ARGS="-flush-mib 256" with REV=HEAD measures the
#               flush cadence alone.
# Data lives under a temp dir on the filesystem of /var/tmp (or $BENCH_DIR).
set -euo pipefail

REV=${1:?usage: bench-flush.sh REV [ROUNDS] [SIZE_GIB]}
ROUNDS=${2:-8}
SIZE_GIB=${3:-4}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/flush-bench.XXXXXX")
cleanup() {
	git -C "$here" worktree remove --force "$work/rev" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

need=$((2 * SIZE_GIB + 1))
if [[ ${FRESH:-0} == 1 ]]; then need=$(((3 * ROUNDS + 2) * SIZE_GIB + 1)); fi
avail=$(df -P --block-size=1G "$work" | awk 'NR == 2 { print $4 }')
if ((avail < need)); then
	echo "bench-flush.sh: $work has ${avail} GiB free; a ${SIZE_GIB} GiB blob and $([[ ${FRESH:-0} == 1 ]] && echo "every copy of ${ROUNDS} rounds (FRESH=1)" || echo 'one copy') need ${need} GiB" >&2
	exit 1
fi
cd "$here"
git worktree add --detach "$work/rev" "$REV" >/dev/null
(cd "$work/rev" && go build -o "$work/hmb-rev" ./internal/engine/hubmirror/cmd/hubmirror-bench)
go build -o "$work/hmb-head" ./internal/engine/hubmirror/cmd/hubmirror-bench
nas="$work/nas/hub"
"$work/hmb-head" gen -hub "$nas" -repo org/blob -gib "$SIZE_GIB" -files 1 >/dev/null

now() { date +%s.%N; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# phase TOOL ROUND: one cold copy into a new output; prints its seconds.
phase() {
	local out="$work/out"
	if [[ ${FRESH:-0} == 1 ]]; then
		out="$work/out-$2-$1"
	else
		rm -rf "$out"
	fi
	mkdir -p "$out"
	sync
	sleep "${SETTLE:-12}"
	if [[ $(id -u) -eq 0 ]]; then echo 3 >/proc/sys/vm/drop_caches; else echo "  (cannot drop the page cache: timings are warm)" >&2; fi
	cat "$work/hmb-rev" "$work/hmb-head" "$(command -v cp)" >/dev/null
	local s
	s=$(now)
	case $1 in
	rev) "$work/hmb-rev" stage -src "$nas" -dst "$out/d" -repos org/blob ${REV_ARGS:-} >/dev/null ;;
	head) "$work/hmb-head" stage -src "$nas" -dst "$out/d" -repos org/blob ${HEAD_ARGS:-} >/dev/null ;;
	cp) mkdir -p "$out/d" && cp -a "$nas" "$out/d/" && sync ;;
	esac
	awk -v a="$s" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'
}

echo "== ${SIZE_GIB} GiB blob; engine at $REV ($(git rev-parse --short "$REV"))${REV_ARGS:+ $REV_ARGS} vs this checkout ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', modified'))${HEAD_ARGS:+ $HEAD_ARGS}, and cp -a + sync; outputs $([[ ${FRESH:-0} == 1 ]] && echo 'kept (fresh space)' || echo 'deleted before each phase')"
# An untimed cp -a + sync first: the first phase after the data generation
# (the engine at REV's, as the order rotates from it) was 1.5-2x slower
# than the same engine later (9.26 and 9.37 s against 4.50-6.70 s), as
# bench-stage.sh saw for the starter.
phase cp 0 >/dev/null
tools=(rev head cp)
t_rev=() t_head=() t_cp=() wins=0
for r in $(seq 1 "$ROUNDS"); do
	line="round $r:"
	declare -A got=()
	for k in 0 1 2; do
		tool=${tools[$(((r - 1 + k) % 3))]}
		got[$tool]=$(phase "$tool" "$r")
		line="$line $tool ${got[$tool]} s"
	done
	t_rev+=("${got[rev]}") t_head+=("${got[head]}") t_cp+=("${got[cp]}")
	if awk -v a="${got[head]}" -v b="${got[rev]}" 'BEGIN { exit !(a < b) }'; then wins=$((wins + 1)); fi
	echo "  $line"
done
m_rev=$(median "${t_rev[@]}") m_head=$(median "${t_head[@]}") m_cp=$(median "${t_cp[@]}")
echo "RATIOS medians: $REV ${m_rev} s, this checkout ${m_head} s, cp -a + sync ${m_cp} s;" \
	"this checkout faster in ${wins} of ${ROUNDS} rounds;" \
	"cp+sync / rev = $(awk -v a="$m_cp" -v b="$m_rev" 'BEGIN { printf "%.2f", a / b }')x," \
	"cp+sync / this checkout = $(awk -v a="$m_cp" -v b="$m_head" 'BEGIN { printf "%.2f", a / b }')x"
