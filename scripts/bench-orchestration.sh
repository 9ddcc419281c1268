#!/usr/bin/env bash
# Orchestration overhead of the demo cutovers (wall time minus the time at
# least one activity was executing, children included) and `starter status`
# on a fleet of 32 local nodes. Needs Docker (the demo runs engine-sim).
#   scripts/bench-orchestration.sh [DEMO_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-$(mktemp -d /tmp/sparklane-orchbench.XXXX)}
go build -o /tmp/orchbench ./scripts/orchbench
echo "== demo (4-node then 2-node cutover) in $dir"
go run ./starter demo --exit --dir "$dir" --port 7299 --ui-port 8299 >"$dir.demo.log" 2>&1 || { tail -30 "$dir.demo.log"; exit 1; }
grep -E "^cutover to|demo done" "$dir.demo.log"
/tmp/orchbench overhead --config "$dir/sparklane.toml" cutover/demo-4x cutover/demo-2x
echo "== starter status on 32 local nodes"
/tmp/orchbench status --nodes 32
go run ./starter --config "$dir/sparklane.toml" stop --cluster demo-4x >/dev/null 2>&1 || true
# that stop started the demo fleet's control service again: stop it too
go run ./starter --config "$dir/sparklane.toml" control stop >/dev/null 2>&1 || true
