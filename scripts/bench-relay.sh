#!/usr/bin/env bash
# bench-relay.sh [NODES] [LANE_MIB] [NAS_MBIT]
#
# The staging relay on the network-namespace test fleet (internal/testkit/testfleet),
# side by side in one run (defaults: 4 nodes, a 1024 MiB lane of 4 shards,
# the NAS link at 160 Mbit/s):
#   - a 1-node stage, an N-node stage with every node reading the NAS, and an
#     N-node stage through the relay: wall times and their ratios;
#   - NAS bytes read each way, as the engine counts them and as the NAS
#     host's own sftp-server processes count them (rchar in /proc/PID/io);
#   - a receiving node killed -9 mid-relay and restarted: bytes re-copied.
# The NAS is its own test-fleet host: the nodes mount it with sshfs over its
# sshd (host key checked), and tc (tbf) on its interface limits the link.
# Needs root, what scripts/testfleet needs, and sshfs (installed with apt
# when missing, as .ci/run installs the test tools).
set -euo pipefail
NODES=${1:-4}
LANE_MIB=${2:-1024}
NAS_MBIT=${3:-160}
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
	echo "bench-relay.sh: needs root (network namespaces, tc, FUSE)" >&2
	exit 1
fi
if ! command -v sshfs >/dev/null; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y sshfs >/dev/null
fi
bin="${TMPDIR:-/tmp}/sparklane-relay-bench"
go build -o "$bin" ./internal/engine/relay/cmd/relay-bench
exec "$bin" --nodes "$NODES" --size-mib "$LANE_MIB" --nas-mbit "$NAS_MBIT"
