#!/usr/bin/env bash
# bench-stage.sh [SIZE_GIB] [RUNS]
#
# The product path beside the engine, on the same data in the same run: a
# one-node local fleet (this machine), one SIZE_GIB blob (default 4) on a
# NAS directory, and
#   - `starter stage` cold, through the control service (Temporal server,
#     workflow, node worker activity, heartbeats, ledger, fsync policy),
#   - the engine alone (hubmirror-bench stage) cold on the same data,
#   - `cp -a` + sync of the same tree,
#   - a second, verify-only `starter stage` with the control service
#     already running, and the engine's own second pass,
# each RUNS times (default 3; the tools' order rotates from run to run),
# printing every time, the medians' ratios and each run's own ratio (its
# cp+sync against its starter and engine), and for each cold starter run
# the Stage workflow's wall time against its time in activities
# (orchbench);
# then the verify-only pass warm, the starter's start-up alone and the
# same split for the last verify-only run; and, before the runs and after
# them, the machine's own speed (a cold read of the blob, SIZE_GIB written
# with dd and fdatasynced).
# The control service is started once (`starter control start`) and stopped
# at the end. Page cache is dropped before every timed phase when we are root.
# Nothing is deleted between timed phases: every run writes fresh
# directories (the lane's dst is rewritten per run) and all are removed at
# the end. On a filesystem mounted with `discard`, freeing GiBs issues
# TRIMs that slow whichever writer comes next, so deleting between phases
# would tax one peer and not the others.
# "Cold" means the data: after the page cache is dropped, every tool's
# binary (the 45 MB starter, the engine's, cp) is read back into it before
# each timed phase, as on an operator's machine where the CLI is used daily.
# The control service is the worker program (`worker dev`, built here and
# named by SPARKLANE_CONTROL_EXE); its pages are mapped by the running
# service, and dropping the page cache does not evict those. BINARIES=cold
# skips the read-back. The start-up of the starter after a drop is
# measured and printed either way.
# Data lives under a temp dir on the filesystem of /var/tmp (or $BENCH_DIR).
set -euo pipefail

SIZE_GIB=${1:-4}
RUNS=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/stage-bench.XXXXXX")
starter="$work/starter"
# stage ensures the lane's image on its nodes first: an image built from
# scratch (no registry, a label only) stands in for the engine's, and is
# removed at the end when this run built it.
bench_image="sparklane/engine-sim:bench"
built_image=""
cleanup() {
	"$starter" --config "$work/sparklane.toml" control stop >/dev/null 2>&1 || true
	if [[ -n "$built_image" ]]; then docker image rm -f "$bench_image" >/dev/null 2>&1 || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

cd "$here"
go build -o "$starter" ./starter
go build -o "$work/worker" ./worker
export SPARKLANE_CONTROL_EXE="$work/worker"
go build -o "$work/hmb" ./internal/engine/hubmirror/cmd/hubmirror-bench
go build -o "$work/orchbench" ./scripts/orchbench
hmb="$work/hmb"
nas="$work/nas/hub"
root="$work/node" # the node's fs_root: its /srv/sparklane is $root/srv/sparklane
mkdir -p "$root/srv/sparklane" "$work/recipes" "$work/state" "$work/peer"

. "$here/scripts/lib/bench.sh"
# settle follows every cold write phase: on this VM a 4 GiB write leaves
# the host flushing for seconds after our sync returns, and the next writer
# would pay for it (run 1's first phase, which follows no write, was ~1.5×
# faster than the same phase in later runs). SETTLE seconds, default 20.
settle() {
	sync
	sleep "${SETTLE:-20}"
}
# warm reads every tool's binary back into the page cache (see above).
warm() {
	[[ ${BINARIES:-warm} == cold ]] && return 0
	cat "$starter" "$hmb" "$(command -v cp)" >/dev/null
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

echo "== generating ${SIZE_GIB} GiB in one blob under $work (load: $(cut -d' ' -f1-3 /proc/loadavg))"
"$hmb" gen -hub "$nas" -repo org/blob -gib "$SIZE_GIB" -files 1
settle
bytes=$(du -sb --apparent-size "$nas/models--org--blob" | cut -f1)

cat >"$work/sparklane.toml" <<TOML
state_dir = "$work/state"
recipes_dir = "$work/recipes"
hf_cache_dir = "$nas"
shared_roots = ["$work/nas"]

[temporal]
address = ""
namespace = "default"
port = $(freeport)
ui_port = $(freeport)

[[nodes]]
name = "n1"
ssh = ""
address = "127.0.0.1"
roots = ["/srv/sparklane"]
fs_root = "$root"

[[clusters]]
name = "one"
nodes = ["n1"]
TOML
need=$(((3 * RUNS + 4) * SIZE_GIB + 1))
avail=$(df -P --block-size=1G "$work" | awk 'NR == 2 { print $4 }')
if ((avail < need)); then
	echo "bench-stage.sh: $work has ${avail} GiB free; ${RUNS} runs of ${SIZE_GIB} GiB need ${need} GiB (nothing is deleted between phases)" >&2
	exit 1
fi
# recipe RUN writes the lane with its dst for run RUN.
recipe() {
	cat >"$work/recipes/blob.toml" <<TOML
name = "blob"
cluster = "one"
runtime = "sim"
image = "$bench_image"
model = "org/blob"
command = "/engine-sim /hub --port {port}"

[defaults]
port = 18999

[[staging]]
kind = "hub-mirror"
id = "weights"
src = "$nas"
dst = "/srv/sparklane/hf$1"
repos = ["org/blob"]
verify = "sampled"
TOML
}
recipe 1
if ! docker image inspect "$bench_image" >/dev/null 2>&1; then
	printf 'FROM scratch\nLABEL sparklane.bench=stage\n' | docker build -q -t "$bench_image" - >/dev/null
	built_image=1
fi
cfg=(--config "$work/sparklane.toml")
s=$(now)
"$starter" "${cfg[@]}" control start >/dev/null
echo "  control service started in $(secs "$s" "$(now)") s"

st_cold=() st_verify=() eng_cold=() eng_p2=() cp_sync=()
# One phase per tool; each is a cold write (then a settle) and, for ours,
# the second pass over what it wrote. Run i starts with a different tool
# (the order rotates), so no tool always follows the same other one; the
# slot after the data generation is the warm-up's (below).
# timed ARRAY LABEL OUT CMD...: drop the page cache, warm the binaries,
# run CMD (stdout to OUT), append its seconds to ARRAY and print them
# under LABEL.
timed() {
	local -n acc=$1
	local label=$2 out=$3
	shift 3
	drop
	warm
	s=$(now)
	"$@" >"$out"
	e=$(now); t=$(secs "$s" "$e"); acc+=("$t")
	printf '  %-28s: %s s\n' "$label" "$t"
}
cp_sync_tree() { mkdir -p "$1" && cp -a "$nas/models--org--blob" "$1/" && sync; }
phase_starter() {
	timed st_cold "starter stage, cold" "$work/stage.json" "$starter" "${cfg[@]}" --json stage --lane blob
	echo "    (the engine inside the activity: $(python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["nodes"][0]["blocks"][0]["seconds"])' "$work/stage.json") s)"
	# Where the rest went: the run's wall time in the history against the
	# time its activities took (the CLI's own time is the starter's
	# minus the run's wall).
	echo "    ($("$work/orchbench" overhead "${cfg[@]}" "stage/blob"))"
	settle
	timed st_verify "starter stage, verify-only" "$work/stage2.json" "$starter" "${cfg[@]}" --json stage --lane blob
}
phase_engine() {
	timed eng_cold "engine stage, cold" /dev/null "$hmb" stage -src "$nas" -dst "$work/peer/eng$1" -repos org/blob
	settle
	timed eng_p2 "engine 2nd pass" /dev/null "$hmb" stage -src "$nas" -dst "$work/peer/eng$1" -repos org/blob
}
phase_cp() {
	timed cp_sync "cp -a + sync" /dev/null cp_sync_tree "$work/peer/cp$1"
	settle
}
# An untimed copy first: the first cold phase after the data generation
# was 1.4-1.6x slower than the same phase later (18.1 and 15.8 s against
# 9.4-12.7 s), and with the rotation below it is always the starter's.
# This copy takes that slot. (It took only part of the penalty in the run
# that added it: run 1 was still the slowest for all three tools.)
echo "== warm-up, untimed: cp -a + sync"
drop
cp_sync_tree "$work/peer/warmup"
settle
# The machine's own read and write speed, at the start and at the end:
# on this VM it has differed severalfold between days and within one run
# (both go through the page cache, whose memory the VM takes back from
# its host: see "Drop-behind" in the README), so a table row is only
# comparable with another beside these figures.
# disk LABEL: a cold read of the blob, then SIZE_GIB of zeros written and
# fdatasynced into new space (kept until the end, like every phase's).
disk() {
	local s e r
	drop
	s=$(now); cat "$nas"/models--org--blob/blobs/* >/dev/null; e=$(now); r=$(secs "$s" "$e")
	drop
	s=$(now); dd if=/dev/zero of="$work/peer/dd-$1" bs=16M count=$((SIZE_GIB * 64)) conv=fdatasync status=none; e=$(now)
	echo "  disk, $1: cold read of the blob $r s, ${SIZE_GIB} GiB written + fdatasync $(secs "$s" "$e") s"
	settle
}
disk start
phases=(starter engine cp)
for i in $(seq 1 "$RUNS"); do
	echo
	echo "== run $i of $RUNS (load: $(cut -d' ' -f1-3 /proc/loadavg))"
	recipe "$i"
	for k in 0 1 2; do
		"phase_${phases[$(((i - 1 + k) % 3))]}" "$i"
	done
done
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); b=r["nodes"][0]["blocks"][0]; print("  last verify-only stage: copied %d B, verified %d files, engine %.3f s" % (b["copied_bytes"], b["verified_files"], b["seconds"]))' "$work/stage2.json"

# Where a verify-only pass's time goes, warm (nothing dropped): the
# starter's own start-up (a client only: the embedded server is linked
# into the worker, not here), the Stage workflow's wall time and the time
# inside its activities (from the run's history).
echo
echo "== verify-only, warm page cache"
st_warm=() st_help=() st_helpcold=()
for i in $(seq 1 "$RUNS"); do
	s=$(now); "$starter" "${cfg[@]}" --json stage --lane blob >/dev/null; e=$(now); st_warm+=("$(secs "$s" "$e")")
	s=$(now); "$starter" --help >/dev/null; e=$(now); st_help+=("$(secs "$s" "$e")")
done
# The same start-up after a page-cache drop: the pages the control
# service has mapped stay (see the top); the rest are read from disk.
for i in $(seq 1 "$RUNS"); do
	drop
	s=$(now); "$starter" --help >/dev/null; e=$(now); st_helpcold+=("$(secs "$s" "$e")")
done
echo "  starter stage, verify-only  : ${st_warm[*]} s"
echo "  starter --help (start-up)   : ${st_help[*]} s"
echo "  starter --help, after a drop: ${st_helpcold[*]} s"
"$work/orchbench" overhead "${cfg[@]}" "stage/blob" | sed 's/^/  /'

echo
disk end
m_st=$(median "${st_cold[@]}"); m_sv=$(median "${st_verify[@]}"); m_ec=$(median "${eng_cold[@]}")
m_e2=$(median "${eng_p2[@]}"); m_cp=$(median "${cp_sync[@]}")
m_sw=$(median "${st_warm[@]}"); m_h=$(median "${st_help[@]}"); m_hc=$(median "${st_helpcold[@]}")
# Paired: each run's cp+sync against that run's starter and engine (the
# disk's speed drifts between runs; within a run the phases are adjacent).
pair_st=() pair_ec=()
for i in $(seq 0 $((RUNS - 1))); do
	pair_st+=("$(ratio "${cp_sync[$i]}" "${st_cold[$i]}")")
	pair_ec+=("$(ratio "${cp_sync[$i]}" "${eng_cold[$i]}")")
done
echo
echo "== medians of $RUNS runs, $bytes bytes (load now: $(cut -d' ' -f1-3 /proc/loadavg))"
echo "  starter stage cold $m_st s, engine cold $m_ec s, cp -a + sync $m_cp s"
echo "  starter stage verify-only $m_sv s (caches dropped), $m_sw s (warm), engine 2nd pass $m_e2 s"
echo "  binaries: ${BINARIES:-warm} before each timed phase; starter start-up $m_h s warm, $m_hc s after a drop"
echo "  per-run cp+sync / starter cold: ${pair_st[*]} (median $(median "${pair_st[@]}")x); cp+sync / engine cold: ${pair_ec[*]} (median $(median "${pair_ec[@]}")x)"
echo "RATIOS product: starter stage cold / cp+sync throughput = $(ratio "$m_cp" "$m_st")x (goal >= 0.9)," \
	"engine cold / cp+sync = $(ratio "$m_cp" "$m_ec")x, starter cold / engine cold time = $(ratio "$m_st" "$m_ec")x;" \
	"starter verify-only = $m_sv s cold, $m_sw s warm (goal < 1 s; start-up alone $m_h s), engine 2nd pass = $m_e2 s"
