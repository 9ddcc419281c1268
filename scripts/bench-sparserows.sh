#!/usr/bin/env bash
# bench-sparserows.sh [TABLE_GIB] — pack one rank's rows of a >= 4 GiB
# table (two layers, one shard each) and compare with dd reading the same
# byte ranges in the same cache state (and with dd copying them to a file
# with fdatasync, the peer that also pays for the disk writes); then time
# verify-only passes.
#
# Env: BENCH_DIR (work dir, default a new dir under /var/tmp; removed at the
# end unless KEEP=1), RANK (1), TP (4), SHARE4 (1: also pack the whole table
# as one rank's share and time a cold verify-only pass of it).
set -euo pipefail
GIB=${1:-4}
RANK=${RANK:-1}
TP=${TP:-4}
cd "$(dirname "$0")/.."
WORK=${BENCH_DIR:-$(mktemp -d /var/tmp/sparserows-bench.XXXXXX)}
mkdir -p "$WORK"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
BIN="$WORK/sparserows-bench"
go build -o "$BIN" ./internal/engine/sparserows/cmd/sparserows-bench

now() { date +%s.%N; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
mibps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f MiB/s", n / 1048576 / s }'; }

# Cold cache: the global drop when allowed (root outside a container), else
# POSIX_FADV_DONTNEED on every file involved (dd iflag=nocache count=0),
# which works unprivileged.
DROP_MODE=fadvise
if sync && (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then DROP_MODE=drop_caches; fi
drop() {
  sync
  if [ "$DROP_MODE" = drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; return; fi
  for f in "$WORK"/src/*.safetensors "$WORK"/dst*/*; do
    [ -f "$f" ] && dd if="$f" iflag=nocache count=0 status=none 2>/dev/null || true
  done
}

echo "== generating ${GIB} GiB table (2 layers) in $WORK/src"
t0=$(now)
"$BIN" gen -src "$WORK/src" -gib "$GIB" -layers 2
echo "   $(awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}') s; cache drop mode: $DROP_MODE"
mapfile -t RANGES < <("$BIN" ranges -src "$WORK/src" -layers 2 -rank "$RANK" -tp "$TP")
SHARE=0
for r in "${RANGES[@]}"; do set -- $r; SHARE=$((SHARE + $3)); done
echo "   rank $RANK of $TP: $(awk -v n=$SHARE 'BEGIN{printf "%.2f GiB", n/1073741824}') in ${#RANGES[@]} ranges"

dd_read() {
  local t0; t0=$(now)
  for r in "${RANGES[@]}"; do
    set -- $r
    dd if="$1" bs=16M skip="$2" count="$3" iflag=skip_bytes,count_bytes of=/dev/null status=none
  done
  awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.3f", a-b}'
}
dd_copy() { # the same ranges read and written to a file, fdatasync'd: the disk-write-bound peer
  local t0; t0=$(now)
  for r in "${RANGES[@]}"; do
    set -- $r
    dd if="$1" of="$WORK/ddcopy" bs=16M skip="$2" count="$3" iflag=skip_bytes,count_bytes conv=fdatasync status=none
  done
  rm -f "$WORK/ddcopy"
  awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.3f", a-b}'
}
pack() { # mode dst
  rm -rf "$2"
  local t0; t0=$(now)
  "$BIN" pack -src "$WORK/src" -dst "$2" -layers 2 -rank "$RANK" -tp "$TP" -mode "$1" > "$2.json"
  awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.3f", a-b}'
}
verify() { # extra flags
  local t0; t0=$(now)
  "$BIN" verify -src "$WORK/src" -dst "$WORK/dst-cfr" -layers 2 -rank "$RANK" -tp "$TP" "$@" > /dev/null
  awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.3f", a-b}'
}

for state in cold warm; do
  echo "== $state cache"
  prep() { if [ $state = cold ]; then drop; else dd_read > /dev/null; fi; }
  prep; T_DD=$(dd_read)
  prep; T_DDC=$(dd_copy)
  prep; T_CFR=$(pack copy_file_range "$WORK/dst-cfr")
  prep; T_RW=$(pack readwrite "$WORK/dst-rw")
  echo "   dd read of the rank's ranges : ${T_DD} s  $(mibps $SHARE $T_DD)"
  echo "   dd copy of the ranges (fsync): ${T_DDC} s  $(mibps $SHARE $T_DDC)"
  echo "   pack, copy_file_range        : ${T_CFR} s  $(mibps $SHARE $T_CFR)  ratio vs dd read $(ratio $T_DD $T_CFR)x, vs dd copy $(ratio $T_DDC $T_CFR)x"
  echo "   pack, pread/pwrite 16 MiB    : ${T_RW} s  $(mibps $SHARE $T_RW)  ratio vs dd read $(ratio $T_DD $T_RW)x, vs dd copy $(ratio $T_DDC $T_RW)x"
  cmp -s "$WORK/dst-cfr/engram-l0-r${RANK}of${TP}.bin" "$WORK/dst-rw/engram-l0-r${RANK}of${TP}.bin" || { echo "packed files differ between copy modes" >&2; exit 1; }
  rm -rf "$WORK/dst-rw"
done

echo "== verify-only (sampled, ledger) and a second pack pass (writes nothing)"
drop; T_V_COLD=$(verify)
T_V_WARM=$(verify)
t0=$(now); "$BIN" pack -src "$WORK/src" -dst "$WORK/dst-cfr" -layers 2 -rank "$RANK" -tp "$TP" > "$WORK/second.json"
T_SECOND=$(awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.3f", a-b}')
grep -q '"copied_bytes":0' "$WORK/second.json" || { echo "second pass wrote data: $(cat "$WORK/second.json")" >&2; exit 1; }
echo "   verify (sampled), cold       : ${T_V_COLD} s (target < 2 s)"
echo "   verify (sampled), warm       : ${T_V_WARM} s"
echo "   second Stage pass (0 written): ${T_SECOND} s"
drop; T_V_FULL=$(verify -full)
echo "   verify --full (every byte)   : ${T_V_FULL} s  ratio vs dd cold $(ratio $T_DD $T_V_FULL)x"

if [ "${SHARE4:-1}" = 1 ]; then
  echo "== verify-only of a ${GIB} GiB share (tp=1: the rank owns every row)"
  rm -rf "$WORK/dst-cfr"
  "$BIN" pack -src "$WORK/src" -dst "$WORK/dst-all" -layers 2 -rank 0 -tp 1 > /dev/null
  drop
  t0=$(now); "$BIN" verify -src "$WORK/src" -dst "$WORK/dst-all" -layers 2 -rank 0 -tp 1 > /dev/null
  echo "   verify (sampled), cold       : $(awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.3f", a-b}') s (target < 2 s)"
fi
